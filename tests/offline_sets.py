"""Labelled memories for the offline model, run through a real job and scored.

A set is JSON Lines (tests/fixtures/offline_*.jsonl; `#` lines are comments), one memory a line:
  {"id", "style", "raw": the memory an agent writes,
   "existing": [{"id", "content"}]: memories already stored (the job's search finds them),
   "expect": {"facts": substrings some fact must contain,
              "prefix": discourse prefix / speaker attribution no fact may contain,
              "noise": chit-chat inside the memory no fact may contain,
              "chitchat": true when the memory must give no fact at all,
              "changes": {existing id: "update" | "delete"}: the memory it changes,
              "none": existing ids the memory only restates,
              "kind": value-change | refinement | reversal | retraction}}

Each memory runs in an agent of its own: its existing memories are stored and embedded, the raw
memory is remembered, and its job runs (extraction, search, decisions, the write) exactly as a
worker runs it, with the offline provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from memory import writes
from memory.models import Job
from memory.writes import Actor
from pipeline import tasks
from pipeline.models import Proposal

FIXTURES = Path(__file__).parent / "fixtures"
DESTRUCTIVE = ("update", "delete")


def load(name: str) -> list[dict]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip() and not line.startswith("#")]


@dataclass
class Ran:
    case: dict
    facts: list[str]
    # (action, existing id or None, fact) of every proposal the job made
    proposals: list[tuple[str, str | None, str]]


def run(case: dict) -> Ran:
    actor = Actor(f"agent-{case['id']}", "agent")
    agent = actor.name
    ids = {}
    for item in case["existing"]:
        memory = writes.remember(
            item["content"], actor=actor, agent_id=agent, create_job=False
        ).memory
        ids[memory.id] = item["id"]
    tasks.embed_missing()  # a stored memory has its vector, as after its own job
    job = writes.remember(case["raw"], actor=actor, agent_id=agent).job
    tasks.run_job(job.id)
    job = Job.objects.get(id=job.id)
    assert job.status == "completed", (case["id"], job.status, job.last_error)
    facts = [fact["content"] for fact in job.result.get("facts", [])]
    proposals = [
        (p.action, ids.get(p.target_memory_id), p.fact_content)
        for p in Proposal.objects.filter(job=job).order_by("position")
    ]
    return Ran(case, facts, proposals)


@dataclass
class Figures:
    memories: int = 0
    prefix_facts: int = 0  # facts keeping a discourse prefix or speaker attribution
    chitchat_memories: int = 0
    chitchat_with_facts: int = 0  # chit-chat memories turned into facts
    noise_facts: int = 0  # facts keeping chit-chat from a mixed memory
    changes_expected: int = 0
    changes_found: int = 0  # an UPDATE or DELETE on the memory the label says it changes
    changes_exact: int = 0  # ... with the labelled action
    false_destructive: int = 0  # UPDATE/DELETE on a memory the label does not change
    facts_expected: int = 0
    facts_missing: int = 0  # expected substrings in no fact
    none_expected: int = 0
    none_found: int = 0
    false_none: int = 0  # NONE on a memory that does not say it: the fact is lost
    details: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.memories} memories: discourse prefixes kept in {self.prefix_facts} facts; "
            f"chit-chat turned into facts {self.chitchat_with_facts}/{self.chitchat_memories} "
            f"memories (+{self.noise_facts} chit-chat facts in mixed ones); UPDATEs found "
            f"{self.changes_found}/{self.changes_expected} ({self.changes_exact} with the labelled "
            f"action); false UPDATE/DELETE {self.false_destructive}; expected facts missing "
            f"{self.facts_missing}/{self.facts_expected}; NONE found "
            f"{self.none_found}/{self.none_expected}; false NONE {self.false_none}"
        )


def _has(facts: list[str], part: str) -> list[str]:
    return [f for f in facts if part.lower() in f.lower()]


def score(results: list[Ran]) -> Figures:
    figures = Figures(memories=len(results))
    for ran in results:
        expect, name, facts = ran.case["expect"], ran.case["id"], ran.facts
        for fact in facts:
            if any(_has([fact], p) for p in expect.get("prefix", [])):
                figures.prefix_facts += 1
                figures.details.append(f"{name} prefix kept: {fact}")
            if any(_has([fact], p) for p in expect.get("noise", [])):
                figures.noise_facts += 1
                figures.details.append(f"{name} chit-chat kept: {fact}")
        if expect.get("chitchat"):
            figures.chitchat_memories += 1
            if facts:
                figures.chitchat_with_facts += 1
                figures.details.append(f"{name} chit-chat became facts: {facts}")
        for part in expect.get("facts", []):
            figures.facts_expected += 1
            if not _has(facts, part):
                figures.facts_missing += 1
                figures.details.append(f"{name} missing {part!r} in {facts}")
        changes = expect.get("changes", {})
        for action, target, fact in ran.proposals:
            if action in DESTRUCTIVE and target not in changes:
                figures.false_destructive += 1
                figures.details.append(f"{name} false {action} of {target}: {fact}")
        for target, action in changes.items():
            figures.changes_expected += 1
            got = {a for a, t, _ in ran.proposals if t == target and a in DESTRUCTIVE}
            figures.changes_found += bool(got)
            figures.changes_exact += action in got
            if not got:
                figures.details.append(f"{name} missed {action} of {target}: {ran.proposals}")
        for action, target, fact in ran.proposals:
            if action == "none" and target is not None and target not in expect.get("none", []):
                figures.false_none += 1
                figures.details.append(f"{name} false none on {target}: {fact}")
        for target in expect.get("none", []):
            figures.none_expected += 1
            figures.none_found += any(a == "none" and t == target for a, t, _ in ran.proposals)
    return figures


def measure(name: str) -> Figures:
    return score([run(case) for case in load(name)])

"""The built-in offline model on the demo set, scored against the demo's labels
(devtools.demo_data.DEMO_EXPECTED): what every newcomer without a model server meets first."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from devtools.demo_data import DEMO_EXPECTED, DEMO_MEMORIES, Expected
from memory.content import normalize
from memory.models import DERIVED_SOURCE_TYPE, Job, Memory
from pipeline.models import Proposal

pytestmark = pytest.mark.django_db
NEW_KNOWLEDGE = Expected()


def demo_origins() -> dict[str, int]:
    """Memory id -> index of the demo memory it is (raw) or was extracted from (derived)."""
    by_hash: dict[str, int] = {}
    for index, item in enumerate(DEMO_MEMORIES):
        by_hash.setdefault(normalize(item["content"]).hash, index)
    origins = {}
    for memory in Memory.objects.exclude(source_type=DERIVED_SOURCE_TYPE):
        if memory.content_hash in by_hash:
            origins[memory.id] = by_hash[memory.content_hash]
    for memory in Memory.objects.filter(source_type=DERIVED_SOURCE_TYPE, source_id__in=origins):
        origins[memory.id] = origins[memory.source_id]
    return origins


def score_demo() -> dict[str, float]:
    origins = demo_origins()
    destructive = Proposal.objects.filter(
        action__in=["update", "delete"], source_memory_id__in=origins
    )
    right, wrong = set(), []
    for proposal in destructive:
        source = origins[proposal.source_memory_id]
        expected = DEMO_EXPECTED.get(source, NEW_KNOWLEDGE)
        if (
            expected.changes is not None
            and origins.get(proposal.target_memory_id) == expected.changes
        ):
            right.add(source)
        else:
            wrong.append((source, origins.get(proposal.target_memory_id), proposal.fact_content))
    changes = {i for i, e in DEMO_EXPECTED.items() if e.changes is not None}

    facts, bad_facts = 0, []
    for job in Job.objects.filter(memory_id__in=origins, status="completed"):
        expected = DEMO_EXPECTED.get(origins[job.memory_id], NEW_KNOWLEDGE)
        for fact in job.result["facts"]:
            facts += 1
            text = fact["content"]
            if text.endswith("?") or any(s.lower() in text.lower() for s in expected.not_in_facts):
                bad_facts.append(text)
    proposed = destructive.count()
    return {
        "update_delete_proposed": proposed,
        "update_delete_precision": (proposed - len(wrong)) / proposed,
        "changes_found": len(right & changes) / len(changes),
        "facts": facts,
        "fact_precision": (facts - len(bad_facts)) / facts,
        "wrong": wrong,
        "missed": sorted(changes - right),
        "bad_facts": bad_facts,
    }


@pytest.mark.slow  # the whole demo store
def test_the_offline_model_is_a_sensible_baseline_on_the_demo_set(capsys):
    call_command("seed_demo")  # the offline provider, as in `make run` without a model server
    capsys.readouterr()
    scores = score_demo()
    figures = (
        f"{scores['update_delete_proposed']} UPDATE/DELETE proposed, precision "
        f"{scores['update_delete_precision']:.2f}; labelled changes found "
        f"{scores['changes_found']:.2f} (missed: demo memories {scores['missed']}); "
        f"{scores['facts']} facts, precision {scores['fact_precision']:.2f}"
    )
    print(f"offline model on the demo set: {figures}")  # pytest -s shows it
    # Share of proposed UPDATE/DELETE that target the memory the labels say they change.
    assert scores["update_delete_precision"] >= 0.9, (figures, scores["wrong"])
    # No question and no "From the planning meeting:" ever becomes (part of) a fact.
    assert scores["fact_precision"] == 1.0, (figures, scores["bad_facts"])
    # Recall is not the bar, but a heuristic that stops finding changes should fail loudly.
    assert scores["changes_found"] >= 0.8, figures

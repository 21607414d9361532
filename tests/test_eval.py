"""manage.py eval: the case format, the scores of a scripted model, the shipped set, and that an
evaluation never writes anything."""

from __future__ import annotations

import hashlib
import json
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError

from pipeline.eval import cases as case_format
from pipeline.eval.run import run_set
from pipeline.llm import get_chat_client
from pipeline.llm.prompts import PROMPT_VERSION
from tests.fake_ollama import Script
from tests.pipeline_support import fact_in_prompt, is_extraction

pytestmark = pytest.mark.django_db


def decision_case(cid, category, fact, candidates, expect):
    return {
        "id": cid,
        "kind": "decision",
        "category": category,
        "fact": {"content": fact, "type": "fact", "confidence": 0.9},
        "candidates": [
            {"id": i, "content": text, "type": "fact", "pinned": False} for i, text in candidates
        ],
        "expect": expect,
    }


def extraction_case(cid, raw, expect):
    return {"id": cid, "kind": "extraction", "category": "gamma", "raw": raw, "expect": expect}


CACHING_ON = "Response caching is enabled on the catalog API"
UNRELATED = "The office closes at 8 pm on weekdays"
LEDGER = "The ledger service listens on port 8080"


def reply(action, target=None, reason="scripted"):
    return json.dumps({"action": action, "targetId": target, "confidence": 0.8, "reason": reason})


# Each case, and what the scripted model answers: right, wrong, a hallucinated target, garbage.
SMALL_SET = [
    (
        decision_case(
            "d1", "alpha", "Priya prefers squash merges", [("c1", UNRELATED)], {"action": "add"}
        ),
        reply("add"),
    ),
    (
        decision_case(
            "d2",
            "alpha",
            "Response caching is disabled on the catalog API",
            [("c1", CACHING_ON), ("c2", UNRELATED)],
            {"action": "update", "target": "c1", "reviewNeeded": True},
        ),
        reply("update", "c1"),
    ),
    (
        decision_case(
            "d3",
            "alpha",
            "The ledger service listens on port 9090",
            [("c1", LEDGER), ("c2", UNRELATED)],
            {"action": "update", "target": "c1", "reviewNeeded": False},
        ),
        reply("update", 2),
    ),
    (
        decision_case(
            "d4",
            "alpha",
            "The ledger service no longer listens on port 8080",
            [("c1", LEDGER)],
            {"action": "delete", "target": "c1", "reviewNeeded": True},
        ),
        reply("delete", "m-404"),
    ),
    (
        decision_case(
            "d5",
            "alpha",
            "The office closes at 8 pm on weekdays!",
            [("c1", UNRELATED)],
            {"action": "none", "target": "c1"},
        ),
        reply("none", 1),
    ),
    (
        decision_case(
            "d6",
            "beta",
            "The office closes at 20:00 on weekdays",
            [("c1", UNRELATED)],
            {"action": "none"},
        ),
        "I think this one is fine as it is",
    ),
    (
        decision_case(
            "d7",
            "beta",
            "Kenji prefers dark mode in Grafana",
            [("c1", UNRELATED)],
            {"action": "add"},
        ),
        reply("delete", "c1"),
    ),
    (
        decision_case(
            "d8",
            "beta",
            "The ledger service listens on port 7070",
            [("c1", LEDGER)],
            {"action": "update", "target": "c1"},
        ),
        reply("update", "c1", reason=""),
    ),
    (
        decision_case(
            "d9", "beta", "Ines owns the customer satisfaction survey", [], {"action": "add"}
        ),
        None,
    ),
    (
        decision_case(
            "d10",
            "beta",
            "The ledger service listens on port 6060",
            [("c1", LEDGER)],
            {"notAction": "delete"},
        ),
        reply("update", "c1"),
    ),
    (
        decision_case(
            "d11",
            "beta",
            "The ledger service listens on port 5050",
            [("c1", LEDGER)],
            {"notAction": "update"},
        ),
        reply("update", "c1"),
    ),
    (
        extraction_case(
            "e1",
            "From the retro: the billing API runs on port 8443.",
            {"facts": ["8443"], "forbidden": ["retro"], "maxFacts": 1},
        ),
        json.dumps(
            {
                "facts": [
                    {
                        "content": "The billing API runs on port 8443",
                        "type": "fact",
                        "confidence": 0.9,
                    }
                ],
                "entities": [],
            }
        ),
    ),
    (
        extraction_case(
            "e2",
            "Priya deploys on Tuesdays. The password is hunter2x.",
            {"facts": ["priya", "Tuesday"], "forbidden": ["hunter2"], "maxFacts": 1},
        ),
        json.dumps(
            {
                "facts": [
                    {"content": "Priya deploys on Tuesdays", "type": "fact", "confidence": 0.9},
                    {
                        "content": "The deploy password is hunter2x",
                        "type": "fact",
                        "confidence": 0.9,
                    },
                ],
                "entities": [],
            }
        ),
    ),
    (
        extraction_case(
            "e3",
            "We moved the ledger events to Kafka last week.",
            {"facts": ["Kafka"], "maxFacts": 2},
        ),
        "no json here, sorry",
    ),
]


def write_set(path, cases, header="# a small set\n"):
    path.write_text(header + "".join(json.dumps(c) + "\n" for c in cases))
    return path


class Scripted:
    """The fake server's chat handler: each case's scripted reply, found by its fact or text."""

    def __init__(self, fake):
        self.by_text = {}
        for case, answer in SMALL_SET:
            if answer is not None:
                self.by_text[case.get("raw") or case["fact"]["content"]] = answer
        self.prompts = []
        fake.chat_handler = self

    def __call__(self, payload):
        prompt = payload["messages"][-1]["content"]
        self.prompts.append(prompt)
        if is_extraction(payload):
            return self.by_text[prompt.rsplit("Text:\n", 1)[1]]
        return self.by_text[fact_in_prompt(prompt)]


def row_counts() -> dict[str, int]:
    return {m._meta.label: m._base_manager.count() for m in apps.get_models() if m._meta.managed}


def run_eval(*args):
    out, err = StringIO(), StringIO()
    call_command("eval", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_scripted_model_gets_exactly_the_scores_its_answers_deserve(fake_ollama, tmp_path):
    path = write_set(tmp_path / "small.jsonl", [case for case, _ in SMALL_SET])
    scripted = Scripted(fake_ollama)
    before = row_counts()
    out, err = run_eval(
        "--set",
        str(path),
        "--provider",
        "ollama",
        "--model",
        "eval-model:1b",
        "--json",
        str(tmp_path / "report.json"),
        "--concurrency",
        "3",
    )
    assert row_counts() == before  # nothing written anywhere
    report = json.loads((tmp_path / "report.json").read_text())
    latency = report.pop("latencyMs")
    assert 0 <= latency["p50"] <= latency["p95"]
    chats = fake_ollama.calls("/api/chat")
    assert len(chats) == 13  # d9 has no candidates: ADD without a model call
    assert {c["model"] for c in chats} == {"eval-model:1b"}
    tokens = {
        "prompt": sum(len(c["messages"][-1]["content"]) // 4 for c in chats),
        "completion": sum(len(scripted.by_text[t]) // 4 for t in scripted.by_text),
    }
    add = {"precision": 1.0, "recall": 0.6667, "f1": 0.8, "support": 3}
    update = {"precision": 0.5, "recall": 0.3333, "f1": 0.4, "support": 3}
    delete = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    none = {"precision": 1.0, "recall": 0.5, "f1": 0.6667, "support": 2}
    zero = {"add": 0, "update": 0, "delete": 0, "none": 0, "dropped": 0}
    assert report == {
        "set": {
            "name": "small.jsonl",
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "cases": 14,
            "selection": "",
        },
        "provider": "ollama",
        "model": "eval-model:1b",
        "promptVersion": PROMPT_VERSION,
        "decision": {
            "cases": 11,
            "accuracy": 0.4545,  # d1 d2 d5 d9 d10
            "perAction": {"add": add, "update": update, "delete": delete, "none": none},
            "confusion": {
                "add": {**zero, "add": 2, "delete": 1},
                "update": {**zero, "update": 2, "dropped": 1},
                "delete": {**zero, "dropped": 1},
                "none": {**zero, "none": 1, "dropped": 1},
            },
            "destructiveFalsePositiveRate": 0.4286,  # d7 d10 d11 of d1 d5 d6 d7 d9 d10 d11
            "wrongTargetRate": 0.25,  # d3 of d2 d3 d4 d8
            "droppedRate": 0.2727,  # d4 (hallucinated), d6 (garbage), d8 (empty reason)
            # d2 flagged; d4 dropped
            "reviewNeeded": {"precision": 1.0, "recall": 0.5, "flagged": 1, "needed": 2},
            "notAction": {"cases": 2, "correct": 1},
        },
        "extraction": {
            "cases": 3,
            "facts": 4,
            "factRecall": 0.75,
            "forbiddenRate": 0.3333,
            "overMaxRate": 0.3333,
        },
        "categories": {
            "alpha": {"cases": 5, "correct": 3},
            "beta": {"cases": 6, "correct": 2},
            "gamma": {"cases": 3, "correct": 1},
        },
        "tokens": tokens,
        "failures": report["failures"],
    }
    failures = {f["id"]: f for f in report["failures"]}
    assert list(failures) == ["d3", "d4", "d6", "d7", "d8", "d11", "e2", "e3"]
    assert failures["d3"]["got"]["target"] == "c2"
    assert failures["d3"]["expected"] == {"action": "update", "target": "c1", "reviewNeeded": False}
    assert failures["d4"]["got"]["dropped"] is True
    assert "non-candidate" in failures["d4"]["got"]["warnings"][0]
    assert failures["d6"]["reply"] == "I think this one is fine as it is"
    assert failures["d7"]["got"]["action"] == "delete"
    assert "missing reason" in failures["d8"]["got"]["warnings"][0]
    assert failures["e2"]["got"]["forbiddenFound"] == ["hunter2"]
    assert failures["e3"]["got"] == {"facts": [], "missing": ["Kafka"], "forbiddenFound": []}
    assert failures["e3"]["reply"] == "no json here, sorry"
    # The table and the progress bar.
    assert "update         3     0.500  0.333  0.400" in out
    assert "14/14 cases" in err


def test_the_candidates_are_shown_with_the_cases_own_ids_in_the_jobs_format(fake_ollama, tmp_path):
    path = write_set(tmp_path / "one.jsonl", [SMALL_SET[1][0]])
    scripted = Scripted(fake_ollama)
    run_eval("--set", str(path), "--provider", "ollama")
    (prompt,) = scripted.prompts
    assert f"[1] ID: c1\nType: fact\nContent: {CACHING_ON}\n\n[2] ID: c2\n" in prompt


def test_limit_and_category_choose_the_cases_run(tmp_path):
    path = write_set(tmp_path / "small.jsonl", [case for case, _ in SMALL_SET])
    report_path = tmp_path / "r.json"
    run_eval("--set", str(path), "--category", "beta", "--limit", "2", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert report["set"]["cases"] == 2
    assert report["set"]["selection"] == "category beta, the first 2"
    # A selection's SHA-256 is its own cases', so two selections of a file are two sets.
    assert report["set"]["sha256"] != hashlib.sha256(path.read_bytes()).hexdigest()
    run_eval("--set", str(path), "--json", str(report_path))
    whole = json.loads(report_path.read_text())["set"]
    assert (whole["selection"], whole["sha256"]) == (
        "",
        hashlib.sha256(path.read_bytes()).hexdigest(),
    )
    assert report["categories"] == {
        "beta": {"cases": 2, "correct": report["categories"]["beta"]["correct"]}
    }


def test_the_report_can_go_to_stdout_with_the_table_on_stderr(tmp_path):
    path = write_set(tmp_path / "small.jsonl", [SMALL_SET[0][0]])
    out, err = run_eval("--set", str(path), "--json", "-")
    assert json.loads(out)["provider"] == "offline"
    assert "accuracy" in err
    # Nothing to measure is said, not printed as a score of 0 (one decision case, no extraction,
    # no case that needs review).
    assert "recall - (no case needs review)" in err
    assert "extraction cases 0: none in the set" in err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "x", "kind": "decision", ', "line 3: not valid JSON"),
        (
            json.dumps({**SMALL_SET[0][0], "id": "x", "weight": 2}),
            "line 3: unknown key 'weight' in the case",
        ),
        (
            json.dumps(
                {**SMALL_SET[1][0], "id": "x", "expect": {"action": "update", "target": "c9"}}
            ),
            "line 3: expect.target 'c9' is not among the candidates (ids: c1, c2)",
        ),
        (
            json.dumps({**SMALL_SET[0][0], "id": "x", "expect": {"action": "add", "targt": "c1"}}),
            "line 3: unknown key 'targt' in expect",
        ),
        (
            json.dumps(
                {
                    **SMALL_SET[1][0],
                    "id": "x",
                    "candidates": [{"id": "c1", "content": "a", "score": 2}],
                }
            ),
            "line 3: candidates[0].score must be a number from 0 to 1",
        ),
        (  # it counted as wrong whatever the model said (found by a QA pass)
            json.dumps({**SMALL_SET[0][0], "id": "x", "expect": {"action": None}}),
            "line 3: expect must hold exactly one of action and notAction",
        ),
    ],
    ids=[
        "malformed",
        "unknown-key",
        "target-not-a-candidate",
        "unknown-expect-key",
        "bad-score",
        "null-action",
    ],
)
def test_a_bad_line_is_an_error_naming_it_and_nothing_runs_or_is_written(
    fake_ollama, tmp_path, line, message
):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"# header\n{json.dumps(SMALL_SET[0][0])}\n{line}\n")
    before = row_counts()
    with pytest.raises(CommandError) as raised:
        run_eval("--set", str(path), "--provider", "ollama", "--json", str(tmp_path / "out.json"))
    assert message in str(raised.value)
    assert str(raised.value).startswith("bad.jsonl: ")
    assert not (tmp_path / "out.json").exists()
    assert fake_ollama.requests == []
    assert row_counts() == before


def test_every_error_of_a_file_is_named_with_its_line():
    text = "\n".join(
        [
            json.dumps(SMALL_SET[0][0]),
            json.dumps(SMALL_SET[0][0]),
            json.dumps({**SMALL_SET[1][0], "id": "u", "expect": {"action": "update"}}),
            json.dumps({"id": "k", "kind": "summary", "category": "x"}),
        ]
    )
    with pytest.raises(case_format.CaseError) as raised:
        case_format.parse(text, "many.jsonl")
    assert str(raised.value).splitlines() == [
        "many.jsonl: line 2: id 'd1' was already used on line 1",
        "line 3: expect.target is required for an expected update",
        "line 4: kind must be 'decision' or 'extraction', got 'summary'",
    ]


def test_a_server_that_answers_nothing_fails_the_run_without_a_report(fake_ollama, tmp_path):
    path = write_set(tmp_path / "one.jsonl", [SMALL_SET[1][0]])
    fake_ollama.script("/api/chat", Script({"error": "model not found"}, 404))
    with pytest.raises(CommandError, match="answered none of the 1 calls"):
        run_eval("--set", str(path), "--provider", "ollama", "--json", str(tmp_path / "r.json"))
    assert not (tmp_path / "r.json").exists()


SHIPPED_CATEGORIES = {
    "decision": [
        "exact-duplicate",
        "paraphrase",
        "refinement",
        "value-change",
        "reversal",
        "retraction",
        "different-subject",
        "different-attribute",
        "several-candidates",
        "pinned-target",
        "prompt-injection",
        "temporal",
    ],
    "extraction": ["discourse-prefix", "questions", "chit-chat", "several-facts", "secrets"],
}


def test_the_shipped_set_has_the_size_and_categories_the_issue_asks_for():
    shipped = case_format.load()
    kinds = {"decision": 0, "extraction": 0}
    categories: dict[str, int] = {}
    for case in shipped.cases:
        kinds[case.kind] += 1
        categories[case.category] = categories.get(case.category, 0) + 1
    assert kinds["decision"] >= 240 and kinds["extraction"] >= 60
    assert len(categories) >= 12 and min(categories.values()) >= 10
    for names in SHIPPED_CATEGORIES.values():
        assert set(names) <= set(categories)
    pinned = [c for c in shipped.cases if c.category == "pinned-target"]
    assert all(any(x.pinned and x.id == c.target for x in c.candidates) for c in pinned)


def test_the_offline_model_runs_the_shipped_set_through_the_jobs_code_without_writing():
    before = row_counts()
    report = run_set(case_format.load(), get_chat_client("offline"), concurrency=2)
    assert row_counts() == before
    assert report["set"]["name"] == "shipped.jsonl"
    assert report["decision"]["cases"] + report["extraction"]["cases"] == report["set"]["cases"]
    # Identical texts are NONE by the job's own offline model, whatever else it gets wrong.
    assert report["categories"]["exact-duplicate"] == {"cases": 20, "correct": 20}
    assert report["categories"]["no-candidates"] == {"cases": 10, "correct": 10}


def test_a_report_folder_that_does_not_exist_is_refused_before_any_model_call(
    fake_ollama, tmp_path
):
    path = write_set(tmp_path / "one.jsonl", [SMALL_SET[1][0]])
    with pytest.raises(CommandError, match="does not exist"):
        run_eval("--set", str(path), "--provider", "ollama", "--json", str(tmp_path / "no/r.json"))
    # A folder where the file should be was found only after every call (a QA pass).
    with pytest.raises(CommandError, match="is a folder"):
        run_eval("--set", str(path), "--provider", "ollama", "--json", str(tmp_path))
    assert fake_ollama.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--since", "2026-01-01", "--provider", "offline"],
            "--since: not an option of an evaluation",
        ),
        (["--agent", "lonely"], "--agent: not an option of an evaluation"),
        (
            ["export-reviewed", "--set", "x.jsonl", "--limit", "3"],
            "--set, --limit: not an option of 'export-reviewed'",
        ),
        (
            ["export-reviewed", "--provider", "offline"],
            "--provider: not an option of 'export-reviewed'",
        ),
    ],
)
def test_an_option_the_command_does_not_take_is_refused_not_ignored(db, args, message):
    """`eval --since` ran the shipped set and answered its score as if it were the verdicts'."""
    with pytest.raises(CommandError, match=message):
        run_eval(*args)

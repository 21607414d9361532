"""pipeline.llm.prompts: what the model is asked, and the JSON schemas sent with each prompt."""

from __future__ import annotations

import json

import pytest

from pipeline.llm import prompts
from pipeline.parsing import ACTIONS, FACT_TYPES, Candidate, Fact

ID1 = "0b6f3c1e-5d2a-4c47-9a51-1f0e8d7c6b01"
ID2 = "7c2d9e44-8b13-4f6a-a2c5-3e9b7d1f0a22"
CANDIDATES = [
    Candidate(1, ID1, "Alice prefers light mode in VS Code", "preference"),
    Candidate(2, ID2, "The billing service uses MySQL 8", "fact"),
]


def test_schemas_constrain_types_actions_and_required_keys():
    fact_item = prompts.EXTRACTION_SCHEMA["properties"]["facts"]["items"]
    assert fact_item["properties"]["type"]["enum"] == list(FACT_TYPES)
    assert prompts.EXTRACTION_SCHEMA["required"] == ["facts", "entities"]
    entity_keys = set(prompts.EXTRACTION_SCHEMA["properties"]["entities"]["items"]["properties"])
    assert entity_keys == {
        "source",
        "source_type",
        "relationship",
        "target",
        "target_type",
        "confidence",
    }
    assert prompts.DECISION_SCHEMA["properties"]["action"]["enum"] == list(ACTIONS)
    assert prompts.DECISION_SCHEMA["properties"]["targetId"]["type"] == ["string", "null"]
    assert prompts.DECISION_SCHEMA["required"] == ["action", "targetId", "confidence", "reason"]
    json.dumps([prompts.EXTRACTION_SCHEMA, prompts.DECISION_SCHEMA])  # Sent over the wire as-is.


def test_format_candidates_numbers_each_entry_with_its_id_type_and_content():
    assert prompts.format_candidates(CANDIDATES[:2]) == (
        f"[1] ID: {ID1}\nType: preference\nContent: Alice prefers light mode in VS Code\n\n"
        f"[2] ID: {ID2}\nType: fact\nContent: The billing service uses MySQL 8"
    )


def test_extraction_prompt_names_every_type_and_ends_with_the_text():
    prompt = prompts.extraction_prompt("Alice uses Vim.")
    assert prompt.endswith("Text:\nAlice uses Vim.")
    for fact_type in FACT_TYPES:
        assert f"- {fact_type}:" in prompt
    assert "Return ONLY a JSON object" in prompt
    assert "person, project, system, tool, concept, skill, task, unknown" in prompt


def test_decision_prompt_shows_the_fact_and_numbered_candidates():
    prompt = prompts.decision_prompt(Fact("Alice prefers dark mode", "preference", 0.9), CANDIDATES)
    assert '(type: preference, confidence: 0.90):\n"Alice prefers dark mode"' in prompt
    assert prompts.format_candidates(CANDIDATES) in prompt
    for action in ACTIONS:
        assert f"- {action}:" in prompt
    assert prompt.index("Candidates:") < prompt.index("Return ONLY a JSON object")
    assert '"targetId"' in prompt and '"reason"' in prompt


# The SHA-256 of the prompt texts and schemas (`_prompt_digest`) under each PROMPT_VERSION. When a
# prompt changes, bump PROMPT_VERSION and add its new digest here; never edit an old line.
PROMPT_DIGESTS = {
    "v1": "c1f5dfda8d40e2ce35f6e9628251cfe731fa18f9aac7d92f7ac702b0564cfde5",
    "v2": "abdb1039f7c550a9201061e7fed57b8a3c3bc00509e747530734ace19d4504f2",
}


def _prompt_digest(module=prompts) -> str:
    """One hash over everything the model is sent besides the data: both prompts rendered with
    fixed inputs (counter-examples included) and both schemas."""
    import hashlib

    fact = Fact("Alice prefers dark mode", "preference", 0.9)
    example = {"action": "update", "fact": "F", "target": "T", "note": "N"}
    parts = [
        module.extraction_prompt("<TEXT>"),
        module.decision_prompt(fact, CANDIDATES),
        module.decision_prompt(fact, CANDIDATES, [example]),
        json.dumps([module.EXTRACTION_SCHEMA, module.DECISION_SCHEMA], sort_keys=True),
    ]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def _check_prompt_version(version: str, digest: str) -> None:
    recorded = PROMPT_DIGESTS.get(version)
    assert recorded is not None, (
        f"no prompt digest recorded for PROMPT_VERSION {version!r}: add {version!r}: {digest!r} "
        "to PROMPT_DIGESTS"
    )
    assert recorded == digest, (
        f"the prompts changed under PROMPT_VERSION {version!r}: bump PROMPT_VERSION and record "
        f"the new hash ({digest}) in PROMPT_DIGESTS"
    )


def test_the_prompts_are_the_ones_recorded_for_their_version():
    _check_prompt_version(prompts.PROMPT_VERSION, _prompt_digest())


def test_a_changed_prompt_under_the_same_version_fails(monkeypatch):
    monkeypatch.setattr(prompts, "_DECISION_ANSWER", prompts._DECISION_ANSWER + "Be brief.\n")
    with pytest.raises(AssertionError, match="bump PROMPT_VERSION and record the new hash"):
        _check_prompt_version(prompts.PROMPT_VERSION, _prompt_digest())


def test_every_version_has_its_own_digest():
    assert len(set(PROMPT_DIGESTS.values())) == len(PROMPT_DIGESTS)

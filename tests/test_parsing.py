"""pipeline.parsing against recorded messy model replies, plus a deterministic fuzz corpus."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pipeline import parsing
from pipeline.parsing import (
    ACTIONS,
    FACT_TYPES,
    MAX_FACT_CHARS,
    MAX_INPUT_CHARS,
    MIN_FACT_CHARS,
    NOT_AN_OBJECT,
    PARSE_FAILED,
    Candidate,
    Decision,
    EntityTriple,
    Fact,
    parse_decision,
    parse_extraction,
    parse_json_object,
)

FIXTURES = Path(__file__).parent / "fixtures" / "model_outputs"

ID1 = "0b6f3c1e-5d2a-4c47-9a51-1f0e8d7c6b01"
ID2 = "7c2d9e44-8b13-4f6a-a2c5-3e9b7d1f0a22"
ID3 = "e91a5b70-2c6d-4e38-b4f9-6a0c2d8e5f33"
CANDIDATES = [
    Candidate(1, ID1, "Alice prefers light mode in VS Code", "preference"),
    Candidate(2, ID2, "The billing service uses MySQL 8", "fact"),
    Candidate(3, ID3, "Deploys happen on Fridays", "procedural"),
]


def load(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def fact_rows(facts: list[Fact]) -> list[tuple[str, str, float]]:
    return [(f.content, f.type, f.confidence) for f in facts]


# --- Recorded extraction replies -----------------------------------------------------------

EXTRACTION_CASES = [
    pytest.param(
        "think_block.txt",
        [("Alice prefers dark mode in VS Code", "preference", 0.9)],
        [EntityTriple("Alice", "person", "prefers", "VS Code dark mode", "concept", 0.8)],
        [],
        id="think-block-with-braces-inside",
    ),
    pytest.param(
        "orphan_think_close.txt",
        [("The billing service uses PostgreSQL 16", "fact", 0.85)],
        [EntityTriple("billing service", "project", "uses", "PostgreSQL 16", "tool", 0.8)],
        [],
        id="closing-think-tag-only",
    ),
    pytest.param(
        "unterminated_think.txt",
        [("Production deploys run every Tuesday at 10:00 UTC", "procedural", 0.8)],
        [],
        [],
        id="think-never-closed",
    ),
    pytest.param(
        "fenced_json.txt",
        [
            ("The API gateway limits each client to 100 requests per minute", "fact", 0.95),
            ("Run `make deploy` to ship the web app to staging", "procedural", 0.8),
        ],
        [],
        [],
        id="json-fence-with-prose",
    ),
    pytest.param(
        "bare_fence.txt",
        [("The team chose Django 5.2 LTS for the dashboard", "decision", 0.9)],
        [],
        [],
        id="bare-fence",
    ),
    pytest.param(
        "prose_around.txt",
        [("Bob maintains the billing service", "fact", 0.9)],
        [EntityTriple("Bob", "person", "maintains", "billing service", "project", 0.9)],
        [],
        id="prose-before-and-after",
    ),
    pytest.param(
        "trailing_commas.txt",
        [
            (
                "The nightly backup job writes to s3://backups/nightly, then prunes old copies",
                "procedural",
                0.8,
            ),
            ("The config literal {a: 1,} is rejected by the JSON loader", "fact", 0.7),
        ],
        [],
        [],
        id="trailing-commas-outside-strings-only",
    ),
    pytest.param(
        "double_encoded.txt",
        [("The web app reads its secrets from Vault", "fact", 0.85)],
        [EntityTriple("web app", "system", "reads secrets from", "Vault", "tool", 0.8)],
        [],
        id="double-encoded",
    ),
    pytest.param(
        "nine_char_fact.txt",
        [("Uses tabs.", "preference", 0.9), ("Carol likes green tea", "preference", 0.7)],
        [],
        ['Fact too short (9 chars): "Uses vim."'],
        id="nine-chars-rejected-ten-kept",
    ),
    pytest.param(
        "unknown_type.txt",
        [
            ("Postgres was chosen because the team knows it well", "fact", 0.8),
            ("Dana prefers pull requests under 400 lines", "preference", 0.9),
            ("The search index is rebuilt every night", "fact", 0.7),
        ],
        [],
        [
            'Invalid type "rationale", defaulting to "fact"',
            'Invalid type "None", defaulting to "fact"',
        ],
        id="unknown-and-missing-type",
    ),
    pytest.param(
        "bad_confidence.txt",
        [
            ("Fact with a word for confidence", "fact", 0.5),
            ("Fact with a boolean confidence", "fact", 0.5),
            ("Fact with confidence above one", "fact", 0.5),
            ("Fact with confidence below zero", "fact", 0.5),
            ("Fact with NaN as confidence", "fact", 0.5),
            ("Fact with an overflowing confidence", "fact", 0.5),
            ("Fact without any confidence", "fact", 0.5),
        ],
        [EntityTriple("Kafka", "unknown", "retains", "events for 7 days", "unknown", 0.03)],
        [
            'Fact "Fact with a word for confidence": confidence "high" is not a number, using 0.5',
            'Fact "Fact with a boolean confidence": confidence "True" is not a number, using 0.5',
            'Fact "Fact with confidence above one": confidence "1.7" is out of range, using 0.5',
            'Fact "Fact with confidence below zero": confidence "-0.2" is out of range, using 0.5',
            'Fact "Fact with NaN as confidence": confidence "nan" is not a number, using 0.5',
            'Fact "Fact with an overflowing confidence": confidence "inf" is not a number, using 0.5',
            'Fact "Fact without any confidence": confidence missing, using 0.5',
            'Entity "Kafka retains events for 7 days": confidence "3" read as a percentage (0.03)',
        ],
        # Out-of-range confidences are never clamped to 1.0 (issue 10 item 7): each falls back
        # to 0.5, below the write gate, with a warning.
        id="confidence-defaults-with-a-warning-each",
    ),
    pytest.param(
        "bad_items.txt",
        [("Kafka keeps events for seven days", "fact", 0.9)],
        [EntityTriple("Orders service", "system", "publishes to", "Kafka", "unknown", 0.6)],
        [
            "Fact is not an object",
            "Fact missing content string",
            "Fact is not an object",
            "Entity missing source or target",
            "Entity missing relationship",
            "Entity is not an object",
        ],
        id="wrong-item-shapes",
    ),
    pytest.param(
        "facts_not_list.txt",
        [],
        [],
        ['"facts" is not a list', '"entities" is not a list'],
        id="facts-not-a-list",
    ),
    pytest.param("not_json.txt", [], [], [PARSE_FAILED], id="apology-not-json"),
    pytest.param("not_an_object.txt", [], [], [NOT_AN_OBJECT], id="array-not-object"),
]


@pytest.mark.parametrize(("name", "facts", "entities", "warnings"), EXTRACTION_CASES)
def test_recorded_extraction_reply_gives_exact_facts_entities_and_warnings(
    name, facts, entities, warnings
):
    got_facts, got_entities, got_warnings = parse_extraction(load(name))
    assert fact_rows(got_facts) == facts
    assert got_entities == entities
    assert got_warnings == warnings


def test_twenty_five_facts_are_cut_to_the_first_twenty_with_a_warning():
    facts, _, warnings = parse_extraction(load("twenty_five_facts.txt"))
    assert len(facts) == 20
    assert facts[0].content == "Service number 1 listens on port 8001"
    assert facts[-1].content == "Service number 20 listens on port 8020"
    assert warnings == ["Truncated facts from 25 to 20"]


def test_sixty_entities_are_cut_to_fifty_with_a_warning():
    facts, entities, warnings = parse_extraction(load("sixty_entities.txt"))
    assert len(facts) == 1
    assert [e.source for e in entities] == [f"service-{i:02d}" for i in range(1, 51)]
    assert warnings == ["Truncated entities from 60 to 50"]


def test_fact_over_two_thousand_chars_is_truncated_with_a_warning():
    original = json.loads(load("long_fact.txt"))["facts"][0]["content"]
    facts, _, warnings = parse_extraction(load("long_fact.txt"))
    assert len(original) == 2500
    assert facts[0].content == original[:MAX_FACT_CHARS].rstrip()
    assert len(facts[0].content) <= MAX_FACT_CHARS
    assert warnings == ["Fact truncated from 2500 chars"]


def test_reply_cut_off_mid_object_is_reported_not_silently_empty():
    facts, entities, warnings = parse_extraction(
        '{"facts": [{"content": "A complete fact here"}, {"cont'
    )
    assert (facts, entities) == ([], [])
    assert warnings == ['Model output has no "facts" or "entities"']


# --- Recorded decision replies -------------------------------------------------------------

DECISION_CASES = [
    pytest.param(
        "decision_uuid_target.txt",
        Decision("update", ID2, 0.82, "The billing service moved from MySQL 8 to PostgreSQL 16"),
        [],
        id="target-by-memory-id",
    ),
    pytest.param(
        "decision_number_target.txt",
        Decision("delete", ID3, 0.7, "Deploys no longer happen on Fridays"),
        [],
        id="target-by-number",
    ),
    pytest.param(
        "decision_think_fenced.txt",
        Decision("update", ID1, 0.5, "Alice switched from light mode to dark mode"),
        ['Decision: confidence "1.4" is out of range, using 0.5'],
        id="think-then-fence-bracketed-number",
    ),
    pytest.param(
        "decision_snake_case_target.txt",
        Decision("update", ID2, 0.75, "More precise version of the billing database fact"),
        [],
        id="target-id-snake-case-key",
    ),
    pytest.param(
        "decision_add_with_target.txt",
        Decision("add", None, 0.9, "Nothing stored covers the cache size"),
        ['Decision: confidence given as text "0.9", read as 0.9'],
        id="add-ignores-target-string-confidence-read-as-number",
    ),
    pytest.param(
        "decision_prose_trailing_comma.txt",
        Decision("none", None, 0.9, "Already stored as [2]"),
        [],
        id="prose-and-trailing-comma",
    ),
    pytest.param(
        "decision_hallucinated_id.txt",
        None,
        ['Decision references non-candidate ID: "3f8e2a10-0000-4000-8000-000000000000"'],
        id="hallucinated-memory-id",
    ),
    pytest.param(
        "decision_out_of_range_number.txt",
        None,
        ['Decision references non-candidate ID: "7"'],
        id="number-outside-candidates",
    ),
    pytest.param(
        "decision_empty_reason.txt", None, ["Decision missing reason"], id="whitespace-reason"
    ),
    pytest.param(
        "decision_missing_target.txt",
        None,
        ["delete decision missing targetId"],
        id="delete-without-target",
    ),
    pytest.param(
        "decision_invalid_action.txt", None, ['Invalid action: "merge"'], id="unknown-action"
    ),
    pytest.param("not_json.txt", None, [PARSE_FAILED], id="not-json"),
    pytest.param("not_an_object.txt", None, [NOT_AN_OBJECT], id="not-an-object"),
]


@pytest.mark.parametrize(("name", "decision", "warnings"), DECISION_CASES)
def test_recorded_decision_reply_resolves_target_or_is_dropped_with_warning(
    name, decision, warnings
):
    assert parse_decision(load(name), CANDIDATES) == (decision, warnings)


def test_every_fixture_file_is_covered_by_a_test():
    covered = {p.values[0] for p in EXTRACTION_CASES + DECISION_CASES}
    covered |= {"twenty_five_facts.txt", "sixty_entities.txt", "long_fact.txt"}
    assert {p.name for p in FIXTURES.glob("*.txt")} == covered


@pytest.mark.parametrize(
    "target",
    [2, 2.0, "2", "[2]", " [2] ", "#2", ID2, ID2.upper(), f"  {ID2}  "],
)
def test_target_resolves_by_number_or_memory_id_in_any_common_spelling(target):
    reply = json.dumps({"action": "update", "targetId": target, "confidence": 0.8, "reason": "r"})
    decision, warnings = parse_decision(reply, CANDIDATES)
    assert decision is not None and decision.target_id == ID2
    assert warnings == []


@pytest.mark.parametrize("key", ["targetId", "target_id", "target"])
def test_target_is_read_from_each_accepted_key(key):
    reply = json.dumps({"action": "delete", key: 1, "confidence": 0.8, "reason": "r"})
    assert parse_decision(reply, CANDIDATES)[0].target_id == ID1


@pytest.mark.parametrize(
    ("target", "warning"),
    [
        (True, 'Decision references non-candidate ID: "True"'),
        ([2], 'Decision references non-candidate ID: "list"'),
        ("", "update decision missing targetId"),
        (0, 'Decision references non-candidate ID: "0"'),
        ("2.5", 'Decision references non-candidate ID: "2.5"'),
    ],
)
def test_unusable_target_drops_the_update_with_a_warning(target, warning):
    reply = json.dumps({"action": "update", "targetId": target, "confidence": 0.8, "reason": "r"})
    assert parse_decision(reply, CANDIDATES) == (None, [warning])


def test_update_with_no_candidates_at_all_is_a_non_candidate_reference():
    reply = '{"action": "update", "targetId": 1, "confidence": 0.8, "reason": "r"}'
    assert parse_decision(reply, []) == (None, ['Decision references non-candidate ID: "1"'])


@pytest.mark.parametrize(("reason", "expected"), [(None, None), (42, None), ("  ok  ", "ok")])
def test_reason_must_be_a_non_empty_string_and_is_trimmed(reason, expected):
    reply = json.dumps({"action": "none", "targetId": None, "confidence": 0.8, "reason": reason})
    decision, warnings = parse_decision(reply, CANDIDATES)
    if expected is None:
        assert (decision, warnings) == (None, ["Decision missing reason"])
    else:
        assert decision.reason == expected


# --- JSON recovery, input preparation, schemas and prompts ---------------------------------


@pytest.mark.parametrize("raw", [None, 42, 1.5, ["{}"], {"facts": []}, object()])
def test_non_string_reply_is_a_parse_failure_not_an_exception(raw):
    assert parse_json_object(raw) == (None, [PARSE_FAILED])


def test_bytes_reply_is_decoded_before_parsing():
    assert parse_json_object(b'{"a": 1}') == ({"a": 1}, [])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('<THINK>x</THINK>{"a": 1}', {"a": 1}),
        ('<think>a</think><think>{"b": 2}</think>{"a": 1}', {"a": 1}),
        ('```JSON\n{"a": 1}\n```', {"a": 1}),
        ('```json\n{"a": 1}', {"a": 1}),
        ('Format: {like this}. Answer: {"a": 1}', {"a": 1}),
        ('{"a": "brace } and quote \\" inside"}', {"a": 'brace } and quote " inside'}),
        ('{"a": [1, 2,], }', {"a": [1, 2]}),
        ('"{\\"a\\": 1}"', {"a": 1}),
        ('[{"a": 1}]', {"a": 1}),
    ],
)
def test_json_object_is_recovered_from_common_model_mistakes(raw, expected):
    assert parse_json_object(raw) == (expected, [])


def test_prepare_input_collapses_whitespace_and_keeps_input_at_the_limit():
    assert parsing.prepare_input("  a \n\n b\t c ") == ("a b c", [])
    exact = "x" * MAX_INPUT_CHARS
    assert parsing.prepare_input(exact) == (exact, [])


def test_prepare_input_truncates_long_input_and_marks_it():
    text, warnings = parsing.prepare_input("y" * (MAX_INPUT_CHARS + 5))
    assert text == "y" * MAX_INPUT_CHARS + "\n[truncated]"
    assert warnings == [f"Input truncated from {MAX_INPUT_CHARS + 5} to {MAX_INPUT_CHARS} chars"]


def test_limits_and_types_match_the_design():
    assert parsing.EXTRACTION_LIMITS == {
        "MAX_INPUT_CHARS": 12000,
        "MAX_FACTS": 20,
        "MIN_FACT_CHARS": 10,
        "MAX_FACT_CHARS": 2000,
        "MAX_ENTITIES": 50,
    }
    assert FACT_TYPES == ("fact", "preference", "decision", "procedural", "semantic")


def test_as_dict_shapes_are_what_the_job_result_stores():
    assert Fact("Some fact text", "fact", 0.8).as_dict() == {
        "content": "Some fact text",
        "type": "fact",
        "confidence": 0.8,
    }
    assert EntityTriple("A", "person", "uses", "B", "tool", 0.5).as_dict() == {
        "source": "A",
        "sourceType": "person",
        "relationship": "uses",
        "target": "B",
        "targetType": "tool",
        "confidence": 0.5,
    }


def test_validate_extraction_without_an_object():
    assert parsing.validate_extraction(None) == ([], [], [])
    assert parsing.validate_extraction(["x"]) == ([], [], [NOT_AN_OBJECT])


# --- Fuzz: 2,000 malformed replies, no exception, always well-typed ------------------------

_VALID_EXTRACTION = json.dumps(
    {
        "facts": [
            {
                "content": "The billing service uses PostgreSQL 16",
                "type": "fact",
                "confidence": 0.9,
            },
            {"content": "Alice prefers dark mode", "type": "preference", "confidence": 0.8},
        ],
        "entities": [
            {
                "source": "billing service",
                "source_type": "project",
                "relationship": "uses",
                "target": "PostgreSQL 16",
                "target_type": "tool",
                "confidence": 0.7,
            }
        ],
    }
)
_VALID_DECISION = json.dumps(
    {"action": "update", "targetId": 2, "confidence": 0.8, "reason": "Newer"}
)
_ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    7,
    1.5,
    -0.5,
    "",
    "   ",
    "x",
    "rationale",
    "UPDATE",
    "[2]",
    ID2,
    [],
    {},
    [1, [2]],
    {"content": None},
    "a" * 2500,
    10**30,
    -(10**30),
]


def _truncated(rng: random.Random) -> str:
    text = rng.choice([_VALID_EXTRACTION, _VALID_DECISION])
    text = text[: rng.randrange(len(text) + 1)]
    wrap = rng.choice(["{}", "<think>{}</think>", "```json\n{}\n```", "<think>{}", "Sure: {} ok"])
    return wrap.replace("{}", text, 1)


def _random_text(rng: random.Random) -> str:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode("latin-1")


def _random_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(300)))


def _wrong_types(rng: random.Random) -> str:
    def item() -> object:
        keys = ["content", "type", "confidence", "source", "target", "relationship", "source_type"]
        return {k: rng.choice(_ODD_VALUES) for k in rng.sample(keys, rng.randrange(len(keys)))}

    def listish() -> object:
        return rng.choice([[item() for _ in range(rng.randrange(70))], rng.choice(_ODD_VALUES)])

    obj = {
        "facts": listish(),
        "entities": listish(),
        "action": rng.choice([*_ODD_VALUES, "add", "update", "delete", "none"]),
        "targetId": rng.choice(_ODD_VALUES),
        "confidence": rng.choice(_ODD_VALUES),
        "reason": rng.choice(_ODD_VALUES),
    }
    for key in rng.sample(list(obj), rng.randrange(len(obj))):
        del obj[key]
    return json.dumps(obj)


def _huge_numbers(rng: random.Random) -> str:
    number = rng.choice(["9" * 5000, "1e999", "-1e999", "1" + "0" * 400, "0." + "0" * 5000 + "1"])
    return rng.choice(
        [
            f'{{"facts": [{{"content": "A fact with a big number", "confidence": {number}}}]}}',
            f'{{"action": "update", "targetId": {number}, "confidence": {number}, "reason": "r"}}',
            number,
        ]
    )


def _non_finite(rng: random.Random) -> str:
    token = rng.choice(["NaN", "Infinity", "-Infinity"])
    return rng.choice(
        [
            f'{{"facts": [{{"content": "Fact with odd confidence", "type": "fact", "confidence": {token}}}],'
            f' "entities": [{{"source": "a", "relationship": "b", "target": "c", "confidence": {token}}}]}}',
            f'{{"action": "delete", "targetId": {token}, "confidence": {token}, "reason": "r"}}',
            f'{{"action": "none", "targetId": null, "confidence": {token}, "reason": "r"}}',
        ]
    )


def _deep(rng: random.Random) -> str:
    depth = rng.choice([10, 900, 3000, 20000])
    nested = "[" * depth + "]" * depth
    return rng.choice(
        [
            nested,
            f'{{"facts": {nested}, "entities": {nested}}}',
            '{"a": ' * depth + "1" + "}" * depth,
        ]
    )


def _non_string(rng: random.Random) -> object:
    return rng.choice(
        [None, 0, 3.5, True, [_VALID_EXTRACTION], {"facts": []}, object(), b"\xff\xfe{"]
    )


_MAKERS = [
    _truncated,
    _random_text,
    _random_bytes,
    _wrong_types,
    _huge_numbers,
    _non_finite,
    _deep,
    _non_string,
]


def malformed_replies(count: int = 2000) -> list[object]:
    rng = random.Random(1234)
    return [_MAKERS[i % len(_MAKERS)](rng) for i in range(count)]


def _is_unit_float(value: object) -> bool:
    return type(value) is float and not math.isnan(value) and 0.0 <= value <= 1.0


def assert_well_typed_extraction(facts, entities, warnings) -> None:
    assert isinstance(facts, list) and isinstance(entities, list) and isinstance(warnings, list)
    for fact in facts:
        assert isinstance(fact, Fact)
        assert type(fact.content) is str and MIN_FACT_CHARS <= len(fact.content) <= MAX_FACT_CHARS
        assert fact.type in FACT_TYPES
        assert _is_unit_float(fact.confidence)
    for entity in entities:
        assert isinstance(entity, EntityTriple)
        for text in (
            entity.source,
            entity.relationship,
            entity.target,
            entity.source_type,
            entity.target_type,
        ):
            assert type(text) is str and text.strip()
        assert _is_unit_float(entity.confidence)
    assert all(type(w) is str for w in warnings)
    assert len(facts) <= 20 and len(entities) <= 50


def assert_well_typed_decision(decision, warnings) -> None:
    assert isinstance(warnings, list) and all(type(w) is str for w in warnings)
    if decision is None:
        assert warnings, "a dropped decision must always say why"
        return
    assert isinstance(decision, Decision)
    assert decision.action in ACTIONS
    if decision.action in ("update", "delete"):
        assert decision.target_id in {c.memory_id for c in CANDIDATES}
    else:
        assert decision.target_id is None
    assert type(decision.reason) is str and decision.reason.strip() == decision.reason != ""
    assert _is_unit_float(decision.confidence)


def test_fuzz_corpus_is_deterministic_and_two_thousand_strong():
    def comparable(replies: list[object]) -> list[object]:
        # A bare object() has no stable value; its type is what the corpus promises.
        return [r if isinstance(r, str | bytes) else type(r).__name__ for r in replies]

    first = malformed_replies()
    assert len(first) == 2000
    assert comparable(first) == comparable(malformed_replies())


def test_two_thousand_malformed_replies_never_raise_and_stay_well_typed():
    for raw in malformed_replies():
        assert_well_typed_extraction(*parse_extraction(raw))
        assert_well_typed_decision(*parse_decision(raw, CANDIDATES))


# --- Issue 10 item 7: confidences are read, never silently coerced ---------------------------


@pytest.mark.parametrize(
    ("given", "confidence", "warning"),
    [
        ('"0.95"', 0.95, 'confidence given as text "0.95", read as 0.95'),
        ("40", 0.4, 'confidence "40" read as a percentage (0.4)'),
        ("95", 0.95, 'confidence "95" read as a percentage (0.95)'),
        ('"85%"', 0.85, 'confidence "85%" read as a percentage (0.85)'),
        ("250", 0.5, 'confidence "250" is out of range, using 0.5'),
        ("0.8", 0.8, None),
    ],
)
def test_fact_confidence_is_read_as_a_number_or_percentage_with_a_warning(
    given, confidence, warning
):
    reply = f'{{"facts": [{{"content": "Priya prefers squash merges", "type": "preference", "confidence": {given}}}], "entities": []}}'
    facts, _, warnings = parse_extraction(reply)
    assert [fact.confidence for fact in facts] == [confidence]
    expected = [f'Fact "Priya prefers squash merges": {warning}'] if warning else []
    assert warnings == expected


def test_a_percentage_confidence_does_not_pass_the_write_gate_as_certainty():
    reply = '{"action": "add", "targetId": null, "confidence": 40, "reason": "new"}'
    decision, warnings = parse_decision(reply, CANDIDATES)
    assert decision.confidence == 0.4
    assert warnings == ['Decision: confidence "40" read as a percentage (0.4)']


def test_an_entity_named_by_an_erasure_marker_is_dropped_with_a_warning():
    facts, entities, warnings = parsing.validate_extraction(
        {
            "facts": [],
            "entities": [
                {"source": "[redacted:pii]", "relationship": "approved", "target": "deploy"},
                {"source": "Ops", "relationship": "owns", "target": "[Purged] (2)"},
                {"source": "Dana", "relationship": "approved", "target": "deploy"},
            ],
        }
    )
    assert [(e.source, e.target) for e in entities] == [("Dana", "deploy")]
    assert len(warnings) == 2 and all("erased text's marker" in w for w in warnings)

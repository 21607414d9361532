"""Grounded facts: supporting spans of the raw memory, without a model call."""

from pipeline.grounding import is_supported, spans

RAW = (
    "Standup notes. Priya prefers squash merges for feature branches! Kafka carries billing events."
)


def test_an_exact_occurrence_is_the_span():
    found = spans(RAW, "Priya prefers squash merges for feature branches.")
    assert found[0]["score"] == 1.0
    assert (
        RAW[found[0]["start"] : found[0]["end"]]
        == "Priya prefers squash merges for feature branches"
    )
    assert is_supported(found)


def test_a_paraphrase_is_grounded_in_the_best_sentence():
    found = spans(RAW, "Billing events go through Kafka")
    assert found[0]["text"] == "Kafka carries billing events." and found[0]["score"] >= 0.5
    assert is_supported(found)


def test_a_fact_with_no_support_is_flagged():
    found = spans(RAW, "Dana owns the Terraform state bucket")
    assert not is_supported(found)
    assert spans("", "anything") == [] and spans(RAW, "") == []

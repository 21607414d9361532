"""Content normalisation is exactly DESIGN §5."""

import hashlib

import pytest

from memory.content import is_effectively_empty, normalize


@pytest.mark.parametrize(
    ("raw", "storage", "normalized"),
    [
        ("  Alice likes tea.  ", "Alice likes tea.", "alice likes tea"),
        ("Alice\tlikes\n\ntea", "Alice likes tea", "alice likes tea"),
        ("Alice\u00a0likes\u2003tea\u3000!", "Alice likes tea !", "alice likes tea"),
        ("Deploy on Friday?!...;:", "Deploy on Friday?!...;:", "deploy on friday"),
        ("Use v2.0, not v1.9.", "Use v2.0, not v1.9.", "use v2.0, not v1.9"),
        ("KEEP Casing In Storage", "KEEP Casing In Storage", "keep casing in storage"),
        ("...!!!", "...!!!", "...!!!"),
        (
            "trailing spaces after punctuation .  ",
            "trailing spaces after punctuation .",
            "trailing spaces after punctuation",
        ),
    ],
)
def test_it_normalises_storage_and_comparison_forms(raw, storage, normalized):
    result = normalize(raw)
    assert result.storage == storage
    assert result.normalized == normalized
    assert result.hash == hashlib.sha256(normalized.encode()).hexdigest()


def test_it_hashes_lowercase_storage_when_only_punctuation_remains():
    result = normalize("?!.")
    assert result.hash == hashlib.sha256(b"?!.").hexdigest()


@pytest.mark.parametrize(
    ("a", "b"),
    [("Alice likes tea.", "alice   likes TEA"), ("Ship it!", "ship it"), ("a\nb", "A b...")],
)
def test_it_gives_equal_hashes_to_texts_that_differ_only_in_case_space_and_trailing_punctuation(
    a, b
):
    assert normalize(a).hash == normalize(b).hash


@pytest.mark.parametrize(
    ("text", "empty"), [("", True), ("  \n\t ", True), ("...", True), ("!?", True), ("a.", False)]
)
def test_it_knows_which_texts_are_empty_after_normalisation(text, empty):
    assert is_effectively_empty(text) is empty

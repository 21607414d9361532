"""Content normalisation is exactly DESIGN §5."""

import hashlib
import json
import unicodedata

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
    ("text", "empty"),
    [
        ("", True),
        ("  \n\t ", True),
        ("...", True),
        ("!?", True),
        ("a.", False),
        ("\u3164\u0301", True),  # a Hangul filler and an accent on nothing
        ("\u2764\ufe0f", False),  # an emoji with its variation selector is text
        ("e\u0301", False),
    ],
)
def test_it_knows_which_texts_are_empty_after_normalisation(text, empty):
    assert is_effectively_empty(text) is empty


# --- Issue 10 item 9: the same visible text dedupes however it was encoded ---------------------

VISIBLE = "Émile prefers café au lait before standup"


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(unicodedata.normalize("NFD", VISIBLE), id="nfd"),
        pytest.param("\ufeff" + VISIBLE, id="leading-bom"),
        pytest.param("Émile\u200b prefers café au lait before standup", id="zero-width-space"),
        pytest.param("\u2060Émile prefers café au lait before st\u00adandup\u200d", id="joiners"),
    ],
)
def test_it_hashes_the_visible_text_so_encodings_of_one_text_dedupe(variant):
    assert normalize(variant).hash == normalize(VISIBLE).hash
    assert normalize(variant).normalized == "émile prefers café au lait before standup"


def test_storage_content_keeps_hidden_characters_for_the_safety_lint():
    result = normalize("\ufeffAlice\u200b likes tea")
    assert result.storage == "\ufeffAlice\u200b likes tea"
    assert result.normalized == "alice likes tea"


@pytest.mark.parametrize("text", ["\u200b", "\ufeff \u200b\u200d", "\u2060.\u200b!"])
def test_text_made_only_of_invisible_characters_is_empty(text):
    assert is_effectively_empty(text) is True


@pytest.mark.django_db
def test_remember_dedupes_nfd_bom_and_zero_width_variants_and_refuses_invisible_only(
    client, ingest_auth
):
    def remember(content):
        return client.post(
            "/api/memory/remember",
            json.dumps({"content": content}),
            content_type="application/json",
            **ingest_auth,
        )

    first = remember(VISIBLE)
    assert first.status_code == 201
    for variant in (
        unicodedata.normalize("NFD", VISIBLE),
        "\ufeff" + VISIBLE,
        "Émile\u200b prefers café au lait before standup",
    ):
        again = remember(variant)
        assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    empty = remember("\ufeff\u200b \u200d")
    assert empty.status_code == 400
    assert empty.json()["error"] == "invalid_request"

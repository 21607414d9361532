"""The one table of where memory text lives (pipeline.erasure.PLACES): every text, JSON or binary
field of every model is in it, nothing in it names a field that is gone, and CONTRIBUTING.md
shows the same table. A model that gains a text field fails here until its row says how a purge
clears it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from django.apps import apps
from django.db import models

from memory.erasure import How, Place, Texts, scrub, text_values_purged
from pipeline.erasure import PLACES

ROOT = Path(__file__).resolve().parent.parent
TEXT_TYPES = {
    "CharField",
    "TextField",
    "JSONField",
    "SlugField",
    "EmailField",
    "URLField",
    "BinaryField",
    "FilePathField",
    "GenericIPAddressField",
}


def text_fields(model_list) -> set[tuple[str, str]]:
    return {
        (model._meta.label, field.name)
        for model in model_list
        for field in model._meta.concrete_fields
        if field.get_internal_type() in TEXT_TYPES
    }


def missing_places(model_list) -> list[str]:
    """`app.Model.field` of each text field of these models that the table does not list."""
    listed = {(place.model, place.field) for place in PLACES}
    return sorted(f"{label}.{name}" for label, name in text_fields(model_list) - listed)


def test_every_text_json_or_binary_field_of_every_model_is_in_the_table():
    assert missing_places(apps.get_models()) == []


def test_a_model_that_gains_a_text_field_is_caught():
    secret = models.TextField()
    secret.name = "secret_notes"
    fake = SimpleNamespace(_meta=SimpleNamespace(label="memory.Memory", concrete_fields=[secret]))
    assert missing_places([fake]) == ["memory.Memory.secret_notes"]


def test_the_table_names_only_fields_that_exist_once_each():
    fields = text_fields(apps.get_models())
    rows = [(place.model, place.field) for place in PLACES if place.model]
    assert len(rows) == len(set(rows))
    assert sorted(set(rows) - fields) == []
    assert all(place.how == How.INDEX for place in PLACES if not place.model)


def test_a_hash_of_a_text_is_recomputed_or_emptied_never_kept():
    """REHASHED places name the field they hash and a known way to hash it."""
    for place in PLACES:
        if place.how == How.REHASHED:
            assert place.of and place.hasher in {"content", "sha256", "empty"}, place.label


def contributing_rows() -> list[str]:
    """The table CONTRIBUTING.md shows: one row per place that holds text, a vector or an index
    (the kept fields are summed up per model)."""
    rows = []
    for place in PLACES:
        if place.how == How.KEPT:
            continue
        rows.append(f"| `{place.label}` | {place.how.value} | {place.note} |")
    return rows


def test_contributing_shows_the_same_table():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    missing = [row for row in contributing_rows() if row not in text]
    assert missing == [], "regenerate the table in CONTRIBUTING.md:\n" + "\n".join(missing)


# --- the text tools the table's rows are cleared with ----------------------------------------------


def test_needles_are_each_text_as_written_and_normalized_and_probes_cover_them():
    texts = Texts.of(["The key is SK-Abc123xyz.", None, "  ", "ok"])
    assert "The key is SK-Abc123xyz." in texts.needles
    assert "the key is sk-abc123xyz" in texts.needles
    assert "ok" not in texts.needles  # too short to search for: it is in every text
    assert all(any(p.lower() in n.lower() for p in texts.probes) for n in texts.needles)


def test_scrub_replaces_copies_in_strings_and_json_and_rehashes_a_content_hash():
    texts = Texts.of(["hunter2-prod is the staging password"])
    assert scrub("note: hunter2-prod is the staging password!", texts) == "note: [purged]!"
    row = {"content": "hunter2-prod is the staging password", "content_hash": "abc", "n": 1}
    cleaned = scrub({"rows": [row]}, texts)
    assert cleaned["rows"][0]["content"] == "[purged]"
    assert cleaned["rows"][0]["content_hash"] not in {"abc", ""}
    assert scrub("nothing to see", texts) == "nothing to see"


def test_a_purged_audit_keeps_ids_and_words_and_loses_every_text():
    metadata = {
        "proposalId": "p-1",
        "proposedAction": "update",
        "fact": {"content": "secret text", "type": "fact", "confidence": 0.9},
        "targetContent": "older secret",
        "version": 3,
        "note": "a reviewer's words",
        # What a review decided and how it ended, and the provider: words (a QA pass read the
        # tombstone's trail say "via [purged]" and lose its decisions).
        "decision": "approved_first",
        "appliedAction": "update",
        "outcome": "applied",
        "provider": "ollama",
    }
    assert text_values_purged(metadata) == {
        "proposalId": "p-1",
        "proposedAction": "update",
        "fact": {"content": "[purged]", "type": "fact", "confidence": 0.9},
        "targetContent": "[purged]",
        "version": 3,
        "note": "[purged]",
        "decision": "approved_first",
        "appliedAction": "update",
        "outcome": "applied",
        "provider": "ollama",
    }


def test_every_place_has_a_note():
    assert [place.label for place in PLACES if not place.note] == []
    assert isinstance(PLACES[0], Place)

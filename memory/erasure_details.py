"""An erasure's figures across every agent, kept in its audit row's metadata (the receipt: other
memories holding the text, copies found and repaired; a purge's counts): only a reader that may
act for any agent gets them, as only such a token may erase (a QA pass: a token of one agent read
another agent's memory ids in its own memory's history, and in an export)."""

from __future__ import annotations

from memory.erasure import PURGED_EVENT
from memory.redaction import REDACTED_EVENT

ERASURE_DETAILS = {PURGED_EVENT: ("receipt", "counts", "memories"), REDACTED_EVENT: ("receipt",)}


def for_one_agent(event: str, metadata):
    """An audit row's metadata as a reader of one agent gets it: without ERASURE_DETAILS."""
    hidden = ERASURE_DETAILS.get(event, ())
    if not hidden or not isinstance(metadata, dict):
        return metadata
    return {key: value for key, value in metadata.items() if key not in hidden}

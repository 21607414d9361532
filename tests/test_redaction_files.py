"""A redaction on a SQLite file (issue 22, item 5): afterwards no byte of the span is left in the
database file, its write-ahead log or any file beside it (the shared vector matrix), although
the memory, its audits, proposals and model calls were rewritten in place; the receipt says
which pages and how much of the log it read."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.models import MemoryHistory
from tests.test_purge_canary import every_value_holding, files_holding
from tests.test_redaction import SECRET, redact, story

pytestmark = pytest.mark.sqlite_only(reason="the bytes of the database file and its log")


def test_no_byte_of_the_span_is_left_in_the_database_file_its_log_or_the_matrix(
    file_db, fake_ollama, drain_queue
):
    memory = story(fake_ollama)
    drain_queue()  # the vectors of the story's memories, in the matrix file beside the database
    folder = Path(file_db).parent
    assert files_holding(folder, SECRET), "the story wrote the span to the files"
    receipt = redact(memory.id)
    drain_queue()  # the redacted texts embedded again
    assert receipt.verified, receipt.found
    assert every_value_holding(SECRET) == []
    assert files_holding(folder, SECRET) == []
    checks = MemoryHistory.objects.get(id=receipt.event).metadata["receipt"]["checks"]
    assert any(check.startswith("database file:") and "pages read" in check for check in checks)

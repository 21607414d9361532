"""Row ids are version 7 UUIDs (time first, so new rows land at the end of their indexes), and the
dashboard's short form of an id is its random tail, which tells apart ids made together."""

import time
import uuid

from dashboard.wording import short_id
from memory.models import new_id


def test_new_ids_are_version_7_uuids_that_sort_by_time():
    first = new_id()
    time.sleep(0.002)
    later = new_id()
    parsed = uuid.UUID(first)
    assert str(parsed) == first and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert later > first
    assert abs((parsed.int >> 80) - time.time_ns() // 1_000_000) < 60_000  # milliseconds now


def test_ids_made_together_have_different_short_forms():
    ids = [new_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert len({short_id(i) for i in ids}) == 200
    assert len({i[:8] for i in ids}) < 200  # the time prefix is shared: why the tail is shown

"""Data: the memories whose text holds characters that show nothing but were kept in the hash
(controls, variation selectors, blank fillers: memory.content._BLANK) get today's normalized
content and hash, so such a text dedupes into the memory of its visible words; two active
memories of one agent that now share a hash are merged as 0008 merges them (the other one
forgotten by the system, saying why), keeping the one recall finds (not expired), then a pinned
one, then one a person asserted, then the oldest (0008's rule predates all three: a review saw
it keep an expired copy and forget a live, pinned one). A purge's tombstone keeps its empty
hash. Reads in chunks; running it again changes nothing."""

import importlib

from django.db import migrations
from django.utils import timezone

from memory.content import normalize

CHUNK = 1000
_REHASH = importlib.import_module("memory.migrations.0008_recompute_content_hashes")


def _keeper_first(now):
    def key(row):
        expired = row.expires_at is not None and row.expires_at <= now
        return (expired, not row.pinned, row.asserted_by != "person", row.created_at, row.id)

    return key


def rehash_blank_characters(apps, schema_editor=None) -> dict:
    """Settle every memory (not purged) whose stored hash is not today's, in id order."""
    m = _REHASH._models(apps)
    stats = {"rehashed": 0, "merged": 0}
    at = timezone.now()
    last = ""
    while True:
        chunk = list(
            m["Memory"]
            .objects.filter(id__gt=last, purged_at__isnull=True)
            .order_by("id")
            .values_list("id", "content", "normalized_content", "content_hash")[:CHUNK]
        )
        if not chunk:
            return stats
        last = chunk[-1][0]
        for memory_id, content, normalized, content_hash in chunk:
            new = normalize(content)
            if content_hash == new.hash and normalized == new.normalized:
                continue  # the common case costs no query
            # Read again: an earlier row's merge or move may have changed this one.
            memory = m["Memory"].objects.get(id=memory_id)
            _REHASH._settle(m, memory, stats, at, _keeper_first(at))


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_api_token_owner")]

    operations = [migrations.RunPython(rehash_blank_characters, migrations.RunPython.noop)]

"""Data: the memories whose text holds characters that show nothing but were kept in the hash
(controls, variation selectors, blank fillers: memory.content._BLANK) get today's normalized
content and hash, so such a text dedupes into the memory of its visible words; two active
memories of one agent that now share a hash are merged by 0008's rule (the oldest stays, the
later one forgotten by the system, saying why). A purge's tombstone keeps its empty hash. Reads
in chunks; running it again changes nothing."""

import importlib

from django.db import migrations
from django.utils import timezone

from memory.content import normalize

CHUNK = 1000
_REHASH = importlib.import_module("memory.migrations.0008_recompute_content_hashes")


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
            _REHASH._settle(m, m["Memory"].objects.get(id=memory_id), stats, at)


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_api_token_owner")]

    operations = [migrations.RunPython(rehash_blank_characters, migrations.RunPython.noop)]

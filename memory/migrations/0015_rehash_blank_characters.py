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

_REHASH = importlib.import_module("memory.migrations.0008_recompute_content_hashes")


def _keeper_first(now):
    def key(row):
        expired = row.expires_at is not None and row.expires_at <= now
        return (expired, not row.pinned, row.asserted_by != "person", row.created_at, row.id)

    key.kept = (
        "the copy recall finds is kept (not expired, then pinned, then a person's, then the oldest)"
    )
    return key


def rehash_blank_characters(apps, schema_editor=None) -> dict:
    """Settle every memory (not purged) whose stored hash is not today's, in id order."""
    return _REHASH.rehash(apps, {"purged_at__isnull": True}, _keeper_first(timezone.now()))


class Migration(migrations.Migration):
    dependencies = [("memory", "0014_api_token_owner")]

    operations = [migrations.RunPython(rehash_blank_characters, migrations.RunPython.noop)]

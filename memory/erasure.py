"""Where memory text lives, and the tools that erase it and look for it.

`Place` is one row of the table of every model field (and every index and file) that can hold
memory text or a vector, with `How` a purge clears it; STORE_PLACES are the store's rows, and
pipeline.erasure adds the domain's and the framework's into the one PLACES table the tests hold
every model to. `Texts` are the purged texts as exact needles and as the few short probes a scan
looks for; `scrub` replaces every copy of them inside a string or a JSON value; `find_copies`
scans every place for them. A purge (pipeline.purge) and a redaction use the same pieces with
their own replacement. Nothing here writes or opens a transaction.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from django.apps import apps
from django.db import models

from memory import keyword
from memory.backend import erasure as files
from memory.content import normalize

PURGED = "[purged]"
PURGED_EVENT = "purged"  # the tombstone's audit event, filed under the purged memory's id


class How(StrEnum):
    """How a purge clears a place. In the purged rows (the purged memories' own rows and the rows
    made from them) the value is replaced, emptied or deleted; in any other row a copy of a purged
    text is scrubbed (replaced by the marker), so every place but KEPT and REHASHED is scanned."""

    KEPT = "kept: holds no memory text"
    REPLACED = "purged rows: [purged]; copies elsewhere scrubbed"
    EMPTIED = "purged rows: emptied; copies elsewhere scrubbed"
    TEXT_VALUES = "purged rows: every text value [purged], ids and numbers kept; copies scrubbed"
    DELETED = "purged rows deleted; copies elsewhere scrubbed"
    SCRUBBED = "copies of the purged texts replaced by [purged]"
    REHASHED = "a hash of the text: emptied in purged rows, recomputed in scrubbed ones"
    INDEX = "an index or file: cleared with the rows it mirrors, checked by id"


@dataclass(frozen=True)
class Place:
    """One field of one model (`app_label.Model`, `field`), or an index or a file (`model` empty)."""

    model: str
    field: str
    how: How
    note: str = ""
    # REHASHED: the field of the same row whose text it hashes, and how ("content" or "sha256").
    of: str = ""
    hasher: str = ""
    # False: a copy found here in a row the purge does not own is not rewritten (a kept memory's
    # own text is that memory's): the receipt names where it is instead.
    elsewhere: bool = True
    # False: the field holds no text to look for (a vector, a hash), only rows the purge deletes.
    text: bool = True
    # True: the full-text index finds the rows that can hold a copy here (memories' text).
    indexed: bool = False

    @property
    def label(self) -> str:
        return f"{self.model}.{self.field}" if self.model else self.field

    @property
    def table(self) -> str:
        return self.model_class()._meta.db_table if self.model else self.field

    @property
    def where(self) -> str:
        """`table.column` as receipts and previews name it."""
        if not self.model:
            return self.field
        return f"{self.table}.{self.model_class()._meta.get_field(self.field).column}"

    def model_class(self):
        return apps.get_model(self.model)

    @property
    def scanned(self) -> bool:
        """A model field that may hold a copy of a purged text (and is searched for one)."""
        return (
            bool(self.model) and self.text and self.how not in {How.KEPT, How.REHASHED, How.INDEX}
        )

    def is_json(self) -> bool:
        return isinstance(self.model_class()._meta.get_field(self.field), models.JSONField)


M, H, C = "memory.Memory", "memory.MemoryHistory", "memory.MemoryCold"
STORE_PLACES: list[Place] = [
    Place(
        M,
        "content",
        How.REPLACED,
        "the text (a kept memory's own is named, not rewritten)",
        elsewhere=False,
        indexed=True,
    ),
    Place(
        M, "normalized_content", How.REPLACED, "its lowercase form", elsewhere=False, indexed=True
    ),
    Place(
        M,
        "content_hash",
        How.REHASHED,
        "SHA-256 of the text: emptied, never kept",
        of="content",
        hasher="content",
    ),
    Place(M, "why", How.EMPTIED, "free text the writer gave with it", elsewhere=False),
    Place(M, "tags", How.EMPTIED, "free words the writer gave with it", elsewhere=False),
    Place(M, "type", How.SCRUBBED, "a type word, free text the writer gave", elsewhere=False),
    Place(
        M,
        "source_id",
        How.EMPTIED,
        "the writer's reference to where it came from; a derived memory's raw memory id stays",
        elsewhere=False,
    ),
    *[
        Place(M, name, How.KEPT, note)
        for name, note in (
            ("id", "an id"),
            ("who", "the writer's name: who and when stay (a purged memory's, less its text)"),
            ("agent_id", "an agent's name"),
            ("source_type", "an origin word"),
            ("extraction_status", "a status word"),
            ("extraction_model", "a model's name"),
            ("embedding_model", "a model's name"),
            ("updated_by", "a person's or agent's name"),
            ("asserted_by", "an authority word"),
        )
    ],
    Place(H, "old_content", How.REPLACED, "the text before a change"),
    Place(H, "new_content", How.REPLACED, "the text after a change"),
    Place(H, "metadata", How.TEXT_VALUES, "facts, targets and notes inside an audit"),
    Place(
        H,
        "reason",
        How.SCRUBBED,
        "who, when, event and reason stay: only copies go (and, in its own audits, its why)",
    ),
    *[
        Place(H, name, How.KEPT, "an id, a word or a name")
        for name in ("id", "event", "changed_by")
    ],
    Place(H, "actor_type", How.KEPT, "an actor word"),
    *[
        Place(C, name, How.DELETED, "a full copy of an earlier version: the row is deleted")
        for name in ("content", "normalized_content", "why", "tags", "original_row_json")
    ],
    Place(
        C, "content_hash", How.REHASHED, "hash of the copied text", of="content", hasher="content"
    ),
    *[
        Place(C, name, How.KEPT, "an id, a word or a name (deleted with the row)")
        for name in (
            "archive_id",
            "type",
            "who",
            "agent_id",
            "source_type",
            "source_id",
            "extraction_status",
            "extraction_model",
            "embedding_model",
            "archived_reason",
        )
    ],
    Place(
        "memory.Embedding",
        "vector",
        How.DELETED,
        "the text's vector (unless a kept memory has the same text)",
        text=False,
    ),
    Place(
        "memory.Embedding",
        "content_hash",
        How.DELETED,
        "hash of the text: deleted with it",
        text=False,
    ),
    Place("memory.Embedding", "model", How.KEPT, "a model's name"),
    Place(
        "memory.MemoryEntityMention", "mention_text", How.DELETED, "the purged memory's mentions"
    ),
    Place("memory.Entity", "name", How.DELETED, "deleted when only purged memories mentioned it"),
    Place("memory.Entity", "canonical_name", How.DELETED, "as name"),
    Place("memory.Entity", "entity_type", How.KEPT, "a type word"),
    Place("memory.Entity", "agent_id", How.KEPT, "an agent's name"),
    Place(
        "memory.Relation",
        "relation_type",
        How.SCRUBBED,
        "the relation's words (a writer's triple may hold any text): copies scrubbed, the row "
        "deleted with its entity",
    ),
    Place(
        "memory.Job", "result", How.TEXT_VALUES, "facts and proposals of the purged memory's job"
    ),
    Place("memory.Job", "error", How.SCRUBBED, "may quote a reply"),
    *[
        Place("memory.Job", name, How.KEPT, "an id or a word")
        for name in ("id", "job_type", "status")
    ],
    *[
        Place(
            "memory.ApiToken",
            name,
            How.KEPT,
            "a token's name, hash, prefix, agent, scopes or owner",
        )
        for name in ("name", "token_hash", "prefix", "agent_id", "scopes", "owner")
    ],
    # Indexes and files that mirror the rows above (SQLite unless said).
    Place(
        "",
        "memories_fts",
        How.INDEX,
        "FTS5 index of memories.content: rows follow the text "
        "(triggers), entries removed for good (FTS5 secure-delete), checked by rowid",
    ),
    Place(
        "",
        "vec_embeddings",
        How.INDEX,
        "sqlite-vec index: the purged vectors' rows deleted (their bytes zeroed), checked by id",
    ),
    Place(
        "",
        "vector matrix file",
        How.INDEX,
        "the shared quantised matrix under the data folder: "
        "the purged vectors' rows zeroed, checked by id",
    ),
    Place(
        "",
        "database file",
        How.INDEX,
        "SQLite: secure_delete zeroes freed bytes, the log is "
        "checkpointed and truncated, a store older than that is vacuumed once",
    ),
    Place(
        "",
        "memories.search_vector",
        How.INDEX,
        "PostgreSQL: the generated tsvector follows the "
        "text; the table is vacuumed after the purge",
    ),
    Place(
        "",
        "embeddings_embedding_hnsw",
        How.INDEX,
        "PostgreSQL: HNSW index; the deleted vectors "
        "leave it when the table is vacuumed after the purge",
    ),
]


# --- the purged texts ---------------------------------------------------------------------------

PROBE_CHARS = 32  # a probe: a window of a text this long (the whole text when shorter)
MANY_NEEDLES = 64  # more needles than this: matched by word first, tables read through
_WORD = re.compile(r"[a-z0-9_]{4,}")
_BYTE_WORD = re.compile(rb"[a-z0-9_]{4,}")
MIN_NEEDLE = 4  # shorter strings are not searched for or scrubbed: they are in every text


def json_forms(text: str) -> set[str]:
    """How `text` reads inside stored JSON: as written and with non-ASCII escaped (Django's)."""
    return {json.dumps(text, ensure_ascii=flag)[1:-1] for flag in (True, False)}


@dataclass(frozen=True)
class Texts:
    """The purged texts as exact needles (each as written and in its normalized lowercase form,
    longest first) and as probes: a few windows such that every needle holds one exactly, which
    a scan asks the database for before checking the rows it gets against the needles."""

    needles: tuple[str, ...]

    @classmethod
    def of(cls, texts: Iterable[str | None]) -> Texts:
        found: set[str] = set()
        for text in texts:
            if not text or not text.strip():
                continue
            for form in (text.strip(), normalize(text).storage, normalize(text).normalized):
                if len(form) >= MIN_NEEDLE and form != PURGED:
                    found.add(form)
        return cls(tuple(sorted(found, key=lambda n: (-len(n), n))))

    @cached_property
    def probes(self) -> tuple[str, ...]:
        """The windows a scan asks the database for (not made when there are `many` needles:
        then rows are matched by word)."""
        return () if self.many else _probes(self.needles)

    def __bool__(self) -> bool:
        return bool(self.needles)

    @property
    def many(self) -> bool:
        """Too many needles to look for one by one: rows and pages are matched by word first."""
        return len(self.needles) > MANY_NEEDLES

    @cached_property
    def _by_word(self) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
        """Each needle under its longest inner word (an ASCII run of 4+ letters or digits with an
        ASCII separator on both sides inside the needle: any text holding the needle, as written
        or as JSON, holds that word whole), and the needles without one (always checked)."""
        keyed: dict[str, list[str]] = {}
        loose = []
        for needle in self.needles:
            lower = needle.lower()
            inner = [
                m.group()
                for m in _WORD.finditer(lower)
                if m.start() > 0
                and m.end() < len(lower)
                and _plain(lower[m.start() - 1])
                and _plain(lower[m.end()])
            ]
            if inner:
                keyed.setdefault(max(inner, key=len), []).append(needle)
            else:
                loose.append(needle)
        return {word: tuple(found) for word, found in keyed.items()}, tuple(loose)

    def candidates(self, text: str) -> tuple[str, ...] | list[str]:
        """The needles `text` may hold: all of them, or with many, those whose word it has."""
        if not self.many:
            return self.needles
        keyed, loose = self._by_word
        words = set(_WORD.findall(text.lower())) & keyed.keys()
        return [n for word in words for n in keyed[word]] + list(loose)

    def held_in(self, value) -> bool:
        """True when a string (or any string inside a JSON value) holds one of the needles."""
        if isinstance(value, str):
            return any(needle in value for needle in self.candidates(value))
        if isinstance(value, dict):
            return any(self.held_in(k) or self.held_in(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.held_in(item) for item in value)
        return False

    def shortest(self) -> list[str]:
        """The needles that hold no other needle (a memory holding any needle holds one of
        them), one per lowercase form: what a look-up in the full-text index asks for."""
        kept: dict[str, str] = {}
        for needle in reversed(self.needles):  # shortest first
            lower = needle.lower()
            if not any(other in lower for other in kept):
                kept[lower] = needle
        return list(kept.values())

    @cached_property
    def byte_forms(self) -> tuple[bytes, ...]:
        """The needles as bytes: UTF-8, and as JSON writes them."""
        return tuple({f.encode("utf-8") for n in self.needles for f in (n, *json_forms(n))})

    def count_in_bytes(self, data: bytes) -> int:
        """Occurrences of any needle (UTF-8, and as JSON writes it) in raw bytes."""
        if not self.many:
            return sum(data.count(form) for form in self.byte_forms)
        words = {w.decode() for w in _BYTE_WORD.findall(data.lower())}
        needles = set(self.candidates(" ".join(words)))
        forms = {f.encode("utf-8") for n in needles for f in (n, *json_forms(n))}
        return sum(data.count(form) for form in forms)


def _plain(char: str) -> bool:
    """A separator JSON writes as itself (a control character becomes an escape like \\n)."""
    return char.isascii() and char.isprintable()


def _probes(needles: tuple[str, ...]) -> tuple[str, ...]:
    """Windows such that each needle holds at least one, few of them: greedy, the window shared
    by the most needles not yet covered first (the versions of one memory share most)."""
    uncovered = list(needles)
    probes: list[str] = []
    while uncovered:
        first = uncovered[-1]  # the shortest: its windows are the fewest
        size = min(PROBE_CHARS, len(first))
        windows = {first[i : i + size] for i in range(0, len(first) - size + 1, 4)}
        windows.add(first[len(first) - size :])
        best = max(
            sorted(windows),
            key=lambda w: (sum(w in n for n in uncovered), len(set(w))),
        )
        probes.append(best)
        uncovered = [n for n in uncovered if best not in n]
    for probe in list(probes):  # JSON columns hold escaped text
        probes.extend(form for form in json_forms(probe) if form not in probes)
    return tuple(probes)


# --- replacing them -------------------------------------------------------------------------------


def scrub(value, texts: Texts, replacement: str = PURGED):
    """`value` with every copy of the texts replaced: a string, or any string inside a JSON value
    (a JSON object holding `content` and its `content_hash` gets the hash of its new content)."""
    if isinstance(value, str):
        for needle in sorted(texts.candidates(value), key=len, reverse=True):
            if needle in value:
                value = value.replace(needle, replacement)
        return value
    if isinstance(value, list):
        return [scrub(item, texts, replacement) for item in value]
    if isinstance(value, dict):
        cleaned = {
            scrub(k, texts, replacement): scrub(v, texts, replacement) for k, v in value.items()
        }
        content = cleaned.get("content")
        if "content_hash" in cleaned and isinstance(content, str) and content != value["content"]:
            cleaned["content_hash"] = normalize(content).hash
        return cleaned
    return value


# Keys of an audit's metadata (and a job's result) that hold ids, numbers or words, never text:
# everything else in a purged row's JSON becomes the marker.
KEPT_KEYS = frozenset(
    {
        "id",
        "type",
        "action",
        "status",
        "version",
        "ifVersion",
        "force",
        "verdict",
        "changedFields",
        "contentChanged",
        "confidence",
        "proposedAction",
        "shadow",
        "extractionModel",
        "model",
        "mode",
        "writeMode",
        "writeStats",
        "factCount",
        "entityCount",
        "contradictionRisk",
        "reviewNeeded",
        "blockedReason",
        "skippedReason",
        "cancelledJobs",
        "queuedJobId",
        "kind",
        "label",
        "start",
        "end",
        "score",
        "number",
        "flagged",
        "counts",
        "rows",
        "scope",
        "verified",
        "dryRun",
        "memories",
        "found",
        "where",
        "count",
        "outOfReach",
        "tombstone",
    }
) | {"decision", "appliedAction", "appliedAs", "rejectedAction", "outcome", "provider"}  # words


def kept_key(key: str) -> bool:
    return key in KEPT_KEYS or key.endswith(("Id", "Ids", "At", "_id", "Count", "Version"))


def text_values_purged(value, key: str = ""):
    """A purged row's JSON with every text value replaced by the marker; ids, numbers, booleans
    and the words under KEPT_KEYS stay, so the audit still says what happened and to which ids."""
    if isinstance(value, dict):
        return {k: text_values_purged(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [text_values_purged(item, key) for item in value]
    if isinstance(value, str) and not kept_key(key):
        return PURGED
    return value


HASHERS = {
    "content": lambda text: normalize(text).hash if text else "",
    "sha256": lambda text: hashlib.sha256((text or "").encode("utf-8")).hexdigest(),
    "empty": lambda text: "",
}


# --- finding them -----------------------------------------------------------------------------------


@dataclass
class Copies:
    """Rows of one model holding a copy of a purged text: pk -> the fields that hold one."""

    model: str
    rows: dict = field(default_factory=dict)

    def count(self, field_name: str) -> int:
        return sum(field_name in fields for fields in self.rows.values())


def scanned_places(places: Iterable[Place]) -> dict[str, list[Place]]:
    """The scanned places by model, in the table's order."""
    by_model: dict[str, list[Place]] = {}
    for place in places:
        if place.scanned:
            by_model.setdefault(place.model, []).append(place)
    return by_model


def find_copies(places: Iterable[Place], texts: Texts) -> dict[str, Copies]:
    """Every row of every scanned place that holds a copy of the texts, by model. Memories' text
    is looked up in the full-text index; every other place is read through: the database is
    asked for the rows holding a probe (every table at once, side by side where the engine
    allows), and each row it returns is checked against the needles."""
    if not texts:
        return {}
    found: dict[str, Copies] = {}
    groups = []
    for label, group in scanned_places(places).items():
        indexed = [p for p in group if p.indexed]
        # Many texts: the table is read through like the others (phrases would be too many).
        rows = _indexed_rows(texts) if indexed and not texts.many else None
        if rows is not None:
            _confirm(found, label, indexed, [(pk, *values) for pk, *values in rows], texts)
            group = [p for p in group if not p.indexed]
        if group:
            groups.append((label, group))
    queries = [
        files.holding_query(
            (model := apps.get_model(label))._meta.db_table,
            model._meta.pk.column,
            [(model._meta.get_field(p.field).column, p.is_json()) for p in group],
            () if texts.many else texts.probes,  # many texts: every row, matched by word
        )
        for label, group in groups
    ]
    for (label, group), rows in zip(groups, files.read_all(queries), strict=True):
        _confirm(found, label, group, rows, texts)
    return found


def _indexed_rows(texts: Texts) -> list | None:
    """Memories' (id, content, normalized content) the full-text index finds by the phrases of
    the shortest needles, a hundred phrases a query; None when it cannot (read the table)."""
    phrases, rows = texts.shortest(), []
    for start in range(0, len(phrases), 100):
        found = keyword.memories_holding_words(phrases[start : start + 100])
        if found is None:
            return None
        rows += found
    return rows


def _confirm(found: dict[str, Copies], label: str, group: list[Place], rows, texts) -> None:
    """Add the rows (pk, then one value per place of the group) that hold a needle."""
    copies = found.get(label) or Copies(label)
    for pk, *values in rows:
        holding = [
            place.field
            for place, value in zip(group, values, strict=True)
            if texts.held_in(_loaded(value) if place.is_json() else value)
        ]
        if holding:
            copies.rows.setdefault(pk, []).extend(holding)
    if copies.rows:
        found[label] = copies


def _loaded(value):
    """A JSON column's value as the scan read it (text) as Python values."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value

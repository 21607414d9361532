"""`manage.py bench --scale`: how the figures grow with the store (issue 24, item 4). By default
at 10k, 100k and 1M memories, in about ten minutes on a 2-core machine, generation and load
included: at each size the hybrid search, the vector leg's recall@5 against brute force, a job's
overhead (10 facts, zero-latency model) with its vector search and keyword leg (wall time, and
the CPU time this process spent, which a busy machine disturbs less), the resident
memory of a process that served 200 searches (and the shared matrix's part of it) and the
matrix file; then each figure's growth per 10x.

SQLite only (the shared matrix). To fit the time, the store is written with raw SQL in the
ORM's column order (memories with their FTS rows by trigger, `created` audits, embeddings and
their sqlite-vec rows) and embedded by `FastEmbedder`, the offline embedder with its feature
hashes remembered: the same vectors, bit for bit, in a fraction of the time. No queue page,
remember or load phases: `make bench` measures those.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from devtools import cpu_steal, machine_speed
from devtools.bench import (
    AGENT,
    BUDGETS,
    GROW_CHUNK,
    REFERENCE_ROW,
    SCALED_ROW,
    Bench,
    FakeModelProcess,
    Options,
    engine_modules,
    label,
    ms_since,
    on_postgres,
    pct,
    report_slowness,
    report_steal,
    timed,
)

SCALE_SIZES = [10_000, 100_000, 1_000_000]
JOB_GROWTH = 1.5  # job overhead at 10x the store: at most this many times more
SCALE_MINUTES = 15.0  # the whole run at the default sizes, generation and load included
RSS_QUERIES = 200
# The reference workload's time per size: how fast the machine was, which no store size changes.
MACHINE_ROW = "job_reference_p50_ms"
# Rows printed without a growth per 10x: a ratio, a count, and the machine's speed.
NO_GROWTH = ("recall_at_5", "matrix_lists", MACHINE_ROW)

_TOKEN = re.compile(r"\w+", re.UNICODE)  # pipeline.llm.offline's tokens


class FastEmbedder:
    """pipeline.llm.offline.OfflineEmbedder's vectors for many texts at once: each word's and
    word pair's hashed features are computed once and remembered, and a batch is summed in one
    np.add.at, feature by feature in the embedder's order (the same float32 sums)."""

    def __init__(self, dimensions: int):
        from pipeline.llm.offline import OfflineEmbedder

        self.dims = dimensions
        self.reference = OfflineEmbedder(dimensions)
        self.words: dict[str, tuple[list[int], list[float]]] = {}
        self.pairs: dict[tuple[str, str], tuple[int, float]] = {}

    def _hashed(self, text: str) -> tuple[list[int], list[float]]:
        buckets, values = [], []
        for feature, weight in self.reference._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            buckets.append(int.from_bytes(digest[:4], "little") % self.dims)
            values.append((1.0 if digest[4] & 1 else -1.0) * weight)
        return buckets, values

    def _word(self, word: str) -> tuple[list[int], list[float]]:
        found = self.words.get(word)
        if found is None:
            found = self.words[word] = self._hashed(word)  # its word and trigram features
        return found

    def _pair(self, left: str, right: str) -> tuple[int, float]:
        found = self.pairs.get((left, right))
        if found is None:
            buckets, values = self._hashed(f"{left} {right}")
            # The text "l r" yields l's features, r's, then the pair's: the pair's is the last.
            found = self.pairs[(left, right)] = (buckets[-1], values[-1])
        return found

    def embed_many(self, texts: list[str]) -> np.ndarray:
        dims = self.dims
        buckets: list[int] = []
        values: list[float] = []
        counts: list[int] = []
        known_words, known_pairs, tokens = self.words.get, self.pairs.get, _TOKEN.findall
        for text in texts:
            before = len(buckets)
            words = tokens(text.lower())
            for word in words:
                word_buckets, word_values = known_words(word) or self._word(word)
                buckets += word_buckets
                values += word_values
            for pair in zip(words, words[1:], strict=False):
                bucket, value = known_pairs(pair) or self._pair(*pair)
                buckets.append(bucket)
                values.append(value)
            counts.append(len(buckets) - before)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64) * dims, counts)
        sums = np.zeros(len(texts) * dims, dtype=np.float32)
        np.add.at(sums, rows + np.asarray(buckets, dtype=np.int64), np.asarray(values, np.float32))
        vectors = sums.reshape(len(texts), dims)
        for vector in vectors:  # as embed_one: float(np.linalg.norm(v)), one row at a time
            norm = float(np.linalg.norm(vector))
            if norm > 0:
                vector /= norm
        return vectors


# --- the store, written with raw SQL ------------------------------------------------------------
def _template(model, instance, skip=()) -> tuple[str, list, dict[str, int]]:
    """(INSERT statement, the row's values as the ORM would write them, field -> position),
    without the columns in `skip` (an id the database numbers)."""
    fields = [f for f in model._meta.concrete_fields if f.attname not in skip]
    values = [f.get_db_prep_save(getattr(instance, f.attname), connection) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({marks})"
    return sql, values, {f.attname: i for i, f in enumerate(fields)}


def write_chunk(bench: Bench, items, vectors: np.ndarray, age_rank: int) -> None:
    """One transaction of memories (FTS by trigger), their `created` audits, embeddings and
    sqlite-vec rows: the rows `Bench._grow_chunk` writes, without the ORM's per-field work."""
    from memory.content import normalize
    from memory.models import Embedding, ExtractionStatus, Memory, MemoryHistory, new_id

    now = timezone.now()
    memory_sql, memory_row, m = _template(
        Memory,
        Memory(
            content="",
            normalized_content="",
            content_hash="",
            who="bench-agent",
            why="bench",
            agent_id=AGENT,
            source_type="manual",
            extraction_status=ExtractionStatus.COMPLETED,
            embedding_model=bench.model,
            created_at=now,
            updated_at=now,
            updated_by="bench-agent",
        ),
    )
    history_sql, history_row, h = _template(
        MemoryHistory,
        MemoryHistory(
            memory_id="",
            event="created",
            changed_by="bench-agent",
            actor_type="agent",
            reason="remember",
            created_at=now,
        ),
    )
    embedding_sql, embedding_row, e = _template(
        Embedding,
        Embedding(content_hash="", vector=b"", dimensions=bench.dims, model=bench.model),
        skip={"id"},
    )
    memories, audits, embeddings = [], [], []
    adapt = connection.ops.adapt_datetimefield_value
    for index, ((kind, text), vector) in enumerate(zip(items, vectors, strict=True)):
        content = normalize(text)
        at = adapt(now - timedelta(seconds=(age_rank - index) * 7))
        memory_id = new_id()
        row = list(memory_row)
        row[m["id"]], row[m["content"]] = memory_id, content.storage
        row[m["normalized_content"]], row[m["content_hash"]] = content.normalized, content.hash
        row[m["type"]], row[m["created_at"]], row[m["updated_at"]] = kind, at, at
        memories.append(row)
        row = list(history_row)
        row[h["id"]], row[h["memory_id"]] = new_id(), memory_id
        row[h["new_content"]], row[h["created_at"]] = content.storage, at
        audits.append(row)
        row = list(embedding_row)
        row[e["content_hash"]], row[e["vector"]] = content.hash, vector.tobytes()
        row[e["source_memory_id"]], row[e["created_at"]] = memory_id, at
        embeddings.append(row)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM embeddings")
        last = cursor.fetchone()[0]
        cursor.executemany(memory_sql, memories)
        cursor.executemany(history_sql, audits)
        cursor.executemany(embedding_sql, embeddings)
        cursor.execute(
            "INSERT INTO vec_embeddings(rowid, embedding, model) "
            "SELECT id, vector, model FROM embeddings WHERE id > %s",
            [last],
        )


def grow(bench: Bench, embedder: FastEmbedder, target: int) -> dict:
    """The store topped up to `target` memories; seconds spent embedding and writing."""
    items = bench.corpus.store(target)[bench.size :]
    embed_s = write_s = 0.0
    for first in range(0, len(items), GROW_CHUNK):
        chunk = items[first : first + GROW_CHUNK]
        started = time.perf_counter()
        vectors = embedder.embed_many([text for _, text in chunk])
        embed_s += time.perf_counter() - started
        started = time.perf_counter()
        write_chunk(bench, chunk, vectors, len(items) - first)
        write_s += time.perf_counter() - started
        if len(items) > GROW_CHUNK:
            bench.log(f"  {bench.size + first + len(chunk):,} memories written")
    bench.size = target
    return {"embed_s": round(embed_s, 1), "write_s": round(write_s, 1)}


# --- figures --------------------------------------------------------------------------------------
def exact_kth(queries: np.ndarray, model: str, k: int) -> np.ndarray:
    """Each query's k-th best cosine similarity over every stored vector of the model."""
    units = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    best = np.full((len(units), k), -np.inf, dtype=np.float64)
    with connection.cursor() as cursor:
        cursor.execute("SELECT vector FROM embeddings WHERE model = %s", [model])
        while rows := cursor.fetchmany(20000):
            chunk = np.frombuffer(b"".join(row[0] for row in rows), np.float32)
            chunk = chunk.reshape(len(rows), -1)
            chunk = chunk / np.maximum(np.linalg.norm(chunk, axis=1, keepdims=True), 1e-30)
            scores = units @ chunk.T
            take = min(k, scores.shape[1])
            top = -np.partition(-scores, take - 1, axis=1)[:, :take]
            best = -np.sort(-np.hstack([best, top]), axis=1)[:, :k]
    return best[:, -1]


def vector_recall(queries: np.ndarray, found: list[list[tuple[int, float]]], kth, k: int):
    """Share of the found ids whose exact similarity reaches the exact k-th best (ties count)."""
    hits = sum(
        sum(1 for _, distance in hits[:k] if 1.0 - distance >= kth[i] - 1e-5)
        for i, hits in enumerate(found)
    )
    return hits / (k * len(found))


def probe_rss(path: str) -> None:
    """In a fresh process (`bench --probe-rss FILE`): the searches of jobs, ten facts at a time,
    for the texts in FILE; print this process's resident memory and the matrix's part of it."""
    from memory import matrix
    from memory.search import hybrid_search_many

    texts = json.loads(Path(path).read_text())
    embedder = FastEmbedder(settings.MEMORY_EMBEDDING_DIMENSIONS)
    vectors = embedder.embed_many(texts)
    for first in range(0, len(texts), 10):
        hybrid_search_many(
            texts[first : first + 10],
            agent_id=AGENT,
            k=5,
            query_vectors=list(vectors[first : first + 10]),
            model=settings.MEMORY_EMBEDDING_MODEL,
        )
    status = Path("/proc/self/status").read_text()
    rss_kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    print(
        json.dumps(
            {
                "rss_mib": round(rss_kib / 1024, 1),
                "matrix_resident_mib": round(matrix.INDEX.resident_bytes() / 2**20, 1),
                "matrix_file_mib": round(matrix.INDEX.memory_bytes() / 2**20, 1),
            }
        ),
        flush=True,
    )


class ScaleBench:
    """The growth run: `run()` measures each size and reports the growth per 10x."""

    def __init__(self, options: Options, out):
        self.bench = Bench(options, out)
        self.o = options
        self.figures: dict[str, dict] = {}
        self.references: list[float] = []  # the reference workload's times, every size's jobs

    def run(self) -> dict:
        started = time.perf_counter()
        whole_run = cpu_steal.Watch()
        bench = self.bench
        if on_postgres():
            raise RuntimeError("--scale runs on SQLite (the shared matrix)")
        bench.report.notes.append(
            "Load average (1/5/15 min) at start: " + " ".join(f"{v:.2f}" for v in os.getloadavg())
        )
        bench.setup()
        sizes = sorted(set(self.o.sizes))
        bench.corpus.store(sizes[-1])
        embedder = FastEmbedder(bench.dims)
        for size in sizes:
            loaded = grow(bench, embedder, size)
            bench.log(
                f"store {size:,}: embedded in {loaded['embed_s']} s, "
                f"written in {loaded['write_s']} s"
            )
            gc.collect()
            gc.freeze()
            self.figures[str(size)] = {"load": loaded, **self.measure(size)}
        minutes = (time.perf_counter() - started) / 60
        self.report(sizes, minutes)
        steal = report_steal(bench.report, {"whole_run": whole_run.share()})
        speed = report_slowness(
            bench.report,
            self.references,
            "a reference workload just before each job, every size (Python, numpy, SQLite): p50",
        )
        bench.report.notes.append(
            "Load average (1/5/15 min) at end: " + " ".join(f"{v:.2f}" for v in os.getloadavg())
        )
        return {
            "engine": "sqlite",
            "sizes": self.figures,
            "growth_per_10x": self.growth(sizes),
            "minutes": round(minutes, 1),
            "cpu_steal": steal,
            "machine_speed": speed,
        }

    # -- one size ------------------------------------------------------------------------------
    def measure(self, size: int) -> dict:
        from memory import matrix, vectors

        bench = self.bench
        texts = bench.corpus.held_out(self.o.queries)
        queries = FastEmbedder(bench.dims).embed_many(texts)
        matrix.INDEX = matrix.MatrixIndex()
        started = time.perf_counter()
        vectors.nearest(queries[0], model=bench.model, k=5)  # brings the file up to date
        build_s = time.perf_counter() - started
        figures = {"matrix_build_s": round(build_s, 1), **self.search(texts, queries)}
        kth = exact_kth(queries, bench.model, 5)
        found = [vectors.nearest(q, model=bench.model, k=5) for q in queries]
        figures["recall_at_5"] = round(vector_recall(queries, found, kth, 5), 4)
        figures.update(self.jobs())
        figures.update(self.rss(texts[:RSS_QUERIES]))
        figures["matrix_lists"] = matrix.INDEX.mapping.layout.nlist
        bench.log(f"scale @ {label(size)}: {figures}")
        return figures

    def search(self, texts: list[str], queries: np.ndarray) -> dict:
        """p50 of a hybrid search top-5 (one query), and of the vector search of a job's ten
        facts (one nearest_many of k=20, as search_many asks)."""
        from memory import vectors
        from memory.search import hybrid_search

        model = self.bench.model
        single = []
        for text, vector in zip(texts, queries, strict=True):
            started = time.perf_counter()
            hybrid_search(text, agent_id=AGENT, k=5, query_vector=vector, model=model)
            single.append(ms_since(started))
        batch, cpu = [], []
        for first in range(0, len(queries) - 9, 10):
            started, spent = time.perf_counter(), time.process_time()
            vectors.nearest_many(list(queries[first : first + 10]), model=model, k=20)
            batch.append(ms_since(started))
            cpu.append((time.process_time() - spent) * 1000)
        return {
            "search_p50_ms": pct(single, 50),
            "vector_10_facts_p50_ms": pct(batch, 50),
            "vector_10_facts_cpu_p50_ms": pct(cpu, 50),
        }

    def jobs(self) -> dict:
        """Job overhead, 10 facts, zero-latency model (run_job's wall time), and its parts."""
        from memory.models import JobStatus
        from pipeline import tasks
        from pipeline.llm.transport import _probe_cache

        bench = self.bench
        fake = FakeModelProcess(delay=0.0)
        saved = (settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL)
        settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL = "ollama", fake.url
        _probe_cache.clear()
        engine_vectors, engine_keyword = engine_modules()
        overhead, cpu, knn, words = [], [], [], []
        paired = machine_speed.Paired()
        try:
            tasks.run_job(bench._raw_job(10).id)  # warm: the connection, the first catch-up
            for _ in range(self.o.jobs):
                job = bench._raw_job(10)
                own_knn, own_words = [], []
                reference = machine_speed.sample()  # how fast the machine is this moment
                with ExitStack() as stack:
                    stack.enter_context(timed(engine_vectors, "nearest_owned_many", own_knn))
                    stack.enter_context(timed(engine_keyword, "search_many", own_words))
                    started, spent = time.perf_counter(), time.process_time()
                    status = tasks.run_job(job.id)
                    overhead.append(ms_since(started))
                    cpu.append((time.process_time() - spent) * 1000)
                paired.add(overhead[-1], reference)
                self.references.append(reference)
                if status != JobStatus.COMPLETED:
                    raise RuntimeError(f"job {job.id} ended {status}")
                knn.append(sum(own_knn))
                words.append(sum(own_words))
        finally:
            settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL = saved
            _probe_cache.clear()
            fake.stop()
        return {
            "job_overhead_p50_ms": pct(overhead, 50),
            "job_at_quiet_speed_p50_ms": paired.at_quiet_speed_p50(),
            "job_reference_p50_ms": pct(paired.references, 50),
            "job_cpu_p50_ms": pct(cpu, 50),
            "job_vector_search_p50_ms": pct(knn, 50),
            "job_keyword_leg_p50_ms": pct(words, 50),
        }

    def rss(self, texts: list[str]) -> dict:
        path = Path(settings.DATA_DIR) / "rss-queries.json"
        path.write_text(json.dumps(texts))
        done = subprocess.run(
            [sys.executable, "manage.py", "bench", "--probe-rss", str(path)],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    # -- the report ------------------------------------------------------------------------------
    ROWS = [
        ("hybrid search top-5: p50", "search_p50_ms", "ms"),
        ("vector search of a job's 10 facts: p50", "vector_10_facts_p50_ms", "ms"),
        ("  its CPU time (all threads): p50", "vector_10_facts_cpu_p50_ms", "ms"),
        ("vector leg recall@5 vs brute force", "recall_at_5", ""),
        ("job overhead (10 facts, 0-latency model): p50", "job_overhead_p50_ms", "ms"),
        ("  its CPU time in this process (all threads): p50", "job_cpu_p50_ms", "ms"),
        (
            "  of which the vector search (and its hits' owners): p50",
            "job_vector_search_p50_ms",
            "ms",
        ),
        ("  of which the keyword leg: p50", "job_keyword_leg_p50_ms", "ms"),
        (SCALED_ROW, "job_at_quiet_speed_p50_ms", "ms"),
        (REFERENCE_ROW, "job_reference_p50_ms", "ms"),
        ("process RSS after 200 searches", "rss_mib", "MiB"),
        ("  of which the shared matrix", "matrix_resident_mib", "MiB"),
        ("matrix file (per machine)", "matrix_file_mib", "MiB"),
        ("matrix lists", "matrix_lists", ""),
        ("matrix built after the load", "matrix_build_s", "s"),
    ]

    def growth(self, sizes: list[int]) -> dict:
        """Each figure's growth per 10x of the store, between consecutive sizes."""
        found = {}
        for small, large in zip(sizes, sizes[1:], strict=False):
            tens = math.log10(large / small)
            ratios = {}
            for _, key, _ in self.ROWS:
                if key == MACHINE_ROW:  # the machine's drift, not the store's doing
                    continue
                a, b = self.figures[str(small)][key], self.figures[str(large)][key]
                if a and b and tens > 0:
                    ratios[key] = round((b / a) ** (1 / tens), 2)
            found[f"{label(small)}->{label(large)}"] = ratios
        return found

    def report(self, sizes: list[int], minutes: float) -> None:
        report = self.bench.report
        growth = self.growth(sizes)
        for name, key, unit in self.ROWS:
            for size in sizes:
                value = self.figures[str(size)][key]
                budget, ok = self._budget(key, size, value)
                shown = f"{value:.3f}" if key == "recall_at_5" else f"{value:g} {unit}".strip()
                report.add(f"{name} @ {label(size)}", shown, budget, ok)
            for step, ratios in growth.items():
                if key in ratios and key not in NO_GROWTH:
                    budget, ok = self._growth_budget(key, ratios[key])
                    report.add(f"  growth per 10x, {step}", f"x{ratios[key]:.2f}", budget, ok)
        default = sizes == SCALE_SIZES
        report.add(
            "the whole run (generation and load included)",
            f"{minutes:.1f} min",
            f"<= {SCALE_MINUTES:g} min" if default else "",
            minutes <= SCALE_MINUTES if default else None,
        )

    @staticmethod
    def _budget(key: str, size: int, value) -> tuple[str, bool | None]:
        if key == "recall_at_5":
            return f">= {BUDGETS['recall']:g}", value >= BUDGETS["recall"]
        if key == "search_p50_ms":
            return f"<= {BUDGETS['search_p50']:g} ms", value <= BUDGETS["search_p50"]
        if key == "job_overhead_p50_ms" and size == 100_000:
            return f"<= {BUDGETS['job_p50']:g} ms", value <= BUDGETS["job_p50"]
        if key == "matrix_resident_mib" and size <= 100_000:
            return f"<= {BUDGETS['matrix_mib']:g} MiB", value <= BUDGETS["matrix_mib"]
        return "", None

    @staticmethod
    def _growth_budget(key: str, ratio: float) -> tuple[str, bool | None]:
        if key == "job_overhead_p50_ms":
            return f"<= x{JOB_GROWTH:g}", ratio <= JOB_GROWTH
        return "", None

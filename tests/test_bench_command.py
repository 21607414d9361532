"""manage.py bench: a small run end to end (it re-runs itself against a temporary database)."""

from __future__ import annotations

import io
import json
import re
from numbers import Real
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import TEST_ENGINE

pytestmark = pytest.mark.slow  # a whole benchmark run, tiny as it is

SIZES = ("200", "400")


def run_bench(json_path: Path) -> str:
    out = io.StringIO()
    call_command(
        "bench",
        "--sizes",
        ",".join(SIZES),
        "--json",
        str(json_path),
        "--remember-calls",
        "100",
        "--queries",
        "40",
        "--jobs",
        "5",
        "--load-calls",
        "40",
        "--throughput-jobs",
        "12",
        "--load-backlog",
        "60",
        "--engine",
        TEST_ENGINE,  # the engine of this pass (an embedded PostgreSQL of its own)
        stdout=out,
    )
    return out.getvalue()


def is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def test_bench_writes_every_figure_and_leaves_no_database_behind(tmp_path):
    json_path = tmp_path / "b.json"
    output = run_bench(json_path)

    figures = json.loads(json_path.read_text())
    assert set(figures) == {
        "engine",
        "throughput",
        "remember",
        "search",
        "job_overhead",
        "lock_hold",
        "job_latency",
        "remember_under_load",
        "jobs_per_s",
        "queue_page",
    }
    assert set(figures["remember"]) == {"p50_ms", "p99_ms", "per_s"}
    assert set(figures["search"]) == set(SIZES)
    for size in SIZES:
        search = figures["search"][size]
        exact = figures["engine"] == "sqlite"
        assert set(search) == {
            "p50_ms",
            "p95_ms",
            "recall_at_5",
            "hybrid_recall_at_5",
            "keyword_recall_at_10",
        } | ({"matrix"} if exact else set())
        # The shared matrix re-ranks exactly: at these sizes it equals brute force; HNSW is
        # approximate.
        assert search["recall_at_5"] >= (1.0 if exact else 0.95)
        assert 0.9 <= search["hybrid_recall_at_5"] <= 1.0
        assert 0.0 < search["keyword_recall_at_10"] <= 1.0
        if exact:
            shared = search["matrix"]
            assert 0 < shared["resident_mib_per_process"] <= shared["file_mib_per_machine"]
    assert set(figures["job_overhead"]) == {"p50_ms", "facts_per_job", "model_server_cpu_ms"}
    assert figures["job_overhead"]["facts_per_job"] == 10
    assert set(figures["lock_hold"]) == {"p50_ms", "p99_ms"}
    assert set(figures["remember_under_load"]) == {"p99_ms"}
    assert figures["job_latency"]["decisions"] == 10 and figures["job_latency"]["parallel"] == 10
    assert figures["jobs_per_s"]["workers"] == 2 and figures["jobs_per_s"]["jobs_per_s"] > 0
    assert re.search(r"SQL statements inside it \(10 facts\)\s+\d+\s+<= 20\s+ok", output)
    assert figures["engine"] == {"sqlite": "sqlite", "postgres": "postgresql"}[TEST_ENGINE]
    assert figures["throughput"]["workers"] == 3 and figures["throughput"]["jobs_per_s"] > 0
    assert set(figures["queue_page"]) == set(SIZES)
    for size in SIZES:
        assert set(figures["queue_page"][size]) == {"p50_ms", "queries"}
    # The review page's query count must not grow with the queue.
    counts = {figures["queue_page"][size]["queries"] for size in SIZES}
    assert len(counts) == 1

    leaves = [
        figures["remember"]["p50_ms"],
        figures["remember"]["p99_ms"],
        figures["remember"]["per_s"],
        figures["job_overhead"]["p50_ms"],
        figures["lock_hold"]["p50_ms"],
        figures["lock_hold"]["p99_ms"],
        figures["job_latency"]["p50_ms"],
        figures["remember_under_load"]["p99_ms"],
        *[v for size in SIZES for k, v in figures["search"][size].items() if k != "matrix"],
        *[value for size in SIZES for value in figures["queue_page"][size].values()],
    ]
    assert all(is_number(value) and value >= 0 for value in leaves)

    # The readable table shows each budget with its mark, and the temporary database is gone.
    assert "remember (API, in-process) @ 400: p50" in output
    assert re.search(r"<= 50 ms\s+(ok|OVER)", output)
    workdir = re.search(r"Benchmark database: (\S+)", output).group(1)
    assert not Path(workdir).exists()

"""How fast this machine runs right now: a fixed reference workload of the kinds of work a job
does (Python's interpreter, numpy over an array, SQLite reads by rowid), timed beside each job
the benchmarks time.

The time budgets are judged on a quiet machine, and a virtual machine can be slow without any
steal time to show for it (devtools.cpu_steal): two runs of the same code, both with 0.0 % steal,
read 39 and 71 ms of job overhead on two days, and the workload here swings by 1.7x from one ten
seconds to the next on an idle machine. It runs slower in the same moments as the jobs, so a run
that times it just before each job can say how fast the machine was, and scale each job to a
quiet machine's speed: a figure that one run can be compared with another by. It never replaces
a budget's own figure. It holds best for the work of the benchmark's own process (SQLite): on
PostgreSQL part of a job waits on the server's disk and on round trips, which the workload does
not time, so its scaled figure compares PostgreSQL runs with each other only.

`python -m devtools.machine_speed` prints the workload's time here (the p10 and median of many
samples, spread over a while), to check QUIET_MS on a quiet machine.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from dataclasses import dataclass, field

import numpy as np

# The workload's time (ms) on a quiet machine of this kind, estimated: the day it was written had
# no quiet moment (11.3 ms at best). A quiet day's job overhead (39.4 ms, SQLite, 100k, the same
# job code) over the median of five runs' job time in units of this workload (6.29; 5.81 to
# 6.79). docs/performance.md, "How fast the machine was", says how far it can be trusted.
QUIET_MS = 6.3
# A run whose reference samples took longer than this many times QUIET_MS (their median) was
# not on a quiet machine.
SLOW_RATIO = 1.25


class _Workload:
    """The same work every time: a word count over a fixed text, the popcount of a fixed bit
    matrix XOR-ed with one of its rows and its 100 smallest, and SQLite reads of fixed rowids
    from an in-memory table (each of the three about a third of the time)."""

    def __init__(self) -> None:
        rng = random.Random(20261206)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = [
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)
        ]
        self.text = " ".join(rng.choice(words) for _ in range(25_000))
        self.bits = np.random.default_rng(20261206).integers(
            0, 2**63, size=(120_000, 2), dtype=np.uint64
        )
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        self.db.executemany(
            "INSERT INTO t VALUES (?, ?)", [(i, rng.choice(words) * 5) for i in range(50_000)]
        )
        self.rowids = [rng.randrange(50_000) for _ in range(900)]
        self.sql = f"SELECT id, body FROM t WHERE id IN ({','.join('?' * 900)})"

    def run(self) -> int:
        """One run; a checksum of what it found (the same every run)."""
        counts: dict[str, int] = {}
        for word in self.text.split():
            counts[word] = counts.get(word, 0) + 1
        distances = np.bitwise_count(self.bits ^ self.bits[5]).sum(axis=1)
        nearest = np.argpartition(distances, 100)[:100]
        rows = 0
        for _ in range(3):
            rows += len(self.db.execute(self.sql, self.rowids).fetchall())
        return len(counts) + int(distances[nearest].sum()) + rows


_WORKLOAD: _Workload | None = None


def sample() -> float:
    """Milliseconds of one run of the reference workload (made on first use, not timed)."""
    global _WORKLOAD
    if _WORKLOAD is None:
        _WORKLOAD = _Workload()
        _WORKLOAD.run()  # the first run pays for the allocator and SQLite's page cache
    started = time.perf_counter()
    _WORKLOAD.run()
    return (time.perf_counter() - started) * 1000


def checksum() -> int:
    """What one run finds (tests: the work is the same every run)."""
    sample()
    return _WORKLOAD.run()


def _median(values: list[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def slowness(references: list[float]) -> float | None:
    """The median of these reference times over a quiet machine's: about 1.0 on a quiet
    machine; None without any."""
    return round(_median(references) / QUIET_MS, 2) if references else None


def is_quiet(references: list[float]) -> bool | None:
    """Whether these reference times are a quiet machine's (None without any): their median, not
    rounded, at most SLOW_RATIO times QUIET_MS."""
    return _median(references) <= QUIET_MS * SLOW_RATIO if references else None


@dataclass
class Paired:
    """Timed samples (ms), each with the reference workload's time taken just before it."""

    values: list[float] = field(default_factory=list)
    references: list[float] = field(default_factory=list)

    def add(self, value_ms: float, reference_ms: float) -> None:
        self.values.append(value_ms)
        self.references.append(reference_ms)

    def at_quiet_speed_p50(self) -> float | None:
        """The p50 of the samples, each scaled by QUIET_MS over its own reference time."""
        if not self.values:
            return None
        scaled = [v * QUIET_MS / r for v, r in zip(self.values, self.references, strict=True)]
        return round(_median(scaled), 3)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    samples = []
    for _ in range(count):
        samples.append(sample())
        time.sleep(0.05)  # spread over a while: the machine's speed changes from second to second
    p10 = float(np.percentile(samples, 10))
    print(f"reference workload: p10 {p10:.2f} ms, median {_median(samples):.2f} ms")


if __name__ == "__main__":
    main()

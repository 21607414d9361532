"""How much of a run's CPU time the host gave to other guests (Linux's steal time, /proc/stat).

The benchmarks' time budgets are judged on a quiet machine. A virtual machine whose vCPUs wait
for the host runs every phase slower, with no load of its own to show for it: the load average
stays low. So a run measures the steal share and says when it was too high to judge a budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# Above this share of the CPU time the run's processes wanted, the machine was not quiet.
QUIET_SHARE = 0.05
# Fewer ticks (usually 1/100 s each) than this of wanted CPU time give no share worth printing.
MIN_TICKS = 50


@dataclass(frozen=True)
class CpuTimes:
    """All CPUs' times since boot, in ticks: what they ran (user, nice, system, irq, softirq;
    guests are counted in user) and what the host ran instead of them (steal)."""

    ran: int
    stolen: int


def sample(path: Path = PROC_STAT) -> CpuTimes | None:
    """The CPU times now, or None where the file is missing or says no steal (not Linux, or a
    kernel older than 2.6.11)."""
    try:
        line = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    name, *fields = line.split()
    if name != "cpu" or len(fields) < 8:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return CpuTimes(ran=user + nice + system + irq + softirq, stolen=steal)


def stolen_share(start: CpuTimes | None, end: CpuTimes | None) -> float | None:
    """The share of the CPU time wanted between two samples that the host gave to others:
    stolen / (ran + stolen). None when a sample is missing or too little time was wanted."""
    if start is None or end is None:
        return None
    ran, stolen = end.ran - start.ran, end.stolen - start.stolen
    if ran + stolen < MIN_TICKS:
        return None
    return stolen / (ran + stolen)


class Watch:
    """The steal share from when it was made to each call of `share`."""

    def __init__(self, path: Path = PROC_STAT) -> None:
        self.path = path
        self.start = sample(path)

    def share(self) -> float | None:
        return stolen_share(self.start, sample(self.path))

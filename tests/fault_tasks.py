"""Fault injection for tests/test_qcluster_faults.py: a real `qcluster` whose workers die.

`python -m tests.fault_tasks` starts the ordinary `manage.py qcluster` after patching faults into
the pipeline of this process; the cluster forks its workers from it, so every worker (and every
reincarnated one) carries the same faults. The faults are chosen by environment variables that
only this module reads, never the app:

- FAULT_DIE_IN_EXTRACT=<marker>: a worker extracting a raw memory whose text contains <marker>
  dies with os._exit (what an OOM kill or a segfault looks like) in the extraction step, on
  every attempt: a poison job.
- FAULT_DIE_IN_WRITE_ONCE=<flag file>: the first worker that reaches the second proposal of a
  job's write dies inside the open write transaction; the flag file it leaves lets every later
  attempt through.

The worker dies without running a single `finally`, exactly like SIGKILL.

The in-process fault tests (tests/test_faults.py, tests/test_crash_safety.py) use the same seam
through `failing_after_proposal`: the job's write calls `pipeline.writes.record.write_proposal`
by name for every decided fact, so wrapping it puts a fault inside the open transaction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

DIE_IN_EXTRACT = "FAULT_DIE_IN_EXTRACT"
DIE_IN_WRITE_ONCE = "FAULT_DIE_IN_WRITE_ONCE"


def _die() -> None:
    os._exit(1)


def _patch_extraction(marker: str) -> None:
    from pipeline import extraction

    original = extraction.extract

    def extract(client, text, *args, **kwargs):
        if marker in text:
            _die()
        return original(client, text, *args, **kwargs)

    extraction.extract = extract  # pipeline.tasks calls it as extraction.extract(...)


def after_each_proposal(fault: Callable[[int], None]) -> Callable[[], None]:
    """Call `fault(position)` right after the job's write wrote each proposal, inside its open
    transaction; returns the function that puts the real write back."""
    from pipeline.writes import record

    real = record.write_proposal

    def write_proposal(decided, write):
        proposal = real(decided, write)
        fault(proposal.position)
        return proposal

    record.write_proposal = write_proposal
    return lambda: setattr(record, "write_proposal", real)


@contextlib.contextmanager
def failing_after_proposal(position: int, error: Exception) -> Iterator[None]:
    """Within the block, a job's write raises `error` right after writing proposal `position`."""

    def fail(index: int) -> None:
        if index == position:
            raise error

    restore = after_each_proposal(fail)
    try:
        yield
    finally:
        restore()


def _patch_write(flag: Path) -> None:
    def die_at_second_proposal_once(position: int) -> None:
        if position == 1 and not flag.exists():
            flag.write_text(str(os.getpid()))
            _die()

    # Patched before the cluster forks its workers, so every worker's write carries the fault.
    after_each_proposal(die_at_second_proposal_once)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    if marker := os.environ.get(DIE_IN_EXTRACT):
        _patch_extraction(marker)
    if flag := os.environ.get(DIE_IN_WRITE_ONCE):
        _patch_write(Path(flag))
    from django.core.management import call_command

    call_command("qcluster")


if __name__ == "__main__":
    main()

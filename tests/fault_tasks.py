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
"""

from __future__ import annotations

import os
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


def _patch_write(flag: Path) -> None:
    from pipeline import tasks

    original = tasks.run_job

    def die_at_second_proposal_once(position: int) -> None:
        if position == 1 and not flag.exists():
            flag.write_text(str(os.getpid()))
            _die()

    def run_job(job_id: str, *, fail_inside=None):
        return original(job_id, fail_inside=fail_inside or die_at_second_proposal_once)

    # django-q2 resolves "pipeline.tasks.run_job" by name in the worker, so it finds this one.
    tasks.run_job = run_job


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

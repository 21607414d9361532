"""The benchmarks' reference workload (devtools.machine_speed): timed just before each job, it says
how fast the machine was, and scales each job to a quiet machine's speed."""

import pytest

from devtools import machine_speed
from devtools.bench import REFERENCE_ROW, Report, report_slowness

QUIET = machine_speed.QUIET_MS


def test_the_workload_does_the_same_work_every_run_and_takes_some_time():
    first = machine_speed.checksum()
    assert machine_speed.checksum() == first
    assert first > 0
    assert 0 < machine_speed.sample() < 10_000


def test_each_job_is_scaled_by_the_reference_time_taken_just_before_it():
    paired = machine_speed.Paired()
    paired.add(40.0, QUIET)  # a quiet moment: as it is
    paired.add(90.0, 2 * QUIET)  # twice as slow: half of it, 45
    paired.add(30.0, 3 * QUIET)  # three times as slow: 10
    assert paired.at_quiet_speed_p50() == pytest.approx(40.0)
    # The p50 of the scaled jobs, not the p50 of the jobs over the p50 of the references (20).
    assert paired.at_quiet_speed_p50() != pytest.approx(40.0 * QUIET / (2 * QUIET))
    assert machine_speed.Paired().at_quiet_speed_p50() is None


def test_slowness_is_the_median_reference_over_a_quiet_machines():
    assert machine_speed.slowness([QUIET, 3 * QUIET, 2 * QUIET]) == 2.0
    assert machine_speed.is_quiet([QUIET * 1.1] * 5) is True
    assert machine_speed.is_quiet([QUIET * (machine_speed.SLOW_RATIO + 0.1)] * 5) is False
    assert machine_speed.slowness([]) is None and machine_speed.is_quiet([]) is None
    # Judged before any rounding: a median just over the limit is not quiet.
    limit = QUIET * machine_speed.SLOW_RATIO
    assert machine_speed.is_quiet([limit + 0.02] * 3) is False
    assert machine_speed.is_quiet([limit] * 3) is True


def test_a_slow_run_is_reported_over_with_a_note_and_a_quiet_one_ok():
    slow = Report()
    figures = report_slowness(slow, [2 * QUIET, 2 * QUIET, 3 * QUIET])
    assert figures == {"quiet_ms": QUIET, "job_reference_p50_ms": 2 * QUIET, "slowness": 2.0}
    (row,) = slow.rows
    assert (row.figure, row.value, row.ok) == (REFERENCE_ROW, f"{2 * QUIET:.2f} ms", False)
    assert row.budget == f"<= {QUIET * machine_speed.SLOW_RATIO:g} ms (quiet)"
    assert any(note.startswith("NOT A QUIET MACHINE: ") for note in slow.notes)

    quiet = Report()
    report_slowness(quiet, [QUIET, QUIET * 1.05])
    assert [row.ok for row in quiet.rows] == [True]
    assert quiet.notes == []

    nothing = Report()
    assert report_slowness(nothing, [])["slowness"] is None
    assert [(row.value, row.ok) for row in nothing.rows] == [("n/a", None)]
    assert nothing.notes == []

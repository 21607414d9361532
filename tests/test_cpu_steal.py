"""The benchmarks' steal share (devtools.cpu_steal): read from /proc/stat's first line, as the
share of the CPU time wanted between two samples that the host gave to other guests."""

from pathlib import Path

from devtools import cpu_steal
from devtools.bench import STEAL_ROWS, Report, report_steal

# user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  {user} 10 {system} 90000 400 0 {softirq} {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"


def stat_file(tmp_path: Path, user: int, system: int, softirq: int, steal: int) -> Path:
    path = tmp_path / "stat"
    path.write_text(LINE.format(user=user, system=system, softirq=softirq, steal=steal))
    return path


def test_a_sample_counts_what_the_cpus_ran_and_what_the_host_took(tmp_path):
    times = cpu_steal.sample(stat_file(tmp_path, user=500, system=70, softirq=20, steal=33))
    assert times == cpu_steal.CpuTimes(ran=500 + 10 + 70 + 20, stolen=33)


def test_the_share_is_the_stolen_part_of_the_time_wanted_between_two_samples(tmp_path):
    start = cpu_steal.sample(stat_file(tmp_path, user=1000, system=100, softirq=0, steal=50))
    # 300 ticks ran (user 280, system 20), 100 stolen: a quarter of the 400 wanted.
    end = cpu_steal.sample(stat_file(tmp_path, user=1280, system=120, softirq=0, steal=150))
    assert cpu_steal.stolen_share(start, end) == 0.25


def test_too_little_time_or_no_file_gives_no_share(tmp_path):
    start = cpu_steal.sample(stat_file(tmp_path, user=1000, system=100, softirq=0, steal=50))
    end = cpu_steal.sample(stat_file(tmp_path, user=1030, system=100, softirq=0, steal=60))
    assert cpu_steal.stolen_share(start, end) is None  # 40 ticks wanted: under MIN_TICKS
    assert cpu_steal.sample(tmp_path / "missing") is None
    (tmp_path / "short").write_text("cpu  1 2 3 4\n")  # a kernel that reports no steal
    assert cpu_steal.sample(tmp_path / "short") is None
    assert cpu_steal.stolen_share(None, end) is None


def test_this_machines_proc_stat_reads():
    times = cpu_steal.sample()
    assert times is not None and times.ran > 0 and times.stolen >= 0


def test_a_noisy_run_is_reported_over_with_a_note_and_a_quiet_one_ok():
    noisy = Report()
    shares = report_steal(noisy, {"whole_run": 0.23456, "job_phases": 0.4})
    assert shares == {"whole_run": 0.235, "job_phases": 0.4}
    whole, jobs = noisy.rows
    assert (whole.value, whole.budget, whole.ok) == ("23.5 %", "<= 5 % (quiet)", False)
    assert (jobs.value, jobs.budget, jobs.ok) == ("40.0 %", "", None)  # printed, not checked
    assert any(note.startswith("NOT A QUIET MACHINE: ") for note in noisy.notes)

    quiet = Report()
    report_steal(quiet, {"whole_run": 0.01, "job_phases": None})
    assert [(row.value, row.ok) for row in quiet.rows] == [("1.0 %", True), ("n/a", None)]
    assert quiet.notes == []


def test_only_the_whole_runs_share_is_checked_whatever_order_the_shares_come_in():
    report = Report()
    report_steal(report, {"job_phases": 0.5, "whole_run": 0.02})
    checked = {row.figure: row.ok for row in report.rows}
    assert checked == {STEAL_ROWS["job_phases"]: None, STEAL_ROWS["whole_run"]: True}
    assert report.notes == []  # the job phases were noisy, the run as a whole was not

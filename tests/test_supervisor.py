"""`manage.py serve` keeps running when one part dies (issue 21, item 3): killing only the queue
workers or only the MCP server leaves the dashboard up, the dead part is started again (logged, and
shown in /api/health with its restart count), and only SIGINT/SIGTERM stops everything."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from dashboard import supervisor
from tests.mcp_support import Store, free_port
from tests.test_mcp_http import Served, reachable, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("supervised"))
    store.manage("migrate", "--noinput")
    store.tokens = {"ingest": store.token("watcher", "ingest")}
    server = Served(store, free_port(), free_port())
    try:
        url = wait_for(server.mcp_url, 60, "serve to print the MCP URL")
        wait_for(lambda: reachable(url) and reachable(server.web + "/login/"), 60, "web and MCP")
        yield server
    finally:
        server.stop()


def processes(served) -> dict:
    answer = httpx.get(
        served.web + "/api/health",
        headers={"Authorization": f"Bearer {served.store.tokens['ingest']}"},
        timeout=10,
    )
    assert answer.status_code == 200
    return answer.json()["processes"]


def test_health_lists_every_supervised_process_running(served):
    report = processes(served)
    assert report["supervisorAlive"] is True
    assert set(report["children"]) == {"web", "workers", "mcp"}
    assert all(child["state"] == "running" for child in report["children"].values())
    assert all(child["restarts"] == 0 for child in report["children"].values())


@pytest.mark.parametrize("name", ["workers", "mcp"])
def test_a_killed_part_is_restarted_and_the_dashboard_stays_up(served, name):
    before = processes(served)["children"][name]
    os.kill(before["pid"], signal.SIGKILL)
    # The dashboard keeps answering while the part is down and after.
    assert httpx.get(served.web + "/login/", timeout=5).status_code == 200

    def restarted():
        child = processes(served)["children"][name]
        return child if child["state"] == "running" and child["pid"] != before["pid"] else None

    child = wait_for(restarted, 30, f"{name} to be restarted")
    assert child["restarts"] == before["restarts"] + 1
    assert child["lastExit"]["code"] == -signal.SIGKILL
    assert re.search(rf"{name} \(pid {before['pid']}\) stopped with signal 9", served.text())
    assert f"Restarted {name} (pid {child['pid']}" in served.text()
    assert served.proc.poll() is None
    if name == "mcp":
        wait_for(lambda: reachable(served.mcp_url()), 30, "the restarted MCP server to answer")


def test_sigterm_stops_every_part_and_clears_the_record(served):
    pids = [child["pid"] for child in processes(served)["children"].values()]
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (served.store.root / "processes.json").exists()
    assert "Stopped web, workers and MCP." in served.text()


def test_a_part_that_keeps_dying_waits_longer_each_time(monkeypatch):
    said = []
    child = supervisor.Child("flaky", ["true"])
    watcher = supervisor.Supervisor([child], said.append)
    waits = []
    for _ in range(7):
        child.start()
        child.process.wait()
        watcher._died(child, now=child.started + 1)
        waits.append(child.restart_at - (child.started + 1))
    assert waits == [1, 2, 4, 8, 16, 30, 30]
    child.start()
    child.process.wait()
    watcher._died(child, now=child.started + supervisor.HEALTHY_AFTER)  # ran a minute: fresh
    assert child.restart_at - (child.started + supervisor.HEALTHY_AFTER) == 1
    assert "flaky (pid" in said[0] and "restarting in 1 s" in said[0]


def test_what_a_dead_part_left_in_its_group_is_ended_before_it_restarts(tmp_path):
    """Found by a QA pass: a queue cluster killed hard left its workers running; they took jobs
    beside the new cluster, and outlived Ctrl-C."""
    left = tmp_path / "leftover.pid"
    child = supervisor.Child("cluster", ["sh", "-c", f"sleep 60 & echo $! > {left}; wait"])
    watcher = supervisor.Supervisor([child], lambda said: None)
    child.start()
    wait_for(lambda: left.exists() and left.read_text().strip(), 10, "the worker's pid")
    worker = int(left.read_text())
    child.process.send_signal(signal.SIGKILL)
    child.process.wait()
    os.kill(worker, 0)  # still running, orphaned in the dead part's group
    watcher._died(child, now=child.started + 1)

    def gone():
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        return _zombie(worker)  # ended, not yet reaped by init

    wait_for(gone, 10, "the leftover worker to end")


def _zombie(pid: int) -> bool:
    """Whether the process has ended and waits only to be reaped (its parent is init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_supervisor_killed_hard_takes_its_parts_with_it(tmp_path):
    """Found by a QA pass: a serve killed with SIGKILL left web, workers and MCP running (each in
    a session of its own); a new serve's parts could not bind, and the old workers took jobs."""
    started = tmp_path / "part.pid"
    script = (
        "import sys, time; sys.path.insert(0, '.'); from dashboard import supervisor; "
        f"c = supervisor.Child('part', ['sh', '-c', 'echo $$ > {started}; exec sleep 60']); "
        "c.start(); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        wait_for(lambda: started.exists() and started.read_text().strip(), 20, "the part's pid")
        part = int(started.read_text())
        parent.kill()
        parent.wait()

        def gone():
            try:
                os.kill(part, 0)
            except ProcessLookupError:
                return True
            return _zombie(part)

        wait_for(gone, 10, "the part to end with its supervisor")
    finally:
        parent.kill()


@pytest.mark.django_db
def test_serve_starts_its_parts_in_the_project_folder_wherever_it_is_run(monkeypatch, tmp_path):
    """Found by a QA pass: run from another folder, its parts looked for ./manage.py and
    config.wsgi there, and restarted forever. Each part now starts in the project folder, with
    manage.py named by its whole path; the workers' part is run to show it starts."""
    from dashboard.management.commands import serve

    started = {}

    class Watching:
        def __init__(self, children, say):
            started.update({child.name: child for child in children})

        def run(self, ready):
            return None

    monkeypatch.setattr(serve, "Supervisor", Watching)
    monkeypatch.chdir(tmp_path)
    call_command("serve", "--bind", "127.0.0.1:1")
    assert {child.cwd for child in started.values()} == {str(ROOT)}
    assert started["workers"].argv[1] == str(ROOT / "manage.py")
    check = [started["workers"].argv[0], started["workers"].argv[1], "check"]
    assert subprocess.run(check, cwd=tmp_path, capture_output=True).returncode == 0


def test_a_part_its_watch_finds_stuck_twice_is_ended_and_restarted_with_the_reason():
    """The queue cluster that runs no task runs on, every process alive: its watch says so, and
    when it still says so CONFIRM_AFTER later (one reading can be wrong: a machine back from
    sleep), the supervisor ends it (its whole group) and starts it again like any dead part."""
    said = []
    verdicts = iter(["is stuck", None, "is stuck", "is stuck", "is stuck"])
    stuck = supervisor.Child("workers", ["sleep", "60"], watch=lambda started: next(verdicts))
    watcher = supervisor.Supervisor([stuck], said.append)
    stuck.start()
    first = stuck.pid
    step = supervisor.WATCH_EVERY
    for clock in (0, step, 2 * step, 3 * step):  # suspect, cleared, suspect, not yet 30 s
        watcher._watch(stuck, 1000 + clock)
    assert stuck.running() and said == []
    watcher._watch(stuck, 1000 + 2 * step + supervisor.CONFIRM_AFTER)
    stuck.process.wait(timeout=10)
    assert watcher._tend()  # the death is noticed
    assert stuck.last_exit["reason"] == "is stuck" and stuck.last_exit["code"] == -signal.SIGKILL
    assert said[0].startswith(f"workers (pid {first}) is stuck: ending it to start it again")
    stuck.restart_at = 0
    watcher._tend()
    assert stuck.running() and stuck.pid != first and stuck.restarts == 1
    stuck.process.kill()


@pytest.mark.django_db
def test_the_queue_is_stalled_only_when_quiet_idle_and_tasks_wait(settings, tmp_path):
    """Quiet for longer than stall_seconds (from the last task, or the cluster's start), no
    worker running a task, and a task waiting in the broker; a queue node left idle beside
    others (nothing waits) or running long tasks is not stalled (a second reviewer, a live
    check that killed two 7-minute tasks)."""
    import os
    import time

    from django_q.tasks import async_task

    from dashboard.management.commands.serve import queue_stalled
    from memory import queue_beat

    settings.DATA_DIR = tmp_path
    now = time.time()
    long_ago = now - queue_beat.stall_seconds() - 5
    assert queue_stalled(now) is None  # just started, nothing run yet
    assert queue_stalled(long_ago) is None  # quiet, but nothing waits: idle, not stuck
    async_task("time.sleep", 0)  # a tick's task, waiting in the broker
    assert queue_beat.tasks_waiting() >= 1
    assert "started no task for" in queue_stalled(long_ago)
    queue_beat.task_started()  # a worker starts a task and runs it
    os.utime(queue_beat.beat_path(), (long_ago, long_ago))
    assert queue_beat.busy_workers() == 1 and queue_stalled(long_ago) is None
    queue_beat.task_ended()  # it ended just now: the queue moved
    assert queue_beat.busy_workers() == 0 and queue_stalled(long_ago) is None
    os.utime(queue_beat.beat_path(), (long_ago, long_ago))
    assert "started no task for" in queue_stalled(long_ago)


def test_a_cluster_starts_with_no_busy_file_left_from_before(settings, tmp_path):
    """A busy file a killed worker left counts while its pid names a live process: after a
    restart, pids are reused (pid 1 in a container), and the stall would never be seen."""
    from memory import queue_beat

    settings.DATA_DIR = tmp_path
    left = queue_beat.busy_path(1)  # pid 1 is alive
    left.parent.mkdir()
    left.touch()
    assert queue_beat.busy_workers() == 1
    cluster = supervisor.Child("workers", ["true"], before_start=queue_beat.forget_busy)
    cluster.start()
    cluster.process.wait()
    assert queue_beat.busy_workers() == 0 and not left.exists()

"""Keeps serve's processes running: a child that dies is started again after a backoff (1 s,
doubling to 30 s, back to 1 s once it has run a minute), each death and restart is logged and
recorded for /api/health (memory.processes), a child whose watch says it is stuck is ended and
restarted the same way, and only Ctrl-C or SIGTERM stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memory import processes

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
HEALTHY_AFTER = 60.0  # a child that ran this long before dying is restarted after FIRST_BACKOFF
STOP_GRACE = 15.0
WATCH_EVERY = 10.0  # seconds between a child's watch checks
CONFIRM_AFTER = 30.0  # a watch's reason must still hold this long after it was first given


def libc_prctl():
    """libc's prctl, looked up before a fork (nothing may be imported between fork and exec);
    None off Linux (the benchmark's workers use it too)."""
    try:
        import ctypes  # noqa: PLC0415 (Linux only, and only when a child starts)

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with(parent: int, prctl) -> None:
    """In a child before exec: SIGTERM when its parent dies, however it dies (a SIGKILL
    included); a parent already gone means now."""
    if prctl is not None:
        prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Child:
    """One supervised process: how to start it and what happened to it."""

    name: str
    argv: list[str]
    cwd: str | None = None  # the project folder: serve may be started from anywhere
    process: subprocess.Popen | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = FIRST_BACKOFF
    restart_at: float | None = None
    last_exit: dict | None = field(default=None)
    # A check of a running child that may answer why it must be started again though it runs
    # (given when it started, epoch seconds): the queue cluster that starts no task.
    watch: Callable[[float], str | None] | None = None
    before_start: Callable[[], None] | None = None  # run each time, before the process starts
    started_at: float = 0.0  # epoch seconds, for `watch` and the health report
    watched: float = 0.0  # monotonic: when `watch` last ran
    suspect_since: float | None = None  # monotonic: when `watch` first gave its reason
    stopped_because: str | None = None

    def start(self) -> None:
        # Own session: Ctrl-C reaches only the supervisor, which stops each child by its pid (a
        # SIGTERM to a whole django-q2 process group made shutdown hang).
        # A supervisor that dies (a SIGKILL, an OOM kill) takes its children with it: left
        # running, a new serve's parts could not bind, and the old workers took jobs beside it.
        if self.before_start is not None:
            self.before_start()
        prctl, parent = libc_prctl(), os.getpid()
        self.process = subprocess.Popen(
            self.argv,
            start_new_session=True,
            cwd=self.cwd,
            preexec_fn=lambda: die_with(parent, prctl),
        )
        self.started = time.monotonic()
        self.started_at = time.time()
        self.restart_at = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def end_leftovers(self) -> None:
        """Kill what the child left behind in its process group once it is gone (a queue
        cluster killed hard leaves its workers running, taking jobs beside the new cluster)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left in the group

    def record(self) -> dict:
        state = "running" if self.running() else "restarting"
        return {
            "pid": self.pid if self.running() else None,
            "state": state,
            "restarts": self.restarts,
            "lastExit": self.last_exit,
            "startedAt": self.started_at or None,
        }


class Supervisor:
    """Start the children, keep them running, stop them all on a signal."""

    def __init__(self, children: list[Child], say: Callable[[str], None]) -> None:
        self.children = children
        self.say = say
        self.stopping = False
        self.started_at = _now_text()

    def run(self, *, ready: Callable[[], None] = lambda: None) -> None:
        signal.signal(signal.SIGINT, self._stop_signal)
        signal.signal(signal.SIGTERM, self._stop_signal)
        try:
            for child in self.children:
                child.start()
            self._publish()
            ready()
            while not self.stopping:
                if self._tend():
                    self._publish()
                time.sleep(0.25)
        finally:
            self._stop_all()

    def _stop_signal(self, *_):
        self.stopping = True

    def _tend(self) -> bool:
        """Notice deaths and start what is due; True when anything changed."""
        changed = False
        now = time.monotonic()
        for child in self.children:
            self._watch(child, now)
            if child.restart_at is None and child.process is not None and not child.running():
                self._died(child, now)
                changed = True
            elif child.restart_at is not None and now >= child.restart_at and not self.stopping:
                child.start()
                child.restarts += 1
                self.say(f"Restarted {child.name} (pid {child.pid}, restart {child.restarts}).")
                changed = True
        return changed

    def _watch(self, child: Child, now: float) -> None:
        """Run the child's watch every WATCH_EVERY seconds; a reason it still gives CONFIRM_AFTER
        seconds after the first ends the child (its whole group, hard: a stalled cluster does
        not stop on a signal), which the next round notices and restarts as any death. Twice,
        because one reading can be wrong: a machine just back from sleep, a clock stepped."""
        if child.watch is None or not child.running() or now - child.watched < WATCH_EVERY:
            return
        child.watched = now
        reason = child.watch(child.started_at)
        if reason is None:
            child.suspect_since = None
        elif child.suspect_since is None:
            child.suspect_since = now
        elif now - child.suspect_since >= CONFIRM_AFTER:
            self.say(f"{child.name} (pid {child.pid}) {reason}: ending it to start it again.")
            child.stopped_because, child.suspect_since = reason, None
            child.end_leftovers()

    def _died(self, child: Child, now: float) -> None:
        child.end_leftovers()
        code = child.process.returncode
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if now - child.started >= HEALTHY_AFTER:
            child.backoff = FIRST_BACKOFF
        wait = child.backoff
        child.backoff = min(MAX_BACKOFF, child.backoff * 2)
        child.restart_at = now + wait
        child.last_exit = {"code": code, "at": _now_text()}
        if child.stopped_because:
            child.last_exit["reason"], child.stopped_because = child.stopped_because, None
        self.say(f"{child.name} (pid {child.pid}) stopped with {how}; restarting in {wait:.0f} s.")

    def _publish(self) -> None:
        processes.write(
            {
                "pid": os.getpid(),
                "startedAt": self.started_at,
                "children": {child.name: child.record() for child in self.children},
            }
        )

    def _stop_all(self) -> None:
        self.stopping = True
        running = [child for child in self.children if child.running()]
        for child in running:
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for child in running:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
        # Nothing of theirs outlives Ctrl-C. Only those running now: a dead one's group ended
        # when it died, and its pid may belong to someone else by now.
        for child in running:
            child.end_leftovers()
        processes.clear()

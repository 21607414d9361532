"""A PostgreSQL server that can hold a user's data keeps acknowledged commits through a crash
(issue 21, item 5): the server `python -m devtools.pgserver` and the benchmark start keeps
PostgreSQL's durable defaults, and every acknowledged write survives a SIGKILL of the server in the
middle of a burst. (With synchronous_commit=off, 12 of 5,463 acknowledged writes were lost in two
kills: a commit was acknowledged while its WAL was still in the server's memory.)"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from devtools.pgserver import BENCH_SETTINGS, EmbeddedPostgres

pytestmark = pytest.mark.slow


@pytest.fixture
def server():
    with EmbeddedPostgres(settings=BENCH_SETTINGS) as running:
        yield running


def setting(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(f"SHOW {name}").fetchone()[0]


def test_the_server_for_real_data_keeps_the_durable_defaults(server):
    assert setting(server.url, "synchronous_commit") == "on"
    assert setting(server.url, "fsync") == "on"
    assert setting(server.url, "full_page_writes") == "on"


def postmaster_pid(server) -> int:
    return int((server.root / "data" / "postmaster.pid").read_text().split()[0])


def test_every_acknowledged_write_survives_a_crash_of_the_server(server):
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE acked (id bigint PRIMARY KEY, body text)")
    acknowledged: list[int] = []
    stop = threading.Event()

    def writer(first: int):
        try:
            with psycopg.connect(server.url, autocommit=True) as conn:
                n = first
                while not stop.is_set():
                    conn.execute("INSERT INTO acked VALUES (%s, repeat('x', 200))", [n])
                    acknowledged.append(n)  # only after the server said COMMIT
                    n += 4
        except psycopg.OperationalError:
            pass  # the server went away mid-statement: that write was never acknowledged

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    pid = postmaster_pid(server)
    # This server's processes at once, as a crash would (never another server's: the suite's own
    # PostgreSQL may run as the same user).
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    os.kill(pid, signal.SIGSTOP)  # it may not start new ones while the others go
    for child in [int(c) for c in children.split()]:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(pid, signal.SIGKILL)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert len(acknowledged) > 500
    (server.root / "data" / "postmaster.pid").unlink(missing_ok=True)
    options = " ".join(
        ["-h 127.0.0.1", f"-p {server.port}", "-k ''"]
        + [f"-c {k}={v}" for k, v in server.settings.items()]
    )
    server._run(
        "pg_ctl", "-D", str(server.root / "data"), "-l", str(server.root / "log"), "-w",
        "-o", options, "start",
    )  # fmt: skip
    with psycopg.connect(server.url, autocommit=True) as conn:
        present = {row[0] for row in conn.execute("SELECT id FROM acked")}
    lost = [n for n in acknowledged if n not in present]
    assert lost == [], f"{len(lost)} of {len(acknowledged)} acknowledged writes lost"

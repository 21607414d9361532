"""The layers of DESIGN section 3, enforced: no module imports a layer above its own.

memory (the store) < pipeline (the domain) < api, dashboard, devtools (importing nothing of each
other) < config (settings and URLs, on top: it wires the rest together and nothing imports it).
Every import counts, function-local ones included, so a cycle cannot be hidden. Engine checks
stay in the store's backend, its two engine packages and the migrations.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYER = {"memory": 0, "pipeline": 1, "api": 2, "dashboard": 2, "devtools": 3, "config": 4}


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in the source, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(package: str, source: str) -> list[str]:
    """Imports in a module of `package` that point at a layer it may not use."""
    own = LAYER[package]
    bad = []
    for line, target in imported_packages(source):
        if target not in LAYER or target == package:
            continue
        if LAYER[target] > own or (LAYER[target] == own):
            bad.append(f"line {line}: imports {target}")
    return bad


def product_modules():
    for package in LAYER:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


@pytest.mark.parametrize(
    ("package", "path"),
    list(product_modules()),
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else value,
)
def test_module_imports_only_its_own_layer_or_below(package, path):
    assert violations(package, path.read_text()) == []


def test_a_planted_upward_import_is_caught_even_inside_a_function():
    planted = "def helper():\n    from pipeline.models import Proposal\n    return Proposal\n"
    assert violations("memory", planted) == ["line 2: imports pipeline"]


def test_the_top_layers_do_not_import_each_other():
    assert violations("dashboard", "import api.serializers\n") == ["line 1: imports api"]
    assert violations("api", "from devtools import bench\n") == ["line 1: imports devtools"]


def test_nothing_imports_config_and_config_imports_the_rest():
    assert violations("memory", "from config.settings import DATABASES\n") == [
        "line 1: imports config"
    ]
    assert violations("config", "from memory.backend.postgres import url\nimport dashboard\n") == []


def test_a_downward_import_is_allowed():
    assert violations("dashboard", "from pipeline import review\nfrom memory import writes\n") == []


# One door: the interfaces reach the pipeline's writes only through pipeline/review.py (reviewer
# actions, a job's retry, a config change), never pipeline.writes itself.
INTERFACES = ("api", "dashboard")
BEHIND_THE_DOOR = "pipeline.writes"


def imported_modules(source: str) -> list[tuple[int, list[str]]]:
    """(line, dotted names) of every import at any depth; `from a import b` names a and a.b."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.append((node.lineno, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(
                (node.lineno, [node.module, *(f"{node.module}.{a.name}" for a in node.names)])
            )
    return found


def door_violations(source: str) -> list[str]:
    """`line N: imports pipeline.writes` for each import that goes around pipeline/review.py."""
    return [
        f"line {line}: imports {BEHIND_THE_DOOR}"
        for line, names in imported_modules(source)
        if any(name == BEHIND_THE_DOOR or name.startswith(BEHIND_THE_DOOR + ".") for name in names)
    ]


@pytest.mark.parametrize(
    "path",
    [path for package, path in product_modules() if package in INTERFACES],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_interfaces_reach_the_pipeline_writes_only_through_review(path):
    assert door_violations(path.read_text()) == []


def test_an_import_around_the_door_is_caught_at_any_depth():
    planted = (
        "from pipeline import review, writes\n"
        "import pipeline.writes.jobs\n"
        "def helper():\n"
        "    from pipeline.writes.config import update_config\n"
        "    return update_config\n"
        "class View:\n"
        "    def post(self):\n"
        "        from pipeline.writes import review as review_writes\n"
    )
    assert door_violations(planted) == [f"line {n}: imports pipeline.writes" for n in (1, 2, 4, 8)]
    assert door_violations("from pipeline import review\nfrom pipeline.writesx import y\n") == []


@pytest.mark.parametrize(
    "path", sorted((ROOT / "dashboard" / "views").glob("*.py")), ids=lambda path: path.name
)
def test_a_view_module_imports_no_other_view_module(path):
    """Rules a second screen needs (the queue's filters) live in pipeline/ or dashboard/ helpers."""
    assert [
        line
        for line, names in imported_modules(path.read_text())
        if any(name.startswith("dashboard.views.") for name in names)
    ] == []


# The interfaces and the domain import at the top: a function-local import of our own code hides a
# dependency (and would only be needed to break a cycle, which the layers above already forbid).
TOP_LEVEL_IMPORTS_ONLY = ("pipeline", "api", "dashboard")


def function_local_imports(source: str) -> list[str]:
    """`line N: imports X` for each import of one of our packages that is not at module level."""
    tree = ast.parse(source)
    at_top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if id(node) in at_top or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [
            f"line {node.lineno}: imports {name}" for name in names if name.split(".")[0] in LAYER
        ]
    return found


@pytest.mark.parametrize(
    "path",
    [path for package, path in product_modules() if package in TOP_LEVEL_IMPORTS_ONLY],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_domain_and_the_interfaces_import_our_code_at_the_top(path):
    assert function_local_imports(path.read_text()) == []


def test_a_function_local_import_of_our_code_is_caught():
    planted = (
        "import json\n\ndef helper():\n    from memory.models import Memory\n    import json\n"
    )
    assert function_local_imports(planted) == ["line 4: imports memory.models"]


# Where code may ask which engine it runs on: the backend (whose `memory.backend.is_postgres()` is
# the check for everyone else), the two engine packages, and the migrations with their shared
# operations (memory/migration_ops.py), which create each engine's own indexes. Two more ask
# `is_postgres()` for what they are about, not to branch a rule: copy_store, whose target must be
# a PostgreSQL database, and the benchmark (devtools/), which measures each engine.
ENGINE_CHECKS_ALLOWED = (
    "memory/backend/",
    "memory/keyword/",
    "memory/vectors/",
    "memory/migrations/",
    "memory/migration_ops.py",
)
ENGINE_QUESTION_ALLOWED = ("memory/management/commands/copy_store.py", "devtools/")


def _is_vendor(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "vendor"


def _reads_connection_vendor(node: ast.AST) -> bool:
    """`connection.vendor` or `<anything>.connection.vendor`."""
    if not _is_vendor(node):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "connection") or (
        isinstance(owner, ast.Attribute) and owner.attr == "connection"
    )


def _compares_engines(node: ast.AST) -> bool:
    """A comparison with a `.vendor` or with "postgresql" (also inside a set, tuple or list)."""
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    items = [
        item
        for operand in operands
        for item in (
            operand.elts if isinstance(operand, ast.Set | ast.Tuple | ast.List) else [operand]
        )
    ]
    return any(_is_vendor(item) for item in items) or any(
        isinstance(item, ast.Constant) and item.value == "postgresql" for item in items
    )


def _asks_is_postgres(node: ast.AST) -> bool:
    """A call of `is_postgres(...)` or `<anything>.is_postgres(...)`."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "is_postgres") or (
        isinstance(func, ast.Attribute) and func.attr == "is_postgres"
    )


def engine_checks(source: str, *, asking_allowed: bool = False) -> list[str]:
    """`line N: checks the engine` for each line that reads `connection.vendor`, compares a
    vendor or "postgresql", or (unless `asking_allowed`) calls `is_postgres()`."""
    lines = {
        node.lineno
        for node in ast.walk(ast.parse(source))
        if _reads_connection_vendor(node)
        or _compares_engines(node)
        or (not asking_allowed and _asks_is_postgres(node))
    }
    return [f"line {line}: checks the engine" for line in sorted(lines)]


@pytest.mark.parametrize(
    "path",
    [
        path
        for _, path in product_modules()
        if not str(path.relative_to(ROOT)).startswith(ENGINE_CHECKS_ALLOWED)
    ],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_engine_checks_live_in_the_backend_the_engine_packages_and_the_migrations(path):
    asking = str(path.relative_to(ROOT)).startswith(ENGINE_QUESTION_ALLOWED)
    assert engine_checks(path.read_text(), asking_allowed=asking) == []


def test_a_planted_engine_check_is_caught():
    planted = (
        "from django.db import connection\n\n"
        "def helper(target, schema_editor):\n"
        "    on_pg = connection.vendor\n"
        "    if target.vendor != 'sqlite':\n"
        "        return schema_editor.connection.vendor\n"
        "    return engine in {'postgres', 'postgresql'}\n"
        "tags = ['postgresql', 'backups']\n"
    )
    assert engine_checks(planted) == [
        "line 4: checks the engine",
        "line 5: checks the engine",
        "line 6: checks the engine",
        "line 7: checks the engine",
    ]


def test_a_planted_is_postgres_call_is_caught():
    planted = (
        "from memory import backend\n"
        "from memory.backend import is_postgres\n\n"
        "def helper():\n"
        "    if backend.is_postgres():\n"
        "        return 1\n"
        "    return is_postgres(None)\n"
    )
    assert engine_checks(planted) == ["line 5: checks the engine", "line 7: checks the engine"]
    assert engine_checks(planted, asking_allowed=True) == []

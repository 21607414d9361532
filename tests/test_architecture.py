"""The layers of DESIGN section 3, enforced: no module imports a layer above its own.

memory (the store) < pipeline (the domain) < api, dashboard, devtools (on top, importing nothing
of each other). Every import counts, function-local ones included, so a cycle cannot be hidden.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYER = {"memory": 0, "pipeline": 1, "api": 2, "dashboard": 2, "devtools": 3}


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


def test_a_downward_import_is_allowed():
    assert violations("dashboard", "from pipeline import review\nfrom memory import writes\n") == []


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

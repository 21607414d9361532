"""Small modules, short functions (issue 25, item 7): no product module over 600 lines and no
function over 80, so a rule stays readable in one place. Migrations and devtools are not product
modules (a migration is written once; the benchmark is a development tool)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("memory", "pipeline", "api", "dashboard", "config")
MODULE_LINES = 600
FUNCTION_LINES = 80


def product_modules():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def long_functions(source: str) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]


@pytest.mark.parametrize("path", list(product_modules()), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_product_module_stays_small_with_short_functions(path):
    source = path.read_text()
    assert len(source.splitlines()) <= MODULE_LINES
    assert long_functions(source) == []


def test_a_long_function_is_caught():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    assert long_functions(f"def grown():\n{body}\n") == [f"grown ({FUNCTION_LINES + 1} lines)"]

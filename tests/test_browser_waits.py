"""Browser tests poll the page only with function expressions, which the page's CSP allows."""

import ast
from pathlib import Path

BROWSER_TESTS = Path(__file__).parent / "browser"


def plain_expression_waits():
    """Yield (file, line) of each wait_for_function given a string that is not an arrow function."""
    for path in sorted(BROWSER_TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "wait_for_function" or not node.args:
                continue
            first = node.args[0]
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if literal and "=>" not in first.value.split("\n", 1)[0]:
                yield path.name, node.lineno


def test_no_browser_test_polls_a_plain_expression_the_csp_refuses_to_eval():
    """Playwright evaluates a plain expression again on every poll with eval(), which the page's
    script-src 'self' refuses once the first check is false; a function is evaluated once."""
    assert list(plain_expression_waits()) == []

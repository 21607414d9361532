"""The README stays a newcomer's five-minute read, and no link in it or in docs/ points nowhere.

The MCP snippets the README shows are run by tests/test_mcp_stdio.py and tests/test_mcp_http.py.
"""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 200

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    links = [target for line in prose(page.read_text()) for target in LINK.findall(line)]
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_readme_is_at_most_200_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; it is a newcomer's five-minute read (at most "
        f"{README_MAX_LINES}). Move the details to docs/ and link them."
    )


def test_the_docs_folder_has_pages():
    assert DOCS, "docs/ has no Markdown pages"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_that_exists(page):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {os.path.relpath(file, ROOT)})")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target} (no heading #{fragment} in {file.name})")
    assert broken == [], f"{page.relative_to(ROOT)} has broken links: {broken}"


def test_the_readme_links_every_page_of_docs():
    linked = {
        (README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)
    }
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_the_link_checker_sees_links_and_anchors():
    sample = ROOT / "docs" / "api.md"
    assert "screenshots/review-queue.png" in {
        t.partition("#")[0].removeprefix("docs/") for t in relative_links(README)
    }
    assert "connect-an-agent-over-mcp" in anchors(README)
    assert "mcp" in anchors(sample)


# The test suite's own database names, set by tests/conftest.py, are no setting a user changes.
SETTINGS = ROOT / "config" / "settings.py"
ENV_READ = re.compile(r"""(?:env_\w+|environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']""")
TEST_ONLY_ENV = {"MEMORY_TEST_DB_PATH", "MEMORY_TEST_DB_NAME"}


def environment_variables(source: str) -> set[str]:
    return set(ENV_READ.findall(source)) - TEST_ONLY_ENV


def test_every_environment_variable_the_settings_read_is_documented():
    documented = "\n".join(page.read_text() for page in PAGES)
    names = environment_variables(SETTINGS.read_text())
    assert len(names) > 30
    assert sorted(n for n in names if not re.search(rf"\b{n}\b", documented)) == []


def test_the_environment_check_sees_each_way_of_reading_one():
    source = 'A = env_int("MEMORY_A", 1)\nB = os.environ.get("MEMORY_B")\nC = getenv("DJANGO_C")\n'
    assert environment_variables(source) == {"MEMORY_A", "MEMORY_B", "DJANGO_C"}

"""No source, template or document keeps a merge-conflict marker (one reached a page once)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = {".py", ".html", ".js", ".css", ".md", ".toml", ".txt", ".cfg", ".yml", ".yaml"}
SKIPPED = {".venv", "node_modules", ".git", "var", "media", "staticfiles"}
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def marker_lines(text: str) -> list[int]:
    """Line numbers (from 1) of the lines that open, split or close a conflict."""
    return [text.count("\n", 0, match.start()) + 1 for match in MARKER.finditer(text)]


def project_files() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*")
        if path.suffix in CHECKED
        and path.is_file()
        and not SKIPPED.intersection(path.relative_to(ROOT).parts)
    )


def test_no_project_file_has_a_merge_conflict_marker():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in project_files()
        if (lines := marker_lines(path.read_text(encoding="utf-8", errors="replace")))
    }
    assert len(project_files()) > 100, "the walk found the project's files"
    assert not found, f"conflict markers (file: lines): {found}"


def test_a_planted_conflict_is_found_on_its_lines():
    text = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> h2\nb\n"
    assert marker_lines(text) == [2, 4, 6]


def test_a_heading_rule_of_equals_signs_is_not_a_marker():
    assert marker_lines("Title\n=====\n\n========\ntext ======= more\n") == []

"""A tiny, safe Markdown for a queue's guidelines: the text is escaped first, then blank lines
make paragraphs, lines starting with "- " or "* " make a list, and **bold** and `code` are marked.
Nothing else is interpreted, so no HTML, link or image a writer types reaches the page."""

from __future__ import annotations

import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+?)`")
_ITEM = re.compile(r"^\s*[-*]\s+")


def _inline(text: str) -> str:
    """Escaped text with `code` and **bold** marked (code first: its stars stay stars)."""
    parts = _CODE.split(escape(text))
    for n in range(0, len(parts), 2):
        parts[n] = _BOLD.sub(r"<strong>\1</strong>", parts[n])
    for n in range(1, len(parts), 2):
        parts[n] = f"<code>{parts[n]}</code>"
    return "".join(parts)


def render(text: str | None) -> SafeString:
    blocks = []
    for block in re.split(r"\n\s*\n", (text or "").strip()):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if all(_ITEM.match(line) for line in lines):
            items = "".join(f"<li>{_inline(_ITEM.sub('', line))}</li>" for line in lines)
            blocks.append(f"<ul>{items}</ul>")
        else:
            blocks.append(f"<p>{'<br>'.join(_inline(line.strip()) for line in lines)}</p>")
    return mark_safe("".join(blocks))  # noqa: S308 - every piece of text was escaped above

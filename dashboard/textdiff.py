"""Word-level diffs and span highlighting for display. Pure functions; output is escaped HTML."""

from __future__ import annotations

import difflib
import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from pipeline.safety import HIDDEN_CHARS

_TOKENS = re.compile(r"\s+|[^\s]+")
_HIDDEN = re.compile("[" + "".join(HIDDEN_CHARS) + "]")


def reveal(text: str) -> SafeString:
    """Escape text and replace hidden characters with a visible marker."""
    escaped = escape(text or "")
    return mark_safe(
        _HIDDEN.sub(
            lambda m: (
                f'<span class="hidden-char" title="hidden character U+{ord(m.group()):04X}">{HIDDEN_CHARS[m.group()]}</span>'
            ),
            escaped,
        )
    )


def named_hidden(text: str) -> str:
    """Plain text (for an attribute, which holds no markup) with each hidden character named in
    brackets ("[RLO]"): it cannot reverse or hide what follows it."""
    return _HIDDEN.sub(lambda m: f"[{HIDDEN_CHARS[m.group()]}]", text or "")


def word_diff(old: str, new: str) -> SafeString:
    """old -> new as escaped HTML with <del> and <ins> around changed words."""
    a, b = _TOKENS.findall(old or ""), _TOKENS.findall(new or "")
    parts: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            parts.append(str(reveal("".join(a[i1:i2]))))
            continue
        old_words, new_words = "".join(a[i1:i2]), "".join(b[j1:j2])
        if op in {"delete", "replace"}:
            parts.append(f"<del>{reveal(old_words)}</del>")
        if op == "replace" and not old_words[-1:].isspace() and not new_words[:1].isspace():
            parts.append(" ")  # "<del>in</del><ins>as</ins>" would read "inas"
        if op in {"insert", "replace"}:
            parts.append(f"<ins>{reveal(new_words)}</ins>")
    return mark_safe("".join(parts))


def highlight_words(
    text: str, words: set[str], css: str = "overlap", conflict: set[str] | None = None
) -> SafeString:
    """Escape text; mark words in `words` (css class) and words in `conflict` (class conflict)."""
    conflict = conflict or set()
    if not words and not conflict:
        return reveal(text)
    out = []
    for token in _TOKENS.findall(text or ""):
        core = re.sub(r"[^\w]", "", token.lower().replace("\u2019", "'").replace("'", ""))
        if core and core in conflict:
            out.append(f'<mark class="conflict">{reveal(token)}</mark>')
        elif core and core in words:
            out.append(f'<mark class="{css}">{reveal(token)}</mark>')
        else:
            out.append(str(reveal(token)))
    return mark_safe("".join(out))


def mark_spans(text: str, spans: list[tuple[int, int]]) -> SafeString:
    """Escape text and wrap each (start, end) span in <mark>; overlapping spans are merged."""
    out, cursor = [], 0
    for start, end in sorted(spans):
        start, end = max(start, cursor), min(end, len(text))
        if start >= end:
            continue
        out.append(str(reveal(text[cursor:start])))
        out.append(f"<mark>{reveal(text[start:end])}</mark>")
        cursor = end
    out.append(str(reveal(text[cursor:])))
    return mark_safe("".join(out))

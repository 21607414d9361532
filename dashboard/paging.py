"""Keyset pages for a list a reviewer works through: a page starts after (or ends before) one row,
by that row's values of the sort key, so deciding rows on one page never shifts the next one."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import reduce

from django.db.models import Q, QuerySet


@dataclass
class CursorPage:
    """One page; duck-types the bits of a Paginator page that dashboard/_pagination.html reads."""

    object_list: list
    count: int  # every row matching, on all pages
    start: int  # the position of the first row (1-based)
    has_next: bool
    has_previous: bool
    next_after: str | None = None  # the last row's id: the next page starts after it
    previous_before: str | None = None  # the first row's id: the previous page ends before it
    cursor: bool = field(default=True, init=False)

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)

    @property
    def end(self) -> int:
        return self.start + len(self.object_list) - 1

    def has_other_pages(self) -> bool:
        return self.has_next or self.has_previous


def beyond(order: tuple[str, ...], values: dict, *, forward: bool = True) -> Q:
    """Rows strictly after the row with `values` in `order` (before it with forward=False)."""
    alternatives, same_so_far = [], Q()
    for key in order:
        name = key.lstrip("-")
        # Ascending and forward (or descending and backward): the rows with a bigger value.
        lookup = "gt" if key.startswith("-") != forward else "lt"
        alternatives.append(same_so_far & Q(**{f"{name}__{lookup}": values[name]}))
        same_so_far &= Q(**{name: values[name]})
    return reduce(operator.or_, alternatives)


def _reverse(order: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key[1:] if key.startswith("-") else f"-{key}" for key in order)


def cursor_page(
    query: QuerySet,
    order: tuple[str, ...],
    size: int,
    *,
    after: str | None = None,
    before: str | None = None,
    count: int | None = None,
) -> CursorPage:
    """The page after row `after` (or before row `before`; else the first page) of `query` in
    `order`, which must end with a unique key. The cursor row may have left the query since (a
    decided proposal): its sort values still place the page. An unknown id gives the first page.
    `count`, when the caller already counted `query`, saves counting it again."""
    names = [key.lstrip("-") for key in order]
    anchor_id = after or before
    anchor = (
        query.model._default_manager.filter(pk=anchor_id).values(*names).first()
        if anchor_id
        else None
    )
    if count is None:
        count = query.count()
    rows: list = []
    if anchor is not None and before and not after:
        earlier_rows = query.filter(beyond(order, anchor, forward=False))
        rows = list(earlier_rows.order_by(*_reverse(order))[:size])[::-1]
    if rows:
        has_next = True  # the anchor row, or the rows after it, follow this page
    else:
        after_anchor = anchor is not None and bool(after)
        rows = list(
            (query.filter(beyond(order, anchor)) if after_anchor else query).order_by(*order)[
                : size + 1
            ]
        )
        has_next, rows = len(rows) > size, rows[:size]
    if not rows:
        return CursorPage([], count, 1, has_next=False, has_previous=count > 0)
    if anchor is None:
        earlier = 0  # the first page: no row comes before the first in `order` (a unique key)
    else:
        first = {name: getattr(rows[0], name) for name in names}
        earlier = query.filter(beyond(order, first, forward=False)).count()
    return CursorPage(
        rows,
        count,
        earlier + 1,
        has_next=has_next and earlier + len(rows) < count,
        has_previous=earlier > 0,
        next_after=str(rows[-1].pk),
        previous_before=str(rows[0].pk),
    )

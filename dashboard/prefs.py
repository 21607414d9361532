"""Each person's display preferences (compact queue rows, the overview's first-visit hint): one
read per request, cached on it, and one small write per toggle."""

from __future__ import annotations

from dashboard.models import Preferences

FIELDS = ("compact_rows", "overview_hint_dismissed")


def of(request) -> Preferences:
    """The signed-in person's preferences, or unsaved defaults when they never changed one."""
    cached = getattr(request, "_dashboard_prefs", None)
    if cached is None:
        cached = Preferences.objects.filter(user_id=request.user.pk).first()
        cached = cached or Preferences(user_id=request.user.pk)
        request._dashboard_prefs = cached
    return cached


def remember(request, **values: bool) -> Preferences:
    """Store these preferences for the signed-in person (a row is made on their first change)."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown preference: {', '.join(sorted(unknown))}")
    prefs, _ = Preferences.objects.update_or_create(user_id=request.user.pk, defaults=values)
    request._dashboard_prefs = prefs
    return prefs

"""Roles: viewer (read), reviewer (decide, edit memories), admin (also flags and users).

Roles are Django groups. The admin group also holds Django's user permissions, so its members
manage people and their roles in /admin/ (dashboard.admin_site lets them in without is_staff)."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

VIEWER, REVIEWER, ADMIN = "viewer", "reviewer", "admin"
ROLE_ORDER = {VIEWER: 0, REVIEWER: 1, ADMIN: 2}
# Add, edit (incl. role groups and passwords), deactivate and delete users; see the groups.
ADMIN_PERMISSIONS = ("add_user", "change_user", "delete_user", "view_user", "view_group")


def ensure_role_groups() -> None:
    """Create the role groups and give the admin group its user permissions (idempotent)."""
    for name in ROLE_ORDER:
        group, _ = Group.objects.get_or_create(name=name)
        if name == ADMIN:
            group.permissions.add(
                *Permission.objects.filter(
                    content_type__app_label="auth", codename__in=ADMIN_PERMISSIONS
                )
            )


def role_of(user) -> str | None:
    """The strongest role of a user; superusers are admins, users without a group are viewers."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    # One group query per request: the decorator and the context processor both ask.
    cached = getattr(user, "_curation_role", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        cached = next((role for role in (ADMIN, REVIEWER) if role in names), VIEWER)
        user._curation_role = cached
    return cached


def has_role(user, role: str) -> bool:
    current = role_of(user)
    return current is not None and ROLE_ORDER[current] >= ROLE_ORDER[role]

"""The role groups' setup (memory.roles says what each role may do).

Roles are Django groups. The admin group also holds Django's user permissions, so its members
manage people and their roles in /admin/ (dashboard.admin_site lets them in without is_staff)."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

from memory.roles import ADMIN, ROLE_ORDER

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

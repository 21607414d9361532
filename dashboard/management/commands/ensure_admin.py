"""ensure_admin: when no user exists, create 'admin' (or 'admin-2', ... when a live API token
without an owner is named so) with a random password printed once."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.management.commands.serve import bind_address, public_url
from dashboard.roles import ensure_role_groups
from memory.reviewer_names import check_user_name


class Command(BaseCommand):
    help = (
        "Create the first admin user (random password, printed once) when the database has no user."
    )

    def handle(self, *args, **options):
        ensure_role_groups()
        User = get_user_model()
        if User.objects.exists():
            return
        username = _first_free_name()
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username, "admin@localhost", password)
        line = "=" * 64
        self.stdout.write(
            f"{line}\nCreated the first user. Log in at {public_url(bind_address())} with\n"
            f"  username: {username}\n  password: {password}\n"
            f"This password is shown only once.\n{line}"
        )


def _first_free_name() -> str:
    """admin, else admin-2, admin-3, ...: the first name no live token without an owner acts under
    (`make run` must start, so a taken name is stepped over, not refused)."""
    for number in range(1, 1000):
        username = "admin" if number == 1 else f"admin-{number}"
        try:
            check_user_name(username)
        except ValueError:
            continue
        return username
    raise CommandError("every name from admin to admin-999 is an API token's name")

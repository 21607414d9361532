"""ensure_admin: when no user exists, create 'admin' with a random password printed once."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from dashboard.management.commands.serve import bind_address, public_url
from dashboard.roles import ensure_role_groups


class Command(BaseCommand):
    help = (
        "Create the first admin user (random password, printed once) when the database has no user."
    )

    def handle(self, *args, **options):
        ensure_role_groups()
        User = get_user_model()
        if User.objects.exists():
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        line = "=" * 64
        self.stdout.write(
            f"{line}\nCreated the first user. Log in at {public_url(bind_address())} with\n"
            f"  username: admin\n  password: {password}\n"
            f"This password is shown only once.\n{line}"
        )

"""Who a management command acts as when not told (--by): the operating system's user."""

from __future__ import annotations

import getpass


def command_user(command: str) -> str:
    """'alice (manage.py purge)'; without a name the system can give (a container's uid with no
    passwd entry and no USER), just the command."""
    try:
        return f"{getpass.getuser()} (manage.py {command})"
    except (KeyError, OSError):
        return f"manage.py {command}"

"""One name, one reviewer: a dashboard user and a live API token without an owner never share a
name (any case). Approvals, claims, the two-person rule and the agreement figures know a
reviewer by name, so a token named as a person would be that person. Both checks raise
ValueError with a sentence for the person choosing the name."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from memory.models import ApiToken


def check_token_name(name: str) -> None:
    """Refuse a new token's name that a dashboard user has (api.auth.create_token)."""
    if get_user_model().objects.filter(username__iexact=name).exists():
        raise ValueError(
            f"a dashboard user is named {name!r}: a token of that name would act as them in "
            f"reviews; choose another name, such as {name}-bot"
        )


def check_user_name(username: str) -> None:
    """Refuse a new or renamed user's name under which a live token without an owner acts (the
    admin's user forms, createsuperuser, ensure_admin). A token with an owner acts as its owner,
    so its name names no reviewer."""
    if username and _live_unowned_token_named(username):
        raise ValueError(
            f"An API token is named {username!r}: a user of that name would count as the token "
            "in reviews. Choose another name, or revoke the token first."
        )


def _live_unowned_token_named(username: str) -> bool:
    return ApiToken.objects.filter(name__iexact=username, owner="", revoked=False).exists()

"""One name, one reviewer: a dashboard user and a live API token without an owner never share a
name (any case), a live token's holder is an active user of that very name, and a user who
holds live tokens keeps it. Approvals, claims, the two-person rule and the agreement figures
know a reviewer by name, so a token named as a person would be that person. The checks raise
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
    admin's user forms, createsuperuser, ensure_admin), or which live tokens name as their
    holder: the person who held them was renamed or deleted, and a new user of the name would
    take over their reviews (a QA pass). A token with an owner acts as its owner, so its own
    name names no reviewer."""
    if username and _live_unowned_token_named(username):
        raise ValueError(
            f"An API token is named {username!r}: a user of that name would count as the token "
            "in reviews. Choose another name, or revoke the token first."
        )
    held = _live_tokens_held_by(username) if username else []
    if held:
        raise ValueError(
            f"Live API tokens are held by {username!r} ({', '.join(held)}): a new user of that "
            "name would be their holder and review as them. Choose another name, or revoke "
            "those tokens first."
        )


def check_rename(old_username: str) -> None:
    """Refuse renaming a user who holds live tokens: their reviews through a token and in the
    dashboard would count as two people's, and the two-person rule as two reviewers (a QA pass
    gave both approvals so)."""
    held = _live_tokens_held_by(old_username)
    if held:
        raise ValueError(
            f"{old_username!r} holds live API tokens ({', '.join(held)}): renamed, they would "
            "review as someone else. Revoke them first (and create new ones), or keep the name."
        )


def holder_is_active(token: ApiToken) -> bool:
    """Whether a token with an owner is still held by an active dashboard user (one without an
    owner acts in its own name): a deactivated or deleted holder's tokens stop working."""
    if not token.owner:
        return True
    return get_user_model().objects.filter(username=token.owner, is_active=True).exists()


def _live_unowned_token_named(username: str) -> bool:
    return ApiToken.objects.filter(name__iexact=username, owner="", revoked=False).exists()


def _live_tokens_held_by(username: str) -> list[str]:
    return sorted(
        ApiToken.objects.filter(owner__iexact=username, revoked=False).values_list(
            "name", flat=True
        )
    )


def token_asserts(token: ApiToken) -> bool:
    """Whether a token's reviews write a person's words: a token a person holds does; one no
    person holds only with the `assert` scope (or `admin`, which has every scope)."""
    return bool(token.owner) or bool({"assert", "admin"} & set(token.scopes or []))


def name_asserts(name: str) -> bool:
    """token_asserts for a reviewer known by name (an approval's): a dashboard user does, a
    token no person holds, reviewing under its own name, as its scopes say."""
    return all(token_asserts(t) for t in ApiToken.objects.filter(name=name, owner=""))

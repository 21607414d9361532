"""API tokens: generated once, stored as SHA-256, checked per request with scopes and expiry;
each use is recorded in last_used_at, at most once a minute per token."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from memory.models import ApiToken
from memory.reviewer_names import check_token_name, holder_is_active
from memory.roles import ADMIN, REVIEWER, ROLE_ORDER, role_of_user_named

# `assert`: a remember may say a person asserted it (assertedBy "person"), for an agent that
# relays its user's explicit instruction.
SCOPES = ("ingest", "review", "assert", "admin")
TOKEN_PREFIX = "mcd_"
PREFIX_CHARS = len(TOKEN_PREFIX) + 6  # the start of a token that is stored and shown
# last_used_at is written at most this often per token: one small UPDATE, not one per request.
LAST_USED_EVERY = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(
    name: str,
    *,
    agent_id: str = "default",
    scopes: list[str] | None = None,
    multi_agent: bool = False,
    expires_at: datetime | None = None,
    owner: str | None = None,
) -> tuple[ApiToken, str]:
    """Create a token row and return it with the plain token, which is never stored.

    The token acts for `agent_id` only, unless `multi_agent` (an admin's choice) lets it name
    other agents too. From `expires_at` on (None: never) it is refused. `scopes` None gives
    `ingest`; an empty list, none: the token only reads. `owner` names the dashboard user who
    holds it: its reviews are then theirs (ApiToken.reviewer_name)."""
    name = (name or "").strip()
    if not name:  # it is the "who" of every change the token makes, and how it is revoked
        raise ValueError("a token needs a name: it is who every change it makes is audited as")
    check_token_name(name)
    owner = _owner_username(owner)
    scopes = ["ingest"] if scopes is None else list(scopes)
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s): {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError(f"the expiry {when(expires_at)} is in the past; choose a later one")
    if owner:
        _holder_may(owner, scopes)
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        name=name,
        token_hash=hash_token(plain),
        prefix=plain[:PREFIX_CHARS],
        agent_id=agent_id,
        multi_agent=multi_agent,
        scopes=scopes,
        created_at=timezone.now(),
        expires_at=expires_at,
        owner=owner,
    )
    return row, plain


def _holder_may(owner: str, scopes: list[str]) -> None:
    """Refuse a scope its holder's dashboard role does not allow (HOLDER_ROLE)."""
    for scope in scopes:
        if (short := _role_short_of(owner, scope)) is not None:
            role, needed = short
            raise ValueError(
                f"{owner!r} is a {role} in the dashboard: a token they hold may not have the "
                f"'{scope}' scope (it needs a {needed}); give them that role first"
            )


def _role_short_of(owner: str, scope: str | None) -> tuple[str | None, str] | None:
    """(the holder's role, the role the scope needs) when the holder's is short of it."""
    needed = HOLDER_ROLE.get(scope)
    if needed is None:
        return None
    role = role_of_user_named(owner)
    if role is not None and ROLE_ORDER[role] >= ROLE_ORDER[needed]:
        return None
    return role, needed


def _owner_username(owner: str | None) -> str:
    """The dashboard user's username as stored (any case given), or "" for no owner."""
    owner = (owner or "").strip()
    if not owner:
        return ""
    found = get_user_model().objects.filter(username__iexact=owner, is_active=True)
    names = sorted(found.values_list("username", flat=True))
    if owner in names:
        return owner
    if len(names) == 1:
        return names[0]
    if names:  # rita and Rita: the owner is one person, named exactly
        raise ValueError(
            f"{owner!r} names {len(names)} users ({', '.join(names)}): give one exactly"
        )
    raise ValueError(
        f"no active dashboard user is named {owner!r}: the owner is the person who holds the token"
    )


def when(moment: datetime) -> str:
    """An instant as the commands and refusals print it: `2027-01-31 00:00 UTC`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _unrevoked(header: str | None) -> ApiToken | None:
    """The unrevoked token an `Authorization: Bearer <token>` header names, expired or not."""
    scheme, _, plain = (header or "").partition(" ")
    if scheme.lower() != "bearer":  # HTTP's auth schemes are case-insensitive (RFC 9110)
        return None
    plain = plain.strip()
    if not plain:
        return None
    return ApiToken.objects.filter(token_hash=hash_token(plain), revoked=False).first()


def authenticate(header: str | None) -> ApiToken | None:
    """The live (unrevoked, unexpired) token named by an `Authorization: Bearer <token>` header,
    or None; a use is recorded in its last_used_at."""
    token = _unrevoked(header)
    now = timezone.now()
    if token is None or token.expired(now) or not holder_is_active(token):
        return None
    _record_use(token, now)
    return token


def refusal(header: str | None, message: str) -> tuple[str, str]:
    """(error code, message) of the 401 for a header authenticate refused: `token_expired` saying
    when, for an expired token; `token_holder_inactive` for a token whose holder is no longer an
    active dashboard user; else `unauthorized` with the caller's message."""
    token = _unrevoked(header)
    if token is not None and not token.expired() and not holder_is_active(token):
        return "token_holder_inactive", (
            f"this API token ('{token.name}') is held by {token.owner!r}, who is no longer an "
            "active dashboard user: an admin creates a new token for whoever holds it now"
        )
    if token is None or not token.expired():
        return "unauthorized", message
    return "token_expired", (
        f"this API token ('{token.name}') expired at {when(token.expires_at)}: "
        "create a new one with manage.py create_api_token"
    )


def _record_use(token: ApiToken, now: datetime) -> None:
    """Set last_used_at unless it was set within LAST_USED_EVERY: one UPDATE in its own autocommit
    (the condition in SQL, so concurrent requests write it once), never inside a caller's
    transaction, whose lock it would hold and whose rollback would undo it."""
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_EVERY:
        return
    if connection.in_atomic_block:
        return
    ApiToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_EVERY), pk=token.pk
    ).update(last_used_at=now)
    token.last_used_at = now


def revoke(name_or_prefix: str) -> ApiToken:
    """Revoke the one unrevoked token with this name, prefix (`mcd_` and what follows, as the admin
    lists it) or plain value; LookupError when none or several match."""
    live = ApiToken.objects.filter(revoked=False)
    matches = list(live.filter(name=name_or_prefix))
    # As the admin and the commands show it: the prefix and an ellipsis.
    wanted = name_or_prefix.strip().removesuffix("…").removesuffix("...")
    if not matches and wanted.startswith(TOKEN_PREFIX):
        # Only the prefix is stored, so a longer start of a token (a QA pass pasted 12 of its
        # characters) matches the tokens whose prefix it begins with.
        matches = list(live.filter(token_hash=hash_token(wanted))) or [
            token
            for token in live.filter(prefix__startswith=wanted[:PREFIX_CHARS])
            if token.prefix.startswith(wanted) or wanted.startswith(token.prefix)
        ]
    if not matches:
        raise LookupError(
            f"no unrevoked token is named {name_or_prefix!r}, nor has a prefix (mcd_ and the 6 "
            "characters the admin's token list shows) that matches its start"
        )
    if len(matches) > 1:
        listed = "; ".join(f"{t.prefix}… '{t.name}' (agent {t.agent_id})" for t in matches)
        raise LookupError(
            f"{len(matches)} unrevoked tokens match {name_or_prefix!r}: {listed}. "
            "Revoke one by its prefix"
        )
    token = matches[0]
    ApiToken.objects.filter(pk=token.pk).update(revoked=True)
    token.revoked = True
    return token


# The dashboard role a token's holder needs for its token to use a scope: a token held by a
# person acts within that person's role (a QA pass: a viewer's review token decided proposals,
# and gave the second approval of the two-person rule; a demoted reviewer's kept rejecting).
# `assert` writes a person's words, which only a reviewer writes in the dashboard (an edit): a
# viewer's token wrote memories full mode never changes.
HOLDER_ROLE = {"review": REVIEWER, "assert": REVIEWER, "admin": ADMIN}


def scope_refusal(token: ApiToken, scope: str | None) -> str | None:
    """Why the token may not act in `scope` (the 403's message), or None when it may."""
    if not has_scope(token, scope):
        return f"this token lacks the '{scope}' scope"
    short = _role_short_of(token.owner, scope) if token.owner else None
    if short is None:
        return None
    role, needed = short
    return (
        f"this token is held by {token.owner!r}, who is a {role or 'former user'} in the "
        f"dashboard: its '{scope}' scope acts only while its holder is a {needed} there"
    )


def has_scope(token: ApiToken, scope: str | None) -> bool:
    """admin implies every scope; None means any valid token may read."""
    return scope is None or scope in token.scopes or "admin" in token.scopes


def only_agent(token: ApiToken) -> str | None:
    """The one agent whose rows a token may see (lists filter on it); None for a multi-agent token,
    which sees every agent."""
    return None if token.multi_agent else token.agent_id


def may_act_for(token: ApiToken, agent_id: str) -> bool:
    """A token reads and writes its own agent's memories; only a multi-agent token any other's."""
    return only_agent(token) in {None, agent_id}

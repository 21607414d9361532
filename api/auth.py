"""API tokens: generated once, stored as SHA-256, checked per request with scopes."""

from __future__ import annotations

import hashlib
import secrets

from django.utils import timezone

from memory.models import ApiToken

SCOPES = ("ingest", "review", "admin")
TOKEN_PREFIX = "mcd_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(
    name: str,
    *,
    agent_id: str = "default",
    scopes: list[str] | None = None,
    multi_agent: bool = False,
) -> tuple[ApiToken, str]:
    """Create a token row and return it with the plain token, which is never stored.

    The token acts for `agent_id` only, unless `multi_agent` (an admin's choice) lets it name
    other agents too."""
    scopes = list(scopes or ["ingest"])
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s): {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        name=name,
        token_hash=hash_token(plain),
        prefix=plain[: len(TOKEN_PREFIX) + 6],
        agent_id=agent_id,
        multi_agent=multi_agent,
        scopes=scopes,
        created_at=timezone.now(),
    )
    return row, plain


def authenticate(header: str | None) -> ApiToken | None:
    """The live token named by an `Authorization: Bearer <token>` header, or None."""
    if not header or not header.startswith("Bearer "):
        return None
    plain = header[len("Bearer ") :].strip()
    if not plain:
        return None
    return ApiToken.objects.filter(token_hash=hash_token(plain), revoked=False).first()


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

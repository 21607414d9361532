"""The only module that speaks HTTP (to model servers, and the digest's webhook): one pooled
client, JSON POSTs and the reachability probe; every failure becomes ProviderError."""

from __future__ import annotations

import os
import time

import httpx
from django.conf import settings

from memory.guard import ensure_outside_transaction


class ProviderError(RuntimeError):
    """A model server failed: refused, timed out, answered 4xx/5xx, or returned an unusable body."""


_shared: dict[int, httpx.Client] = {}


def _client() -> httpx.Client:
    """One pooled client per process (created after any fork): no TLS setup per model call."""
    client = _shared.get(os.getpid())
    if client is None:
        client = _shared[os.getpid()] = httpx.Client()
    return client


def post_json(url: str, payload: dict, *, timeout: float, headers: dict | None = None) -> dict:
    """POST JSON and return the decoded object, turning every failure into ProviderError."""
    ensure_outside_transaction(f"POST {url}")
    try:
        response = _client().post(url, json=payload, timeout=timeout, headers=headers)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{url} timed out after {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"{url} unreachable: {exc}") from exc
    if response.status_code >= 400:
        raise ProviderError(f"{url} answered {response.status_code}: {response.text[:300]}")
    if not response.content.strip():
        raise ProviderError(f"{url} answered with an empty body")
    try:
        body = response.json()
    except ValueError as exc:
        raise ProviderError(f"{url} answered with invalid JSON: {response.text[:200]}") from exc
    if not isinstance(body, dict):
        raise ProviderError(f"{url} answered with JSON that is not an object")
    return body


def post_notice(url: str, payload: dict, *, timeout: float) -> int:
    """POST JSON to a notification hook (the staleness digest's webhook) and return the status;
    ProviderError when it times out, is unreachable or answers 4xx/5xx. The body is not read."""
    ensure_outside_transaction(f"POST {url}")
    try:
        response = _client().post(url, json=payload, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{url} timed out after {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"{url} unreachable: {exc}") from exc
    if response.status_code >= 400:
        raise ProviderError(f"{url} answered {response.status_code}: {response.text[:300]}")
    return response.status_code


_probe_cache: dict[str, tuple[float, bool]] = {}


def reachable(url: str, *, max_age: float = 30.0) -> bool:
    """Whether GET url succeeds; remembered for max_age seconds per URL so a page or a job
    that asks often costs one probe."""
    cached = _probe_cache.get(url)
    if cached and time.monotonic() - cached[0] < max_age:
        return cached[1]
    try:
        ok = _client().get(url, timeout=settings.MEMORY_PROBE_TIMEOUT_SECONDS).is_success
    except httpx.HTTPError:
        ok = False
    _probe_cache[url] = (time.monotonic(), ok)
    return ok

"""Sign-in throttling: failed attempts lock a username, and slow down a client address.

After a few free failures every further one locks that username for twice as long as the last,
1 s, 2 s, 4 s ... up to 15 minutes; a locked key is refused before its password is even checked,
so a burst of guesses gets almost none through. An address is only slowed down (a few seconds at
most): many people share one (an office NAT, a proxy), and a stranger's guesses must never lock
out a colleague typing the right password. Failures are forgotten 15 minutes after the last one,
and a successful sign-in clears its username. Rows live in the database, so every web worker sees
the same counts. The client address is REMOTE_ADDR, or, when that is one of the configured
proxies (DJANGO_TRUSTED_PROXIES), the nearest untrusted address in X-Forwarded-For.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError
from django.db.models import F
from django.utils import timezone

from dashboard.models import LoginThrottle

# Many people can share an address (an office NAT), so an address gets more free failures.
FREE_FAILURES = {"user": 5, "addr": 20}
FORGET_AFTER = timedelta(minutes=15)
LONGEST_LOCK = {"user": timedelta(minutes=15), "addr": timedelta(seconds=4)}
LOCKED_MESSAGE = "Too many failed sign-in attempts. Try again in {seconds} seconds."


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _proxy_networks())


def _proxy_networks() -> list:
    networks = []
    for entry in getattr(settings, "TRUSTED_PROXIES", []):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    return networks


def client_address(request) -> str | None:
    """The address a request came from: REMOTE_ADDR, unless that is a trusted proxy, then the
    nearest address in X-Forwarded-For that is not one (a client can prepend anything to the
    header, so it is read from the right, and only as far as trusted proxies wrote it)."""
    remote = request.META.get("REMOTE_ADDR") if request is not None else None
    if not remote or not _trusted(remote):
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    for hop in reversed([part.strip() for part in forwarded.split(",") if part.strip()]):
        if not _trusted(hop):
            return hop
    return remote


def keys_for(request, username: str | None) -> list[str]:
    keys = [f"user:{(username or '').strip().lower()[:250]}"]
    address = client_address(request)
    if address:
        keys.append(f"addr:{address}")
    return keys


def seconds_locked(keys: list[str]) -> int:
    """How long the longest lock on any of the keys still lasts (0: not locked)."""
    now = timezone.now()
    until = (
        LoginThrottle.objects.filter(key__in=keys, locked_until__gt=now)
        .order_by("-locked_until")
        .values_list("locked_until", flat=True)
        .first()
    )
    return math.ceil((until - now).total_seconds()) if until else 0


def _lock_for(key: str, failures: int) -> timedelta | None:
    kind = key.split(":", 1)[0]
    over = failures - FREE_FAILURES[kind]
    if over <= 0:
        return None
    return min(timedelta(seconds=2 ** min(over - 1, 20)), LONGEST_LOCK[kind])


def record_failure(keys: list[str]) -> None:
    """Count one failure on each key (single-statement updates: safe across workers)."""
    now = timezone.now()
    # Rows quiet for a day carry nothing worth keeping: one cheap delete keeps the table small.
    LoginThrottle.objects.filter(last_failed_at__lt=now - timedelta(days=1)).delete()
    for key in keys:
        rows = LoginThrottle.objects.filter(key=key)
        rows.filter(last_failed_at__lt=now - FORGET_AFTER).update(failures=0, locked_until=None)
        if not rows.update(failures=F("failures") + 1, last_failed_at=now):
            try:
                LoginThrottle.objects.create(key=key, failures=1, last_failed_at=now)
            except IntegrityError:  # another worker created it first
                rows.update(failures=F("failures") + 1, last_failed_at=now)
        failures = rows.values_list("failures", flat=True).first() or 0
        lock = _lock_for(key, failures)
        if lock is not None:
            rows.update(locked_until=now + lock)


def clear(key: str) -> None:
    LoginThrottle.objects.filter(key=key).delete()


class ThrottledModelBackend(ModelBackend):
    """Django's model backend, refusing locked usernames and addresses before checking a password
    (every login form, the admin's included, goes through it)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        keys = keys_for(request, username)
        if seconds_locked(keys):
            raise PermissionDenied("sign-in locked after too many failures")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            record_failure(keys)
        else:
            clear(keys[0])
        return user


class ThrottleMessageMixin:
    """For an AuthenticationForm: say that the sign-in is locked, and for how long, instead of
    "wrong password" (the backend refuses it either way)."""

    def clean(self):
        seconds = seconds_locked(keys_for(self.request, self.data.get("username")))
        if seconds:
            raise ValidationError(LOCKED_MESSAGE.format(seconds=seconds), code="locked")
        return super().clean()


class ThrottledAuthenticationForm(ThrottleMessageMixin, AuthenticationForm):
    pass

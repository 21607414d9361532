"""The staleness digest: the proposals pending longer than review.staleHours, per saved queue,
sent by email (Django's email framework) and, when MEMORY_WEBHOOK_URL is set, POSTed as JSON.

Claim -> send -> record: the run is claimed in a short write, the email and the webhook go out
with no transaction open (timeouts and retries), then one write records how they went. A
failure is logged and kept on the run, which the Jobs page shows. The digest names proposals
by id, action and age only: their text may hold the personal data or secrets a queue collects.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db.models import Q
from django.utils import timezone

from memory.guard import ensure_outside_transaction
from memory.moments import iso
from pipeline import queues
from pipeline.llm.transport import ProviderError, post_notice
from pipeline.models import DigestRun, Proposal, ProposalStatus
from pipeline.writes import digest as digest_writes

log = logging.getLogger(__name__)

DAILY = timedelta(days=1)
LISTED = 20  # the oldest stale proposals named in the digest


def _hours(now: datetime, then: datetime | None) -> float | None:
    return round((now - then).total_seconds() / 3600, 1) if then else None


def report(now: datetime, stale_hours: int) -> tuple[dict, list[int]]:
    """The digest's JSON and the ids of the queues it lists with stale proposals."""
    before = now - timedelta(hours=stale_hours)
    stale = Proposal.objects.filter(status=ProposalStatus.PENDING, created_at__lt=before)
    oldest = list(
        stale.order_by("created_at", "id").values("id", "action", "agent_id", "created_at")[
            : LISTED + 1
        ]
    )
    total = stale.count() if len(oldest) > LISTED else len(oldest)
    per_queue = queues.counts(queues.saved_queues(), where=Q(created_at__lt=before))
    listed = [c for c in per_queue if c.pending]
    payload = {
        "kind": "staleness_digest",
        "generatedAt": iso(now),
        "staleHours": stale_hours,
        "stale": total,
        "queues": [
            {
                "name": c.queue.name,
                "slug": c.queue.slug,
                "stale": c.pending,
                "oldestCreatedAt": iso(c.oldest),
                "oldestAgeHours": _hours(now, c.oldest),
            }
            for c in listed
        ],
        "oldest": [
            {
                "id": row["id"],
                "action": row["action"],
                "agentId": row["agent_id"],
                "createdAt": iso(row["created_at"]),
                "ageHours": _hours(now, row["created_at"]),
            }
            for row in oldest[:LISTED]
        ],
    }
    return payload, [c.queue.pk for c in listed]


def recipients(queue_ids: list[int]) -> list[str]:
    """MEMORY_DIGEST_TO and the active reviewers assigned to the queues listed, each once."""
    assigned = (
        get_user_model()
        .objects.filter(review_queues__in=queue_ids, is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
    )
    return sorted({*settings.MEMORY_DIGEST_TO, *(assigned if queue_ids else [])})


def _text(payload: dict) -> tuple[str, str]:
    """The email's subject and plain-text body."""
    hours, total = payload["staleHours"], payload["stale"]
    subject = f"{total} proposal{'s' if total != 1 else ''} waiting longer than {hours} h"
    lines = [f"{subject}, as of {payload['generatedAt']}.", ""]
    for queue in payload["queues"]:
        lines.append(
            f"- {queue['name']}: {queue['stale']} waiting, the oldest for "
            f"{queue['oldestAgeHours']} h"
        )
    if not payload["queues"]:
        lines.append("None of them is in a saved queue.")
    lines += ["", "Oldest first:"]
    lines += [f"- {p['action'].upper()} {p['id']} ({p['ageHours']} h)" for p in payload["oldest"]]
    return f"[memory curation] {subject}", "\n".join(lines) + "\n"


def _email(payload: dict, queue_ids: list[int]) -> tuple[str, str]:
    """(status, error) of sending the digest by email."""
    to = recipients(queue_ids)
    if not to:
        return "skipped", "no recipient: set MEMORY_DIGEST_TO or assign reviewers with an email"
    subject, body = _text(payload)
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, to)
    except Exception as exc:  # any backend's failure (SMTP refused, DNS, TLS) is recorded
        log.warning("staleness digest email failed: %s", exc)
        return "failed", f"{type(exc).__name__}: {exc}"
    return "sent", ""


def _webhook(payload: dict) -> tuple[str, str, int]:
    """(status, error, attempts) of POSTing the digest to MEMORY_WEBHOOK_URL, with retries."""
    url = settings.MEMORY_WEBHOOK_URL
    if not url:
        return "skipped", "", 0
    error = ""
    for attempt in range(1, settings.MEMORY_WEBHOOK_ATTEMPTS + 1):
        try:
            post_notice(url, payload, timeout=settings.MEMORY_WEBHOOK_TIMEOUT_SECONDS)
            return "sent", "", attempt
        except ProviderError as exc:
            error = str(exc)
            log.warning("staleness digest webhook attempt %d failed: %s", attempt, error)
        if attempt < settings.MEMORY_WEBHOOK_ATTEMPTS:
            time.sleep(settings.MEMORY_WEBHOOK_BACKOFF_SECONDS * attempt)
    return "failed", error, settings.MEMORY_WEBHOOK_ATTEMPTS


def run(*, now: datetime | None = None, force: bool = False) -> DigestRun | None:
    """Send the digest if one is due (daily), or now with `force`; None when not due.

    1. claim the run (a short write); 2. find the stale proposals and send, no transaction open;
    3. record how the email and the webhook went."""
    ensure_outside_transaction("the staleness digest")
    now = now or timezone.now()
    claimed = digest_writes.claim(now, every=None if force else DAILY)
    if claimed is None:
        return None
    payload, queue_ids = report(now, claimed.stale_hours)
    outcome = {"stale": payload["stale"], "payload": payload}
    if not payload["stale"]:
        nothing = {"email_status": "skipped", "webhook_status": "skipped"}
        return digest_writes.record(claimed, timezone.now(), **outcome, **nothing)
    email_status, email_error = _email(payload, queue_ids)
    webhook_status, webhook_error, attempts = _webhook(payload)
    return digest_writes.record(
        claimed,
        timezone.now(),
        **outcome,
        email_status=email_status,
        email_error=email_error,
        webhook_status=webhook_status,
        webhook_error=webhook_error,
        webhook_attempts=attempts,
    )

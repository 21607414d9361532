"""The staleness digest (issue 26, item 4): proposals pending longer than review.staleHours, per
saved queue, once a day by email (Django's email framework) and, with MEMORY_WEBHOOK_URL, POSTed
as JSON to a loopback server: retried, bounded by a timeout, never inside a transaction, and a
failure recorded and shown on the Jobs page."""

import re
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from memory.guard import ModelCallInTransaction
from pipeline import digest, review, tasks
from pipeline.config import get_config
from pipeline.models import DigestRun, Proposal, SavedQueue
from tests.fake_ollama import FakeOllama, Script
from tests.pipeline_support import RAW_TEXT, UPDATE_FACT, four_decisions, raw, seed_store

pytestmark = pytest.mark.django_db
HOOK = "/hook"


@pytest.fixture
def proposals(fake_ollama, db, settings):
    """Shadow mode: ADD, UPDATE and DELETE pending; the UPDATE and the DELETE for two days."""
    settings.MEMORY_DIGEST_TO = ["team@example.com"]
    settings.MEMORY_WEBHOOK_URL = ""
    four_decisions(fake_ollama, seed_store())
    result = raw(RAW_TEXT)
    tasks.process_pending()
    pending = {p.action: p for p in Proposal.objects.filter(job=result.job, status="pending")}
    Proposal.objects.filter(id__in=[pending["update"].id, pending["delete"].id]).update(
        created_at=timezone.now() - timedelta(hours=48)
    )
    return pending


@pytest.fixture
def hook(settings):
    server = FakeOllama(8).start()
    settings.MEMORY_WEBHOOK_URL = server.url + HOOK
    settings.MEMORY_WEBHOOK_TIMEOUT_SECONDS = 0.5
    settings.MEMORY_WEBHOOK_ATTEMPTS = 3
    settings.MEMORY_WEBHOOK_BACKOFF_SECONDS = 0.01
    yield server
    server.stop()


def test_the_digest_lists_stale_proposals_per_queue_by_email(proposals):
    run = digest.run()
    assert run.stale == 2 and run.email_status == "sent" and run.webhook_status == "skipped"
    [email] = mail.outbox
    assert email.to == ["team@example.com"]
    assert "2 proposals waiting longer than 24 h" in email.subject
    assert "Destructive: 2 waiting" in email.body
    assert proposals["delete"].id in email.body and proposals["add"].id not in email.body
    # Ids and ages only: a proposal's text may hold the personal data a queue collects.
    assert UPDATE_FACT not in email.body
    assert run.payload["queues"][0]["slug"] == "destructive"


def test_the_digest_goes_to_the_reviewers_assigned_to_a_stale_queue(proposals, role_users):
    rita = role_users["reviewer"]
    rita.email = "rita@example.com"
    rita.save()
    SavedQueue.objects.get(slug="destructive").reviewers.add(rita)
    vera = role_users["viewer"]
    vera.email = "vera@example.com"
    vera.save()
    SavedQueue.objects.get(slug="contradictions").reviewers.add(vera)  # nothing stale there
    digest.run()
    assert mail.outbox[0].to == ["rita@example.com", "team@example.com"]


def test_review_stale_hours_sets_what_counts_as_stale(proposals, admin_client_role):
    assert "review.staleHours" in admin_client_role.get("/settings/").content.decode()
    review.update_config({"review.staleHours": 72}, changed_by="ada", reason="a slower team")
    assert get_config().stale_hours == 72
    run = digest.run()
    assert run.stale == 0 and run.email_status == "skipped" and not mail.outbox


def test_the_digest_is_sent_once_a_day_and_the_command_sends_one_now(proposals):
    assert digest.run() is not None
    assert digest.run() is None
    assert digest.run(now=timezone.now() + timedelta(hours=25)) is not None
    out = StringIO()
    call_command("digest", stdout=out)
    assert "2 proposal(s) pending longer than 24 h" in out.getvalue()
    assert len(mail.outbox) == 3


def test_the_schedules_tick_sends_the_digest(proposals):
    report = tasks.tick()
    assert report["digest"] == {"stale": 2, "failed": False}
    assert "digest" not in tasks.tick()


def test_the_console_backend_prints_the_digest_by_default(proposals, settings, capsys):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    digest.run()
    assert "2 proposals waiting longer than 24 h" in capsys.readouterr().out


def test_the_webhook_gets_the_digest_as_json(proposals, hook):
    hook.script(HOOK, Script({"ok": True}))
    run = digest.run()
    assert (run.webhook_status, run.webhook_attempts) == ("sent", 1)
    [payload] = hook.calls(HOOK)
    assert payload["kind"] == "staleness_digest" and payload["stale"] == 2
    assert {p["id"] for p in payload["oldest"]} == {proposals["update"].id, proposals["delete"].id}


def test_the_webhook_is_retried_after_a_server_error(proposals, hook):
    hook.script(HOOK, Script({"error": "busy"}, 503), Script({"ok": True}))
    run = digest.run()
    assert (run.webhook_status, run.webhook_attempts) == ("sent", 2)
    assert len(hook.calls(HOOK)) == 2


def test_a_failed_webhook_is_recorded_and_shown_without_its_secrets(
    proposals, hook, settings, viewer_client
):
    """Found by a QA pass: a viewer read the hook's user, password, secret path and token on the
    Jobs page (the error quoted the whole URL)."""
    secret = hook.url.replace("http://", "http://hookuser:hookpass@") + "/T0/SECRETPATH"
    settings.MEMORY_WEBHOOK_URL = secret + "?token=QSECRET456"
    run = digest.run()
    assert run.webhook_status == "failed"
    page = viewer_client.get("/jobs/").content.decode()
    for said in (run.webhook_error, page):
        words = set(re.split(r"[^A-Za-z0-9]+", said))
        assert not {"hookuser", "hookpass", "SECRETPATH", "QSECRET456"} & words, said
    assert hook.url.removeprefix("http://") in run.webhook_error  # the host, to know which


@pytest.mark.slow
def test_a_hanging_webhook_ends_the_digest_with_the_failure_recorded_and_shown(
    proposals, hook, viewer_client
):
    hook.script(HOOK, *[Script({"ok": True}, delay=3) for _ in range(3)])
    started = time.monotonic()
    run = digest.run()
    assert time.monotonic() - started < 2.9  # three timeouts of 0.5 s, not the server's 3 s
    assert (run.webhook_status, run.webhook_attempts) == ("failed", 3)
    assert "timed out" in run.webhook_error and run.finished_at is not None
    assert run.email_status == "sent"  # the email went out regardless
    page = viewer_client.get("/jobs/").content.decode()
    assert 'data-testid="webhook-error"' in page and "timed out" in page


def test_a_failing_email_backend_is_recorded_and_the_webhook_still_goes(proposals, hook, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 1
    hook.script(HOOK, Script({"ok": True}))
    run = digest.run()
    assert run.email_status == "failed" and run.email_error
    assert run.webhook_status == "sent" and run.failed
    assert DigestRun.objects.get(id=run.id).email_status == "failed"


def test_the_digest_never_runs_inside_a_transaction(proposals):
    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        digest.run()
    assert not DigestRun.objects.exists() and not mail.outbox


def test_a_webhook_url_no_request_can_be_made_of_is_a_failure_recorded_without_its_password(
    proposals, settings
):
    """Found by a QA pass: an unencoded "#" in the hook's password crashed the digest with a
    traceback quoting part of it, and left its run half recorded."""
    settings.MEMORY_WEBHOOK_URL = "http://hookuser:S3cr#etPw@127.0.0.1:9/hook"
    settings.MEMORY_WEBHOOK_ATTEMPTS = 1
    run = digest.run()
    assert run.webhook_status == "failed" and "not a valid URL" in run.webhook_error
    assert "S3cr" not in run.webhook_error and "hookuser" not in run.webhook_error

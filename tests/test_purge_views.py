"""The purge page (admins only): the preview lists what would go (memories, rows per table, what
is out of reach) and writes nothing; purging needs the typed confirmation of the very set the
preview showed; the receipt page says done or failed; a purged memory's page says so."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.purge_forms import previewed
from memory import writes
from memory.erasure import PURGED
from memory.models import Memory
from memory.writes import Actor
from tests.aria_checks import assert_errors_described
from tests.test_templates_static import page_problems

SECRET = "the staging DB password is hunter2-prod"
URL = reverse("dashboard:purge")


@pytest.fixture
def memory(db):
    return writes.remember(SECRET, actor=Actor("agent-one", "agent"), create_job=False).memory


def form(memory, **extra):
    return {"scope": "memory", "memory": memory.id, "reason": "a leaked password", **extra}


def test_only_admins_reach_the_purge_page(client, viewer_client, reviewer_client, memory):
    assert client.get(URL).status_code == 302  # to the login
    assert viewer_client.get(URL).status_code == 403
    assert reviewer_client.get(URL).status_code == 403
    assert reviewer_client.post(URL, form(memory, step="purge", confirm="PURGE")).status_code == 403
    assert not Memory.objects.get(id=memory.id).is_purged


def test_the_page_is_prefilled_from_a_memory_and_htmx_gets_the_fragment(
    admin_client_role, memory, hx
):
    page = admin_client_role.get(URL, {"memory": memory.id})
    assert page.status_code == 200 and memory.id in page.content.decode()
    fragment = admin_client_role.get(URL, {"memory": memory.id}, **hx)
    assert fragment.content.decode().lstrip().startswith('<div id="purge-main"')


def test_the_preview_lists_what_would_go_and_writes_nothing(admin_client_role, memory):
    response = admin_client_role.post(URL, form(memory, step="preview"))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-testid="purge-preview"' in body and 'data-testid="rows-memories"' in body
    assert 'data-testid="confirm"' in body and 'data-testid="purge"' in body
    assert response.context["preview"].rows == {"memories": 1, "memory_history": 1}
    assert "backups" in body  # what is out of reach is said before, not after
    assert Memory.objects.get(id=memory.id).content == SECRET


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"reason": ""}, "reason", "Give a reason"),
        ({"scope": "everything"}, "scope", "Select a valid choice"),
        ({"memory": ""}, "memory", "Give the memory id to purge"),
        ({"memory": "nope"}, "memory", "Memory nope not found"),
        ({"scope": "agent", "agent": "nobody"}, "agent", "No memory was ever written for agent"),
        ({"scope": "text", "text": ""}, "text", "Give the text to purge"),
        ({"scope": "text", "text": "abc"}, "text", "Text must be at least 4 characters"),
        (
            {"scope": "text", "text": "hunter2-prod", "reason": "it was hunter2-prod"},
            "reason",
            "The reason repeats what is being purged",
        ),
    ],
)
def test_bad_input_is_shown_next_to_its_field(admin_client_role, memory, data, field, message):
    response = admin_client_role.post(URL, {**form(memory, step="preview"), **data})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert any(message in error for error in errors[field]), errors
    assert_errors_described(response.content.decode())
    assert Memory.objects.get(id=memory.id).content == SECRET


def test_purging_needs_the_typed_word_and_the_previewed_set(admin_client_role, memory):
    seen = previewed([memory.id])
    wrong_word = admin_client_role.post(
        URL, form(memory, step="purge", confirm="purge", previewed=seen)
    )
    assert wrong_word.status_code == 400
    assert "Type PURGE" in " ".join(wrong_word.context["form"].errors["confirm"])
    assert_errors_described(wrong_word.content.decode())
    other = writes.remember("A second memory of the same agent.", actor=Actor("a", "agent"))
    stale = admin_client_role.post(
        URL, form(memory, step="purge", confirm="PURGE", previewed=previewed([other.memory.id]))
    )
    assert "changed since the preview" in " ".join(stale.context["form"].errors["confirm"])
    assert Memory.objects.get(id=memory.id).content == SECRET


@pytest.mark.django_db(transaction=True)
def test_a_confirmed_purge_shows_its_receipt_and_the_memory_says_it_was_purged(
    admin_client_role, memory, hx
):
    response = admin_client_role.post(
        URL, form(memory, step="purge", confirm="PURGE", previewed=previewed([memory.id])), **hx
    )
    assert response.status_code == 200
    receipt_url = response["HX-Redirect"]
    receipt = admin_client_role.get(receipt_url)
    body = receipt.content.decode()
    assert receipt.status_code == 200 and "Done." in body and "&quot;verified&quot;: true" in body
    assert SECRET not in body
    assert '<td><code>memories</code></td><td class="num">1</td>' in body
    assert 'data-testid="receipt-found">Nothing: 0 copies.' in body
    assert "Out of the product&#x27;s reach" in body or "Out of the product's reach" in body
    page = admin_client_role.get(reverse("dashboard:memory", args=[memory.id]))
    text = page.content.decode()
    assert 'data-testid="purge-notice"' in text and receipt_url in text
    assert SECRET not in text and PURGED in text
    assert 'data-testid="purge-link"' not in text and 'name="action" value="recover"' not in text
    for html in (body, text, admin_client_role.post(URL, form(memory, step="preview")).content):
        assert page_problems(html if isinstance(html, str) else html.decode()) == []


@pytest.mark.django_db(transaction=True)  # PostgreSQL vacuums the scrubbed tables: no transaction
def test_the_receipt_says_which_copies_the_first_check_found_and_rewrote(admin_client_role, memory):
    """A copy outside the purge's rows (another job's prompt quoting the memory) is rewritten
    after the first check; the receipt said "Nothing: 0 copies" and hid it (a QA day)."""
    from django.utils import timezone

    from memory.models import Job
    from pipeline.models import LlmCall

    other = writes.remember("Kenji rotates the staging keys.", actor=Actor("a", "agent")).memory
    now = timezone.now()
    job = Job.objects.create(memory=other, created_at=now, updated_at=now)
    LlmCall.objects.create(
        job=job,
        kind="decide",
        provider="offline",
        model="m",
        prompt=f"[1] {SECRET}",
        created_at=now,
    )
    response = admin_client_role.post(
        URL, form(memory, step="purge", confirm="PURGE", previewed=previewed([memory.id]))
    )
    body = admin_client_role.get(response["Location"]).content.decode()
    assert 'data-testid="receipt-found">Nothing left: 0 copies.' in body
    repaired = body[body.index('data-testid="receipt-repaired"') :]
    assert "<code>pipeline_llm_calls.prompt</code>: 1" in repaired
    assert SECRET not in body and SECRET not in LlmCall.objects.get(job=job).prompt


def test_an_admin_finds_the_purge_link_on_a_memory_and_a_reviewer_does_not(
    admin_client_role, reviewer_client, memory
):
    detail = reverse("dashboard:memory", args=[memory.id])
    assert 'data-testid="purge-link"' in admin_client_role.get(detail).content.decode()
    assert 'data-testid="purge-link"' not in reviewer_client.get(detail).content.decode()
    assert f'href="{URL}"' in admin_client_role.get(detail).content.decode()  # the nav link


def test_the_preview_shows_hidden_characters_by_name_not_obeyed(admin_client_role):
    """A QA pass: the preview of an irreversible erase read a right-to-left override backwards
    ("...a4b5c6d7e8f9 edoc teser"), where every other page names it."""
    spoof = writes.remember(
        "\u202eThe reset code 9f8e7d6c5b4a is for Mallory", actor=Actor("evil", "agent")
    ).memory
    data = {"scope": "memory", "memory": spoof.id, "reason": "spoofing", "step": "preview"}
    body = admin_client_role.post(URL, data).content.decode()
    assert ">RLO<" in body and "\u202e" not in body.split('data-testid="purge-preview"')[1]

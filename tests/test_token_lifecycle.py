"""API tokens over their life (issue 21, item 12): an optional expiry (a 401 saying it expired, on
the JSON API and MCP), `revoke_api_token` (refusing an ambiguous name), last_used_at recorded at
most once a minute in one UPDATE outside any transaction, the admin's list showing all three, and
serve's access log keeping query strings (search terms, delete reasons) out."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from api.auth import authenticate, create_token
from api.mcp_server import run_tool
from memory.models import ApiToken


def bearer(plain: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def expire(row: ApiToken) -> None:
    """Move a token's expiry into the past (create_token refuses a past expiry)."""
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def make(name: str = "agent", **kwargs) -> tuple[ApiToken, str]:
    return create_token(name, scopes=kwargs.pop("scopes", ["ingest"]), **kwargs)


def reviewer_named(name: str, **fields):
    """A dashboard user with the reviewer role (a review token's holder needs it)."""
    from django.contrib.auth.models import Group, User

    from dashboard.roles import ensure_role_groups

    ensure_role_groups()
    user = User.objects.create_user(name, password=f"pw-{name}-12345", **fields)
    user.groups.add(Group.objects.get(name="reviewer"))
    return user


def manage(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --- expiry ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_past_its_expiry_gets_a_401_saying_it_expired_on_the_json_api(client):
    row, plain = make(expires_at=timezone.now() + timedelta(days=1))
    assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    expire(row)
    response = client.get("/api/proposals", **bearer(plain))
    assert response.status_code == 401
    body = response.json()
    assert body["error"] == "token_expired"
    assert "expired at" in body["message"] and "create_api_token" in body["message"]
    unknown = client.get("/api/proposals", HTTP_AUTHORIZATION="Bearer mcd_nope")
    assert unknown.status_code == 401 and unknown.json()["error"] == "unauthorized"


@pytest.mark.django_db
def test_health_with_an_expired_token_says_so_and_stays_a_200_liveness_answer(client):
    """Before, a monitor whose token expired got the anonymous answer with no sign of it (found
    by a day of QA); a 401 would fail a probe, so the answer says it and keeps its status."""
    row, plain = make(expires_at=timezone.now() + timedelta(days=1))
    full = client.get("/api/health", **bearer(plain)).json()
    assert "queue" in full and "token" not in full
    expire(row)
    response = client.get("/api/health", **bearer(plain))
    body = response.json()
    assert response.status_code == 200 and body["ok"] is True and "queue" not in body
    assert body["token"]["ok"] is False and body["token"]["error"] == "token_expired"
    assert "expired at" in body["token"]["message"]
    unknown = client.get("/api/health", HTTP_AUTHORIZATION="Bearer mcd_nope").json()
    assert unknown["token"]["error"] == "unauthorized"
    assert "token" not in client.get("/api/health").json()  # anonymous: nothing to say


@pytest.mark.django_db(transaction=True)
def test_an_expired_token_gets_a_401_saying_it_expired_over_mcp_http_and_from_its_tools():
    from api.mcp_transports import http_app

    row, plain = make(expires_at=timezone.now() + timedelta(days=1))
    expire(row)

    async def post():
        transport = httpx.ASGITransport(app=http_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            response = await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "Authorization": f"Bearer {plain}",
                    "Accept": "application/json, text/event-stream",
                },
            )
        # The guard read the token in anyio's worker thread: close that thread's connection.
        await anyio.to_thread.run_sync(connections.close_all)
        return response

    # In a thread of its own: a browser test earlier in the session leaves an event loop
    # running in this one, and anyio.run refuses to start a second.
    with ThreadPoolExecutor(1) as pool:
        response = pool.submit(anyio.run, post).result()
    assert response.status_code == 401
    assert response.json()["error"] == "token_expired"
    assert "expired at" in response.json()["message"]
    payload, is_error = run_tool("recall", {"query": "anything"}, f"Bearer {plain}", None)
    assert is_error and payload["error"] == "token_expired"


@pytest.mark.django_db
def test_the_stdio_mcp_server_refuses_an_expired_token_saying_so(monkeypatch):
    row, plain = make(expires_at=timezone.now() + timedelta(days=1))
    expire(row)
    monkeypatch.setenv("MEMORY_MCP_TOKEN", plain)
    with pytest.raises(CommandError, match="expired at"):
        call_command("mcp")


@pytest.mark.django_db
def test_create_api_token_sets_an_expiry_from_a_date_or_a_number_of_days():
    day = (timezone.now() + timedelta(days=400)).date()
    out = manage("create_api_token", "dated", "--expires", day.isoformat())
    dated = ApiToken.objects.get(name="dated")
    assert dated.expires_at == datetime(day.year, day.month, day.day, tzinfo=UTC)
    assert f"expiring at {day.isoformat()} 00:00 UTC" in out
    manage("create_api_token", "monthly", "--expires-in-days", "30")
    left = ApiToken.objects.get(name="monthly").expires_at - timezone.now()
    assert timedelta(days=29, hours=23) < left <= timedelta(days=30)
    assert "never expiring" in manage("create_api_token", "forever")
    assert ApiToken.objects.get(name="forever").expires_at is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args, error",
    [
        (["--expires", "2020-01-01"], "in the past"),
        (["--expires", "next tuesday"], "is not a date"),
        (["--expires-in-days", "0"], "1 or more"),
        (["--expires", "2099-01-01", "--expires-in-days", "3"], "not allowed with"),
    ],
)
def test_create_api_token_refuses_a_bad_expiry_and_creates_nothing(args, error):
    with pytest.raises(CommandError, match=error):
        manage("create_api_token", "bad", *args)
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("scopes", ["", " , "])
def test_create_api_token_refuses_an_empty_scope_list_instead_of_giving_ingest(scopes):
    """A reviewer asking for no scope (a read-only token?) got ingest, which writes, silently
    (found by a day of QA)."""
    with pytest.raises(CommandError, match="--scopes names no scope.*--read-only"):
        manage("create_api_token", "read-only", "--scopes", scopes)
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_a_read_only_token_reads_and_recalls_but_writes_nothing_on_the_api_and_mcp(client):
    writer = make("writer")[1]
    stored = client.post(
        "/api/memory/remember",
        {"content": "Kenji deploys billing-api on Fridays."},
        content_type="application/json",
        **bearer(writer),
    ).json()
    out = manage("create_api_token", "dashboard-bot", "--read-only")
    assert "with no scope (read only)" in out
    plain = out.strip().splitlines()[-1]
    assert ApiToken.objects.get(name="dashboard-bot").scopes == []
    reader = bearer(plain)
    memory_url = f"/api/memory/{stored['id']}"
    assert client.get(memory_url, **reader).status_code == 200
    assert client.get(f"{memory_url}/history", **reader).status_code == 200
    found = client.post(
        "/api/memory/recall", {"query": "billing-api"}, content_type="application/json", **reader
    )
    assert found.status_code == 200 and found.json()["results"][0]["id"] == stored["id"]
    refused = [
        client.post(
            "/api/memory/remember",
            {"content": "A new fact."},
            content_type="application/json",
            **reader,
        ),
        client.patch(
            memory_url,
            {"content": "Kenji deploys on Mondays.", "reason": "moved"},
            content_type="application/json",
            **reader,
        ),
        client.delete(f"{memory_url}?reason=gone", **reader),
    ]
    assert [(r.status_code, r.json()["error"]) for r in refused] == [(403, "forbidden")] * 3
    recalled, is_error = run_tool("recall", {"query": "billing-api"}, f"Bearer {plain}", None)
    assert not is_error and recalled["results"][0]["id"] == stored["id"]
    wrote, is_error = run_tool("remember", {"content": "A new fact."}, f"Bearer {plain}", None)
    assert is_error and wrote["error"] == "forbidden"
    assert client.get(memory_url, **reader).json()["version"] == 1


@pytest.mark.django_db
def test_read_only_and_scopes_together_are_refused():
    with pytest.raises(CommandError, match="not allowed with"):
        manage("create_api_token", "both", "--read-only", "--scopes", "ingest")
    assert not ApiToken.objects.exists()


# --- revoke ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_revoke_api_token_by_name_or_prefix_makes_the_token_401(client):
    row, plain = make("ci-bot")
    other, other_plain = make("laptop")
    assert "Revoked token 'ci-bot'" in manage("revoke_api_token", "ci-bot")
    assert client.get("/api/proposals", **bearer(plain)).status_code == 401
    assert client.get("/api/proposals", **bearer(other_plain)).status_code == 200
    manage("revoke_api_token", other.prefix)
    assert client.get("/api/proposals", **bearer(other_plain)).status_code == 401
    with pytest.raises(CommandError, match="no unrevoked token"):
        manage("revoke_api_token", "ci-bot")  # already revoked


@pytest.mark.django_db
@pytest.mark.parametrize(
    "given",
    [
        lambda row, plain: f"{row.prefix}…",  # as the admin and the commands show it
        lambda row, plain: plain[:16],  # a longer start of the token than its stored prefix
        lambda row, plain: plain,  # the whole token
    ],
    ids=["shown-with-ellipsis", "longer-start", "whole-token"],
)
def test_revoke_api_token_takes_the_prefix_as_shown_or_a_longer_start_of_the_token(given):
    row, plain = make("ci-bot")
    make("laptop")
    assert "Revoked token 'ci-bot'" in manage("revoke_api_token", given(row, plain))
    assert list(ApiToken.objects.filter(revoked=True)) == [row]


@pytest.mark.django_db
def test_revoke_api_token_refuses_an_ambiguous_name_listing_the_matches():
    first, _ = make("ci", agent_id="alpha")
    second, _ = make("ci", agent_id="beta")
    with pytest.raises(CommandError) as refused:
        manage("revoke_api_token", "ci")
    message = str(refused.value)
    assert "2 unrevoked tokens match 'ci'" in message
    assert first.prefix in message and second.prefix in message and "by its prefix" in message
    assert not ApiToken.objects.filter(revoked=True).exists()
    manage("revoke_api_token", second.prefix)
    assert list(ApiToken.objects.filter(revoked=True)) == [second]


# --- last_used_at ---------------------------------------------------------------------------------


def token_updates(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith("UPDATE") and "api_tokens" in q["sql"]]


@pytest.mark.django_db(transaction=True)
def test_last_used_at_is_set_by_a_request_in_one_update_and_at_most_once_a_minute(client):
    row, plain = make()
    with CaptureQueriesContext(connection) as first:
        assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None
    assert timezone.now() - row.last_used_at < timedelta(seconds=30)
    assert len(token_updates(first.captured_queries)) == 1
    used = row.last_used_at
    with CaptureQueriesContext(connection) as again:
        assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    assert token_updates(again.captured_queries) == []  # within the minute: no write at all
    row.refresh_from_db()
    assert row.last_used_at == used
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=used - timedelta(minutes=2))
    assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at > used


@pytest.mark.django_db(transaction=True)
def test_last_used_at_is_never_written_inside_another_transaction():
    row, plain = make()
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        assert authenticate(f"Bearer {plain}") == row
    assert token_updates(inside.captured_queries) == []
    row.refresh_from_db()
    assert row.last_used_at is None
    authenticate(f"Bearer {plain}")
    row.refresh_from_db()
    assert row.last_used_at is not None


# --- the admin ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_token_list_shows_last_use_expiry_and_state(admin_client):
    make("used-one")
    ApiToken.objects.filter(name="used-one").update(
        last_used_at=datetime(2026, 11, 3, 9, 30, tzinfo=UTC)
    )
    make("dated-one", expires_at=datetime(2099, 5, 6, tzinfo=UTC))
    expired, _ = make("old-one", expires_at=timezone.now() + timedelta(days=1))
    expire(expired)
    revoked, _ = make("gone-one")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked=True)
    page = admin_client.get("/admin/memory/apitoken/").content.decode()
    for header in ("Last used at", "Expires at", "State"):
        assert header in page
    assert "Nov. 3, 2026" in page and "May 6, 2099" in page
    rows = {
        name: page.split(name, 1)[1].split("</tr>", 1)[0]
        for name in ("used-one", "old-one", "gone-one")
    }
    assert "active" in rows["used-one"]
    assert "expired" in rows["old-one"]
    assert "revoked" in rows["gone-one"]


# --- the access log -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_django_logs_no_query_string_of_a_refused_request(client, caplog):
    with caplog.at_level("INFO"):
        client.get("/api/nowhere?q=secret-search-term")
        client.get("/no-such-page/?q=secret-search-term")
    assert caplog.records  # Django did log them (as "Not Found: <path>")
    assert "secret-search-term" not in caplog.text


@pytest.mark.slow
def test_serve_access_log_records_paths_without_query_strings_or_referers(tmp_path):
    from tests.mcp_support import Store, free_port
    from tests.test_mcp_http import Served, reachable, wait_for

    store = Store(tmp_path)
    token = store.token("logger", "admin")
    server = Served(store, free_port(), free_port())
    try:
        wait_for(lambda: reachable(server.web + "/login/"), 60, "serve's web server")
        httpx.get(
            server.web + "/login/?next=/memories/%3Fq%3Dsecret-next",
            headers={"Referer": "http://127.0.0.1/memories/?q=secret-referer"},
            timeout=10,
        )
        httpx.delete(
            server.web + "/api/memory/mem_missing?reason=secret-delete-reason",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        wait_for(lambda: '"DELETE /api/memory/mem_missing' in server.text(), 20, "the access log")
    finally:
        server.stop()
    log = server.text()
    assert '"GET /login/ HTTP/1.1" 200' in log
    for secret in ("secret-next", "secret-referer", "secret-delete-reason", "?"):
        assert secret not in "\n".join(line for line in log.splitlines() if "HTTP/1.1" in line)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["", "   "])
def test_create_api_token_refuses_a_blank_name(name):
    """Found by a QA pass: a nameless token was made, and every change it wrote was audited as
    changed by nobody ("")."""
    with pytest.raises(CommandError, match="needs a name"):
        manage("create_api_token", name, "--scopes", "ingest")
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["rita", "RITA", " rita "])
def test_create_api_token_refuses_the_name_of_a_dashboard_user(name):
    """Found by a QA pass: a token named as a reviewer counted as that reviewer, so one person's
    first approval and a token's made the two of the two-person rule, and the token's approvals
    took the reviewer's claims and agreement figures."""
    from django.contrib.auth.models import User

    User.objects.create_user("rita", password="pw-rita-12345")
    with pytest.raises(CommandError, match="a dashboard user is named"):
        manage("create_api_token", name, "--scopes", "review")
    assert not ApiToken.objects.exists()
    manage("create_api_token", "rita-bot", "--scopes", "review")
    assert ApiToken.objects.get().name == "rita-bot"


@pytest.mark.django_db
def test_create_api_token_ties_a_token_to_its_owner_who_must_be_a_dashboard_user():
    """A token's owner is who its reviews are by (docs/team.md): a name that is no dashboard user
    is refused and creates nothing; any case finds the user, stored as the user's own name."""

    reviewer_named("rita")
    with pytest.raises(CommandError, match="no active dashboard user is named 'ritta'"):
        manage("create_api_token", "rita-cli", "--scopes", "review", "--owner", "ritta")
    assert not ApiToken.objects.exists()
    out = manage("create_api_token", "rita-cli", "--scopes", "review", "--owner", "Rita")
    assert "held by rita (its reviews count as theirs)" in out
    token = ApiToken.objects.get()
    assert (token.owner, token.reviewer_name, token.name) == ("rita", "rita", "rita-cli")
    bot = manage("create_api_token", "deploy-bot", "--scopes", "review")
    assert "held by no dashboard user" in bot and "see --owner" in bot
    assert ApiToken.objects.get(name="deploy-bot").reviewer_name == "deploy-bot"
    assert "held by" not in manage("create_api_token", "agent-two", "--scopes", "ingest")


@pytest.mark.django_db
def test_a_token_owner_is_one_active_user_named_exactly_when_names_differ_only_in_case():
    """Found by a second review: an inactive user could own a token, and with `rita` and `Rita`
    both users, `RITA` picked one of them at random."""
    from django.contrib.auth.models import User

    reviewer_named("rita")
    reviewer_named("Rita")
    User.objects.create_user("old", password="pw-old-12345", is_active=False)
    with pytest.raises(CommandError, match="names 2 users"):
        manage("create_api_token", "r-cli", "--scopes", "review", "--owner", "RITA")
    with pytest.raises(CommandError, match="no active dashboard user is named 'old'"):
        manage("create_api_token", "o-cli", "--scopes", "review", "--owner", "old")
    assert not ApiToken.objects.exists()
    manage("create_api_token", "r-cli", "--scopes", "review", "--owner", "Rita")
    assert ApiToken.objects.get().owner == "Rita"


@pytest.mark.django_db
def test_an_owned_tokens_edit_forget_and_recover_name_its_holder_and_itself(
    client,
):
    """A token's reviews were its owner's but its edits, forgets and recovers were audited under
    the token's name alone; they now name the person and the token (a second review: the person
    alone hid which changes came through the token, after a leak)."""

    from memory.models import MemoryHistory

    reviewer_named("rita")
    _, plain = make("rita-cli", scopes=["ingest", "review"], owner="rita")
    auth = bearer(plain)
    made = client.post(
        "/api/memory/remember",
        {"content": "Deploys run on Tuesdays"},
        content_type="application/json",
        **auth,
    ).json()
    url = f"/api/memory/{made['id']}"
    edit = {"content": "Deploys run on Wednesdays", "reason": "moved", "changedBy": "cli"}
    assert client.patch(url, edit, content_type="application/json", **auth).status_code == 200
    forgot = client.delete(f"{url}?reason=stale", **auth)
    assert forgot.status_code == 200, forgot.content
    back = client.post(
        f"{url}/recover", {"reason": "still true"}, content_type="application/json", **auth
    )
    assert back.status_code == 200, back.content
    trail = dict(
        MemoryHistory.objects.filter(memory_id=made["id"]).values_list("event", "changed_by")
    )
    assert trail == {
        "created": "rita-cli",
        "updated": "cli via rita via rita-cli",  # who asked, and the holder stays named
        "deleted": "rita via rita-cli",  # the person, and the token that carried it
        "recovered": "rita via rita-cli",
    }


@pytest.mark.django_db
def test_a_token_whose_holder_is_deactivated_or_deleted_stops_working_and_says_why(client):
    """Found by a QA pass: a deactivated holder's token still approved and rejected."""
    from django.contrib.auth.models import User

    rita = reviewer_named("rita")
    _, plain = make("rita-cli", scopes=["review"], owner="rita")
    assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    User.objects.filter(pk=rita.pk).update(is_active=False)
    refused = client.get("/api/proposals", **bearer(plain))
    assert refused.status_code == 401 and refused.json()["error"] == "token_holder_inactive"
    assert "held by 'rita', who is no longer an active dashboard user" in refused.json()["message"]
    User.objects.filter(pk=rita.pk).update(is_active=True)
    assert client.get("/api/proposals", **bearer(plain)).status_code == 200
    rita.delete()
    assert client.get("/api/proposals", **bearer(plain)).json()["error"] == "token_holder_inactive"
    _, bot = make("deploy-bot", scopes=["review"])  # no holder: its own name, unaffected
    assert client.get("/api/proposals", **bearer(bot)).status_code == 200


@pytest.mark.django_db
def test_a_token_acts_within_its_holders_role_and_a_viewer_is_given_no_review_token(client):
    """Found by a QA pass: a viewer's review token decided proposals (and gave the second of two
    approvals), and a reviewer demoted to viewer kept rejecting through their token."""
    from django.contrib.auth.models import Group, User

    rita = reviewer_named("rita")
    _, plain = make("rita-cli", scopes=["review"], owner="rita")
    url = "/api/proposals/no-such-proposal/reject"
    assert client.post(url, {}, content_type="application/json", **bearer(plain)).status_code == 404
    rita.groups.remove(Group.objects.get(name="reviewer"))  # demoted: a viewer now
    refused = client.post(url, {}, content_type="application/json", **bearer(plain))
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert "held by 'rita', who is a viewer" in refused.json()["message"]
    # What a viewer may do, the token still does: read.
    assert client.get("/api/proposals", **bearer(plain)).status_code == 200

    User.objects.create_user("vera", password="pw-vera-12345")
    with pytest.raises(CommandError, match="'vera' is a viewer in the dashboard"):
        manage("create_api_token", "vera-cli", "--scopes", "review", "--owner", "vera")
    assert not ApiToken.objects.filter(name="vera-cli").exists()


@pytest.mark.django_db
def test_a_person_asserted_remember_needs_its_holder_to_be_a_reviewer(client):
    """A viewer's token with `assert` wrote memories a person asserted (full mode never changes
    them), which a viewer cannot write in the dashboard; a reviewer's token still does."""
    from django.contrib.auth.models import Group, User

    from memory.models import Memory

    rita = reviewer_named("rita")
    _, plain = make("rita-bot", scopes=["ingest", "assert"], owner="rita")
    body = {"content": "Ship on Fridays only after the freeze", "assertedBy": "person"}
    written = client.post(
        "/api/memory/remember", body, content_type="application/json", **bearer(plain)
    )
    assert written.status_code == 201
    assert Memory.objects.get(id=written.json()["id"]).asserted_by == "person"

    rita.groups.remove(Group.objects.get(name="reviewer"))  # a viewer now
    body["content"] = "Ship on Mondays"
    refused = client.post(
        "/api/memory/remember", body, content_type="application/json", **bearer(plain)
    )
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert "held by 'rita', who is a viewer" in refused.json()["message"]
    agents = client.post(
        "/api/memory/remember",
        {"content": "Ship on Mondays"},
        content_type="application/json",
        **bearer(plain),
    )
    assert agents.status_code == 201
    assert list(Memory.objects.values_list("asserted_by", flat=True).order_by("created_at")) == [
        "person",
        "agent",
    ]

    User.objects.create_user("vera", password="pw-vera-12345")
    with pytest.raises(CommandError, match="'vera' is a viewer in the dashboard"):
        manage("create_api_token", "vera-bot", "--scopes", "ingest,assert", "--owner", "vera")

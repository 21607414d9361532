"""Issue 10 item 15: every answer under /api/ is JSON, errors included (unknown routes, uncaught
failures, oversized numbers), non-finite numbers are refused, and health shows liveness only
without a token."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client

pytestmark = pytest.mark.django_db


def assert_json_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:200]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"] == code and body["message"]
    return body


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/nothing-here"),
        ("post", "/api/memory/remember/"),  # a trailing slash is another route
        ("delete", "/api/proposals/x/y/z"),
        ("get", "/api/"),
    ],
)
def test_unknown_routes_under_api_answer_a_json_404(client, ingest_auth, method, url):
    response = getattr(client, method)(url, **ingest_auth)
    assert_json_error(response, 404, "not_found")


def test_unknown_routes_outside_api_keep_the_html_404(admin_client):
    response = admin_client.get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_a_failure_inside_an_api_view_answers_a_json_500(ingest_auth):
    # A real failure: the table the view reads is gone (DDL is rolled back with the test).
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pipeline_proposals RENAME TO pipeline_proposals_gone")
    response = Client(raise_request_exception=False).get("/api/proposals", **ingest_auth)
    assert_json_error(response, 500, "internal_error")


@pytest.mark.parametrize("offset", [str(2**63), str(2**64 + 5), "9" * 30])
def test_an_offset_too_large_for_the_database_is_a_json_400(ingest_auth, offset):
    response = Client(raise_request_exception=False).get(
        f"/api/proposals?offset={offset}", **ingest_auth
    )
    assert_json_error(response, 400, "invalid_request")


REMEMBER = '{"content": "Priya prefers squash merges", "entities": [{"source": "Priya", "relationship": "prefers", "target": "squash merges", "confidence": NUMBER}]}'


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", str(2**63)])
def test_non_finite_or_oversized_numbers_anywhere_in_a_body_are_a_400(client, ingest_auth, number):
    response = client.post(
        "/api/memory/remember",
        REMEMBER.replace("NUMBER", number),
        content_type="application/json",
        **ingest_auth,
    )
    body = assert_json_error(response, 400, "invalid_request")
    assert "finite" in body["message"] or "integers must be" in body["message"]


def test_non_finite_numbers_in_the_config_are_a_400(client, multi_admin):
    response = client.patch(
        "/api/pipeline/config",
        '{"reason": "x", "search": {"alpha": NaN}}',
        content_type="application/json",
        **multi_admin,
    )
    assert_json_error(response, 400, "invalid_request")


def test_a_finite_body_still_works(client, ingest_auth):
    response = client.post(
        "/api/memory/remember",
        REMEMBER.replace("NUMBER", "0.8"),
        content_type="application/json",
        **ingest_auth,
    )
    assert response.status_code == 201


def test_public_health_shows_liveness_only(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["database"] == {"ok": True}
    text = json.dumps(body)
    for secret in ("version", "ollamaUrl", "queue", "llm", "vector", "mode", "127.0.0.1"):
        assert secret not in text


def test_health_with_a_token_shows_versions_models_and_queue(client, ingest_auth):
    body = client.get("/api/health", **ingest_auth).json()
    assert body["database"]["version"] and "ollamaUrl" in body["llm"]
    assert set(body["queue"]) >= {"pending", "dead"}


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_read_in_any_case(client, ingest_auth, scheme):
    """HTTP's auth schemes are case-insensitive; "bearer" was a 401 (found by a QA pass)."""
    plain = ingest_auth["HTTP_AUTHORIZATION"].split(" ", 1)[1]
    body = client.get("/api/health", HTTP_AUTHORIZATION=f"{scheme}  {plain}").json()
    assert "queue" in body
    assert (
        client.get("/api/health", HTTP_AUTHORIZATION=f"Basic {plain}").json().get("queue") is None
    )


def test_health_with_a_wrong_token_shows_liveness_only(client):
    body = client.get("/api/health", HTTP_AUTHORIZATION="Bearer mcd_wrong").json()
    assert "queue" not in body and body["ok"] is True

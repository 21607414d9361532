"""dashboard.htmx: a page or its fragment (never for a history restore), Vary on HX-Request, and
client events through django-htmx."""

import json

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from django_htmx.middleware import HtmxMiddleware

from dashboard.htmx import review_changed, toast, wants_fragment

pytestmark = pytest.mark.django_db


def request(**headers):
    made = RequestFactory().get("/entities/", **headers)
    HtmxMiddleware(lambda r: HttpResponse())(made)
    return made


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({}, False),
        ({"HTTP_HX_REQUEST": "true"}, True),
        ({"HTTP_HX_REQUEST": "true", "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}, False),
    ],
    ids=["plain", "htmx", "history-restore"],
)
def test_it_answers_a_fragment_only_to_htmx_and_always_varies_on_hx_request(
    viewer_client, headers, fragment
):
    assert wants_fragment(request(**headers)) is fragment
    response = viewer_client.get("/entities/", **headers)
    body = response.content.decode()
    assert ("<html" not in body) is fragment
    assert body.strip().startswith('<div id="entity-list"') is fragment
    assert "HX-Request" in response["Vary"]


def test_client_events_merge_into_one_hx_trigger_header():
    response = toast(review_changed(HttpResponse()), "Saved.", undo="/x/")
    assert json.loads(response["HX-Trigger"]) == {
        "review-changed": {},
        "toast": {"message": "Saved.", "undo": "/x/"},
    }

"""Settings page: read-only for viewers, admins preview and save flag changes with a reason."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard.forms import field_name
from memory.writes import Actor, remember
from pipeline.config import FIELDS, config_json, get_config
from pipeline.models import ConfigChange, Proposal
from pipeline.tasks import process_pending
from pipeline.writes.config import update_config
from tests.aria_checks import assert_errors_described

pytestmark = pytest.mark.django_db
URL = "/settings/"


def form_data(**changes) -> dict:
    """The form as the browser posts it: every current value, with `changes` (JSON keys) applied.
    Unchecked checkboxes are simply absent."""
    flat = {key: value for key, value in _flat(config_json(get_config())).items() if key in FIELDS}
    flat.update({key: value for key, value in changes.items() if key in FIELDS})
    data = {}
    for key, value in flat.items():
        if isinstance(value, bool):
            if value:
                data[field_name(key)] = "on"
        else:
            data[field_name(key)] = str(value)
    data.update({key: value for key, value in changes.items() if key not in FIELDS})
    return data


def _flat(config, prefix=""):
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_url_is_the_named_route():
    assert reverse("dashboard:settings") == URL


def test_anonymous_goes_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    response = client.post(URL, form_data(shadowMode=False, reason="x"))
    assert response.status_code == 302
    assert get_config().shadow_mode is True


def test_a_right_to_left_override_in_a_change_reason_is_shown_not_obeyed(viewer_client):
    """Found by a QA pass: the change log printed it raw, reversing the text after it."""
    update_config({"minFactConfidenceForWrite": 0.8}, changed_by="ada", reason="gate \u202eup")
    html = viewer_client.get(URL).content.decode()
    assert "\u202e" not in html and 'title="hidden character U+202E"' in html


@pytest.mark.parametrize("who", ["viewer_client", "reviewer_client"])
def test_viewers_and_reviewers_read_only(request, who, hx):
    client = request.getfixturevalue(who)
    update_config({"minFactConfidenceForWrite": 0.8}, changed_by="ada", reason="tighter gate")
    page = client.get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert "<html" in html
    assert "Read-only" in html
    assert 'id="settings-form"' not in html
    for key, spec in FIELDS.items():
        assert key in html
        assert spec.help.split(":")[0].replace("'", "&#x27;") in html
    assert "tighter gate" in html and "ada" in html  # the change log
    fragment = client.get(URL, **hx)
    assert fragment.status_code == 200 and "<html" not in fragment.content.decode()

    before = ConfigChange.objects.count()
    response = client.post(URL, form_data(shadowMode=False, reason="let me"))
    assert response.status_code == 403
    assert get_config().shadow_mode is True
    assert ConfigChange.objects.count() == before
    # Not even a preview through POST.
    assert client.post(URL + "?preview=1", form_data(shadowMode=False), **hx).status_code == 403


def test_admin_sees_the_form_plain_and_htmx(admin_client_role, hx):
    html = admin_client_role.get(URL).content.decode()
    assert 'id="settings-form"' in html
    assert 'hx-trigger="change"' in html
    assert 'name="reason"' in html and 'name="confirm"' in html
    for key in FIELDS:
        assert f'name="{field_name(key)}"' in html
    body = admin_client_role.get(URL, **hx).content.decode()
    assert "<html" not in body and 'id="settings-form"' in body


def test_admin_saves_with_reason(admin_client_role):
    assert config_json(get_config())["mode"] == "shadow"
    response = admin_client_role.post(URL, form_data(shadowMode=False, reason="ADDs look good"))
    assert response.status_code == 302 and response["Location"] == URL
    config = config_json(get_config())
    assert config["mode"] == "controlled-write"
    change = ConfigChange.objects.get()
    assert change.changed_by == "ada"
    assert change.reason == "ADDs look good"
    assert change.before["shadowMode"] is True and change.after["shadowMode"] is False
    page = admin_client_role.get(URL).content.decode()
    assert "Settings saved" in page
    assert "ADDs look good" in page
    assert "shadowMode" in page and "controlled-write" in page  # log: key and mode before -> after


def _loaded_form(client) -> dict:
    """The form as the page shows it now, its hidden `loaded` included."""
    page = client.get(URL).content.decode()
    loaded = re.search(r'name="loaded" value="([^"]*)"', page).group(1)
    return {**form_data(), "loaded": loaded.replace("&quot;", '"')}


def test_a_form_opened_before_the_brake_was_pulled_keeps_the_brake_on(admin_client_role):
    data = _loaded_form(admin_client_role)
    update_config({"mutationsFrozen": True}, changed_by="bob", reason="incident")
    data.update({field_name("minFactConfidenceForWrite"): 0.75, "reason": "a higher bar"})
    response = admin_client_role.post(URL, data)
    assert response.status_code == 302
    config = config_json(get_config())
    assert (config["mutationsFrozen"], config["minFactConfidenceForWrite"]) == (True, 0.75)
    assert ConfigChange.objects.order_by("-id").first().after["mutationsFrozen"] is True


def test_a_setting_changed_by_two_admins_at_once_is_refused_and_names_it(admin_client_role):
    data = _loaded_form(admin_client_role)
    update_config({"minFactConfidenceForWrite": 0.8}, changed_by="bob", reason="stricter")
    data.update({field_name("minFactConfidenceForWrite"): 0.6, "reason": "looser"})
    response = admin_client_role.post(URL, data)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Someone changed these settings since this page was opened" in page
    assert "minFactConfidenceForWrite is now 0.8 (it was 0.7 here)" in page
    assert config_json(get_config())["minFactConfidenceForWrite"] == 0.8
    assert ConfigChange.objects.count() == 1
    # The live preview says it too, before anyone presses Save (second review).
    preview = admin_client_role.post(URL, {**data, "preview": "1"}, HTTP_HX_REQUEST="true")
    text = preview.content.decode()
    assert 'data-testid="settings-clash"' in text and "No setting differs" not in text


def test_admin_saves_with_htmx_and_gets_the_main_fragment(admin_client_role, hx):
    response = admin_client_role.post(
        URL, form_data(**{"search.alpha": 0.5, "reason": "more bm25"}), **hx
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body and "Settings saved" in body
    assert get_config().search_alpha == 0.5
    assert "review-changed" in json.loads(response["HX-Trigger"])


def test_missing_reason_is_an_error_next_to_the_field(admin_client_role):
    response = admin_client_role.post(URL, form_data(shadowMode=False, reason="  "))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Say why you are changing the settings" in html
    assert "Nothing was saved" in html
    assert_errors_described(html)
    # The error sits next to the reason field, inside the form.
    assert (
        html.index('name="reason"')
        < html.index("Say why you are changing")
        < html.index('name="confirm"')
    )
    assert get_config().shadow_mode is True
    assert not ConfigChange.objects.exists()


def test_switching_to_full_needs_confirmation(admin_client_role):
    data = form_data(shadowMode=False, allowUpdateDelete=True, reason="go full")
    response = admin_client_role.post(URL, data)
    assert response.status_code == 200
    assert "Tick this box to confirm" in response.content.decode()
    config = get_config()
    assert config.shadow_mode is True and config.allow_update_delete is False
    assert not ConfigChange.objects.exists()

    response = admin_client_role.post(URL, {**data, "confirm": "on"})
    assert response.status_code == 302
    assert config_json(get_config())["mode"] == "full"


@pytest.mark.parametrize("change", [{"enabled": False}, {"mutationsFrozen": True}])
def test_disabling_or_freezing_needs_confirmation(admin_client_role, change):
    response = admin_client_role.post(URL, form_data(**change, reason="brake"))
    assert "Tick this box to confirm" in response.content.decode()
    assert not ConfigChange.objects.exists()
    response = admin_client_role.post(URL, form_data(**change, reason="brake", confirm="on"))
    assert response.status_code == 302
    assert ConfigChange.objects.count() == 1
    after = "disabled" if "enabled" in change else "frozen"
    page = admin_client_role.get(URL).content.decode()
    assert f"Mode: shadow → {after}" in page  # the message
    assert f"<ins>{after}</ins>" in page  # the change log shows the mode switch


def test_out_of_range_value_is_a_field_error(admin_client_role):
    response = admin_client_role.post(URL, form_data(**{"search.alpha": 3, "reason": "x"}))
    assert response.status_code == 200
    assert "less than or equal to 1" in response.content.decode()
    assert_errors_described(response.content.decode())
    assert get_config().search_alpha == 0.7
    assert not ConfigChange.objects.exists()


def test_nothing_changed_is_an_error(admin_client_role):
    response = admin_client_role.post(URL, form_data(reason="no-op"))
    assert "Nothing changed" in response.content.decode()
    assert not ConfigChange.objects.exists()


def test_preview_shows_new_mode_and_weekly_volume_without_saving(admin_client_role, hx):
    remember(
        "Alice prefers dark mode. The deploy runs on Fridays at noon.", actor=Actor("x", "agent")
    )
    process_pending()
    remember("Bob owns the billing service and its runbook.", actor=Actor("x", "agent"))  # pending
    adds = Proposal.objects.filter(action="add").count()
    assert adds >= 2
    # An old proposal is outside the 7-day window.
    Proposal.objects.filter(id=Proposal.objects.first().id).update(
        created_at=timezone.now() - timedelta(days=8)
    )
    data = form_data(shadowMode=False, allowUpdateDelete=True)
    response = admin_client_role.post(URL + "?preview=1", data, **hx)
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    assert 'id="settings-preview"' in body
    assert 'data-testid="preview-mode">FULL<' in body
    assert "SHADOW" in body
    assert f'data-testid="volume-add">{adds - 1}<' in body
    assert 'data-testid="volume-update">0<' in body
    assert 'data-testid="pending-jobs">1<' in body
    assert "Needs the confirmation box" in body
    assert "start</strong> being applied automatically" in body
    assert config_json(get_config())["mode"] == "shadow"
    assert not ConfigChange.objects.exists()

    # GET works too, and a plain (no-JS) preview renders the whole page without saving.
    get = admin_client_role.get(URL, {**data, "preview": "1"}, **hx)
    assert 'data-testid="preview-mode">FULL<' in get.content.decode()
    plain = admin_client_role.post(URL, {**data, "preview": "1", "reason": "x"})
    assert plain.status_code == 200 and "<html" in plain.content.decode()
    assert 'data-testid="preview-mode">FULL<' in plain.content.decode()
    assert not ConfigChange.objects.exists()


def test_preview_of_stopping_auto_apply(admin_client_role, hx):
    update_config({"shadowMode": False}, changed_by="ada", reason="cw")
    body = admin_client_role.post(
        URL + "?preview=1", form_data(shadowMode=True), **hx
    ).content.decode()
    assert 'data-testid="preview-mode">SHADOW<' in body
    assert "stop</strong> being applied automatically" in body
    assert "Needs the confirmation box" not in body


def after_saving(body: str, action: str) -> str:
    """The preview's "After saving" cell of an action's row."""
    row = body[body.index(f'data-testid="volume-{action}"') :]
    return re.findall(
        r'<span class="badge handling [^"]*">([^<]*)</span>', row[: row.index("</tr>")]
    )[-1]


def test_a_full_mode_preview_under_the_two_person_rule_says_deletes_wait_for_two(
    admin_client_role, hx
):
    """Full mode applies a DELETE by itself, except under the two-person rule: the preview says
    so in the action's row and leaves it out of what starts being applied automatically."""
    update_config({"review": {"destructiveApprovals": 2}}, changed_by="ada", reason="two")
    data = form_data(shadowMode=False, allowUpdateDelete=True)
    body = admin_client_role.post(URL + "?preview=1", data, **hx).content.decode()
    assert after_saving(body, "delete") == "waits for two reviewers"
    assert after_saving(body, "update") == "applied automatically"
    started = body[body.index("start</strong> being applied automatically") :]
    started = started[: started.index("</p>")]
    assert "badge-add" in started and "badge-update" in started
    assert "badge-delete" not in started
    # With one approval, the same switch applies DELETEs by itself, and says so.
    update_config({"review": {"destructiveApprovals": 1}}, changed_by="ada", reason="one")
    data = form_data(shadowMode=False, allowUpdateDelete=True)
    body = admin_client_role.post(URL + "?preview=1", data, **hx).content.decode()
    assert after_saving(body, "delete") == "applied automatically"
    started = body[body.index("start</strong> being applied automatically") :]
    assert "badge-delete" in started[: started.index("</p>")]


def test_a_plain_preview_asks_for_no_reason_and_marks_no_field_it_does_not_explain(
    admin_client_role,
):
    """A second reviewer found the reason box marked invalid on a preview, naming an error the
    page did not show (a preview saves nothing, so it needs no reason or confirmation)."""
    body = admin_client_role.post(
        URL, form_data(shadowMode=False, reason="", preview="1")
    ).content.decode()
    assert "Say why you are changing" not in body
    reason = re.search(r"<textarea[^>]*name=\"reason\"[^>]*>", body).group(0)
    assert "aria-invalid" not in reason
    assert_errors_described(body)
    assert get_config().shadow_mode is True


def test_preview_with_a_bad_value_marks_it_by_its_field(admin_client_role, hx):
    """The preview redraws only itself: each field's error comes out of band, by the field (before,
    it said "Fix the highlighted fields" while nothing was marked)."""
    body = admin_client_role.post(
        URL + "?preview=1", form_data(**{"search.alpha": "5", "search.minScore": "abc"}), **hx
    ).content.decode()
    assert "Fix the values marked in red to see a preview." in body
    alpha, min_score = (
        f"id_{field_name(key)}_error" for key in ("search.alpha", "search.minScore")
    )
    assert re.search(
        rf'<p class="field-error" id="{alpha}" hx-swap-oob="true">Ensure this value is less than '
        r"or equal to 1\.0\.</p>",
        body,
    )
    assert f'id="{min_score}" hx-swap-oob="true">Enter a number.</p>' in body
    # Every other field's mark is cleared: a value fixed since the last preview is unmarked.
    shadow = f"id_{field_name('shadowMode')}_error"
    assert f'<p class="field-error" id="{shadow}" hx-swap-oob="true"></p>' in body
    page = admin_client_role.get(URL).content.decode()
    assert f'<p class="field-error" id="{alpha}"></p>' in page  # the slot the preview fills
    # The Preview button without htmx draws the whole page: each error once, by its field.
    page = admin_client_role.post(
        URL, {**form_data(**{"search.alpha": "5"}), "preview": "1"}
    ).content.decode()
    assert page.count(f'id="{alpha}"') == 1 and "hx-swap-oob" not in page


def test_change_log_lists_changes_newest_first(admin_client_role):
    update_config({"search.alpha": 0.6}, changed_by="ada", reason="first change")
    update_config({"shadowMode": False}, changed_by="bob", reason="second change")
    html = admin_client_role.get(URL).content.decode()
    assert html.index("second change") < html.index("first change")
    assert "search.alpha" in html and "0.7" in html and "0.6" in html


def test_reason_and_log_content_are_escaped(admin_client_role):
    update_config({"search.alpha": 0.6}, changed_by="ada", reason="<script>alert(1)</script>")
    html = admin_client_role.get(URL).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_query_count_is_constant_as_the_log_grows(admin_client_role):
    def log(n, start):
        for i in range(n):
            update_config(
                {"search.alpha": round(0.1 + (start + i) % 9 / 10, 2)},
                changed_by="ada",
                reason=f"r{i}",
            )

    log(3, 0)
    with CaptureQueriesContext(connection) as few:
        admin_client_role.get(URL)
    log(27, 3)
    with CaptureQueriesContext(connection) as many:
        admin_client_role.get(URL)
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_blast_radius_leaves_out_adds_the_store_already_had(admin_client_role, hx):
    """A deduplicated ADD writes nothing in any mode: it is not part of what a switch would do."""
    remember(
        "Alice prefers dark mode. The deploy runs on Fridays at noon.", actor=Actor("x", "agent")
    )
    process_pending()
    adds = Proposal.objects.filter(action="add")
    deduped = adds.first()
    Proposal.objects.filter(id=deduped.id).update(status="deduped")
    response = admin_client_role.post(
        URL + "?preview=1", form_data(shadowMode=False, allowUpdateDelete=True), **hx
    )
    assert f'data-testid="volume-add">{adds.count() - 1}<' in response.content.decode()


def test_disabling_under_the_brake_says_the_brake_stays_on(admin_client_role, hx):
    """Found by a QA pass: with the brake on, unticking `enabled` previewed "FROZEN → DISABLED ...
    Brake released: reviewer approvals work again", and the brake was still on."""
    update_config({"mutationsFrozen": True}, changed_by="ada", reason="brake")
    data = form_data(enabled=False)
    body = admin_client_role.post(URL + "?preview=1", data, **hx).content.decode()
    assert "Brake released" not in body
    assert "The emergency brake is on too" in body  # the mode after saving says so
    response = admin_client_role.post(URL, {**data, "reason": "pause", "confirm": "on"})
    assert response.status_code == 302 and get_config().mutations_frozen
    page = admin_client_role.get(URL).content.decode()
    assert "Mode: frozen → disabled. The emergency brake is still on." in page
    # Releasing it, disabled: said, and the mode shown stays disabled.
    body = admin_client_role.post(
        URL + "?preview=1", form_data(mutationsFrozen=False), **hx
    ).content.decode()
    assert "Brake released" in body and "The emergency brake is on too" not in body

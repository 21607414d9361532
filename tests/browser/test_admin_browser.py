"""Admins switch flags with a preview and a confirmation; newcomers read a memory's audit trail."""

import pytest
from playwright.sync_api import expect

from memory.models import Memory
from memory.writes import Actor, modify
from pipeline.config import get_config
from pipeline.models import ConfigChange
from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_switches_to_full_only_after_confirming(page, live_server, login, shot):
    update_config({"shadowMode": False}, changed_by="t", reason="start in controlled-write")
    login("admin")
    page.goto(f"{live_server.url}/settings/")
    page.check("#id_allowUpdateDelete")
    expect(page.locator("[data-testid=preview-mode]")).to_contain_text(
        "FULL"
    )  # shown before saving
    page.fill("#id_reason", "we trust the model for updates now")
    page.click("button:has-text('Save settings')")
    # The confirmation box is missing: said by it (the settings' own slots stay empty, hidden).
    expect(page.locator(".field-error:visible")).to_have_count(1)
    expect(page.locator(".confirm-row .field-error")).to_be_visible()
    assert get_config().allow_update_delete is False
    shot("settings-needs-confirmation")
    page.check("#id_allowUpdateDelete")
    page.fill("#id_reason", "we trust the model for updates now")
    page.check("#id_confirm")
    page.click("button:has-text('Save settings')")
    expect(page.locator(".banner-label")).to_have_text("FULL")
    assert get_config().allow_update_delete is True
    change = ConfigChange.objects.first()
    assert (change.changed_by, change.reason) == ("ada", "we trust the model for updates now")
    shot("settings-saved")


def test_a_value_the_preview_cannot_read_is_marked_by_its_field(page, live_server, login):
    """The preview redraws only itself; before, it said "Fix the highlighted fields" while no
    field was marked until Save."""
    login("admin")
    page.goto(f"{live_server.url}/settings/")
    alpha = page.locator("#id_search__alpha")
    alpha.fill("5")
    alpha.press("Tab")  # a change: the preview is asked for
    preview = page.get_by_test_id("settings-preview")
    expect(preview).to_contain_text("Fix the values marked in red")
    error = page.locator(f"#{alpha.get_attribute('id')}_error")
    expect(error).to_have_text("Ensure this value is less than or equal to 1.0.")
    expect(alpha).to_have_attribute("aria-invalid", "true")  # as a page the server drew marks it
    assert error.get_attribute("id") in alpha.get_attribute("aria-describedby").split()
    row = page.locator(".setting", has=alpha)
    marked = row.evaluate("el => getComputedStyle(el).backgroundColor")
    alpha.fill("0.5")
    alpha.press("Tab")
    expect(error).to_be_hidden()  # fixed: unmarked, and the preview shows again
    expect(alpha).not_to_have_attribute("aria-invalid", "true")
    expect(preview).not_to_contain_text("Fix the values")
    assert row.evaluate("el => getComputedStyle(el).backgroundColor") != marked


def test_a_reviewer_cannot_change_flags(page, live_server, login):
    login("reviewer")
    page.goto(f"{live_server.url}/settings/")
    expect(page.locator("#settings-form")).to_have_count(0)
    expect(page.get_by_text("Current settings")).to_be_visible()


def test_a_newcomer_reads_a_memorys_audit_trail(page, live_server, login, db, shot):
    update_config({"shadowMode": False}, changed_by="t", reason="t")
    raw = run_pipeline_on("Billing runs on Postgres 14. Standup notes from Monday.")[0]
    derived = Memory.objects.get(
        source_id=raw.id, source_type="pipeline-v2", content__startswith="Billing"
    )
    modify(
        derived.id,
        {"content": "Billing runs on Postgres 16."},
        actor=Actor("dana"),
        reason="upgraded in March",
    )
    login("viewer")
    page.goto(f"{live_server.url}/memories/")
    page.get_by_text("Billing runs on Postgres 16.").first.click()
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("pipeline-v2")
    expect(timeline).to_contain_text("upgraded in March")
    expect(timeline.locator("del")).to_contain_text("14")
    expect(timeline.locator("ins")).to_contain_text("16")
    expect(page.locator("#cold")).to_contain_text("Billing runs on Postgres 14.")
    expect(page.locator("#actions")).to_have_count(0)  # a viewer sees no actions
    shot("memory-audit-trail")

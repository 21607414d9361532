"""Export and import in a real browser: an admin downloads the export, uploads it with a bad
line added, and the run's page polls its progress until the per-line report shows (the test
plays the worker). The page fits a phone."""

import json

import pytest
from playwright.sync_api import expect

from memory import export
from memory.models import Memory
from memory.writes import Actor, remember

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def test_download_the_export_then_import_a_file_and_read_its_report(
    page, live_server, login, drain_queue, tmp_path, shot
):
    remember("Kenji deploys billing-api with Terraform.", actor=Actor("bot", "agent"))
    login("admin")
    page.goto(f"{live_server.url}/")
    page.click("nav >> text=Data")
    expect(page.locator("h1")).to_have_text("Export and import")
    shot("transfer")

    page.check("#export_include_history")
    with page.expect_download() as download:
        page.click("[data-testid=export-download]")
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    header, record = (json.loads(line) for line in saved.read_text().splitlines())
    assert header["format"] == export.FORMAT and header["includeHistory"] is True
    assert record["content"] == "Kenji deploys billing-api with Terraform."

    upload = tmp_path / "notes.md"
    upload.write_text("# Notes\n\n- Priya prefers squash merges.\n- ...\n\nThe wiki moved.\n")
    page.set_input_files("#import_file", str(upload))
    page.fill("#import_agent", "ops")
    page.click("[data-testid=import-start]")
    expect(page.locator("h1")).to_have_text("Import of notes.md")
    expect(page.locator("[data-testid=import-live]")).to_contain_text("Waiting for a worker")
    assert Memory.objects.count() == 1  # the request only queued the run

    drain_queue()  # as a worker would
    expect(page.locator("[data-testid=import-report]")).to_be_visible()
    expect(page.locator("[data-testid=import-imported]")).to_have_text("2")
    expect(page.locator("[data-testid=import-refused]")).to_have_text("1")
    expect(page.locator("[data-testid=imported-lines]")).to_have_text("lines 3, 6")
    refusal = page.locator("[data-testid=import-refusals] tbody tr")
    expect(refusal).to_contain_text("content")
    expect(refusal).to_contain_text("is empty after normalisation")
    expect(page.locator("#import-progress")).not_to_have_attribute("hx-trigger", "every 2s")
    shot("import-report")
    assert set(Memory.objects.filter(agent_id="ops").values_list("content", flat=True)) == {
        "Priya prefers squash merges.",
        "The wiki moved.",
    }


def test_the_export_and_import_page_fits_a_phone(page, live_server, login, shot):
    login("admin")
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/transfer/")
    expect(page.locator("h1")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    shot("transfer-phone")

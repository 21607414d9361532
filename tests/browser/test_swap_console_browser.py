"""Swapping rows on the review queue (approve, edit, reject, undo, a filter) leaves the browser
console clean: no error and no Content-Security-Policy violation (issue 19, "A CSP error on every
row swap").

The error came from htmx's attribute settling: it copies the old element's `style` attribute onto
the new one with setAttribute, which `style-src 'self'` forbids. Our templates carry no style
attribute, but the browser gives one to a textarea the reviewer resized by its handle, and browser
extensions put them on rows and fields; htmx now settles class, width and height only."""

import pytest
from playwright.sync_api import expect

from pipeline.writes.config import update_config
from tests.conftest import run_pipeline_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Collects every securitypolicyviolation event, before any page script runs; the console alone
# misses violations a script catches.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`);
});
"""


@pytest.fixture
def seeded(db):
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    run_pipeline_on("The team uses Kafka for billing events. Standup notes from Monday.")
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    run_pipeline_on(
        "Priya reviews every schema migration before it ships. From the data guild.",
        "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
        "Kenji maintains the ingest-worker service and its Kafka consumers. From the team wiki.",
        "Sofia owns the component library in packages/ui. From the design sync.",
        "Dana runs the weekly release train on Thursdays. From the release calendar.",
    )


def test_swapping_review_rows_logs_no_console_error_or_csp_violation(
    page, live_server, login, seeded
):
    errors: list[str] = []
    page.on(
        "console",
        lambda message: errors.append(message.text) if message.type == "error" else None,
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(RECORD_VIOLATIONS)
    login("reviewer")
    page.goto(f"{live_server.url}/review/?sort=age")
    rows = page.locator("tr[data-row]")
    first_id = rows.first.get_attribute("id")
    second_id = rows.nth(1).get_attribute("id")
    expect(rows.first).to_have_class("focused")
    # An extension's inline style on the row (set through the DOM, which the policy allows).
    page.evaluate(f"document.getElementById('{first_id}').style.outline = '1px solid orange'")
    page.keyboard.press("a")  # approve: the row is swapped for its decided version
    expect(page.locator(f"#{first_id} [data-testid=row-note]")).to_contain_text("Approved")
    expect(page.locator(f"#{second_id}")).to_have_class("focused")
    page.keyboard.press("e")  # edit, with the box made taller by its resize handle
    box = page.locator(f"#{second_id} textarea[name=content]")
    expect(box).to_be_focused()
    box.evaluate("el => el.scrollIntoView({block: 'center'})")  # room below it to drag into
    corner = box.bounding_box()
    page.mouse.move(corner["x"] + corner["width"] - 3, corner["y"] + corner["height"] - 3)
    page.mouse.down()
    page.mouse.move(corner["x"] + corner["width"] - 3, corner["y"] + corner["height"] + 60, steps=5)
    page.mouse.up()
    assert box.get_attribute("style"), "the browser gives a resized textarea an inline style"
    box.focus()
    page.keyboard.press("End")
    page.keyboard.type(" (checked)")
    page.keyboard.press("Enter")
    expect(page.locator(f"#{second_id} [data-testid=row-note]")).to_contain_text("Approved")
    third_id = rows.nth(2).get_attribute("id")
    expect(page.locator(f"#{third_id}")).to_have_class("focused")
    page.keyboard.press("r")  # reject with a reason: another swap
    page.keyboard.type("not durable knowledge")
    page.keyboard.press("Enter")
    expect(page.locator(f"#{third_id} [data-testid=row-note]")).to_contain_text("Rejected")
    page.keyboard.press("u")  # undo from the toast: the row comes back open
    expect(page.locator(f"#{third_id} [data-action=approve]")).to_be_visible()
    page.select_option("#id_action", "add")  # a filter swaps the whole list
    expect(page.locator("tr[data-row]").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    violations = page.evaluate("window.__cspViolations")
    assert violations == [], violations
    assert errors == [], errors

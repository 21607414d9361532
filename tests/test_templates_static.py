"""Templates carry no inline CSS or JavaScript, so "script-src 'self'; style-src 'self'" holds.

Two checks: every template file (comments removed) has no <style>, no <script> with a body, no
style= or on*= attribute and no script hidden in htmx attributes or URLs; and the main pages,
rendered with real data, have no inline style or script either (charts, meters and marks come from
Python).
"""

import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from memory.models import Job, Memory
from pipeline.imports import runs
from pipeline.models import Proposal
from pipeline.writes.config import update_config
from tests.aria_checks import undescribed_errors

TEMPLATES = Path(settings.BASE_DIR) / "templates"
COMMENTS = re.compile(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}|{#.*?#}", re.S)
TEMPLATE_RULES = {
    "<style> element": re.compile(r"<style", re.I),
    "inline <script>": re.compile(r"<script\b[^>]*>(?!\s*</script>)", re.I),
    "<script> without src": re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>", re.I),
    "style= attribute": re.compile(r"\sstyle\s*=", re.I),
    "on*= event handler": re.compile(r"\son[a-z]+\s*=", re.I),
    "hx-on handler": re.compile(r"\shx-on", re.I),
    "script in hx-vals/hx-vars": re.compile(
        r"\shx-vars\s*=|\shx-vals\s*=\s*['\"]\s*(js|javascript):", re.I
    ),
    "javascript: URL": re.compile(r"javascript:", re.I),
}
# Rendered pages: look inside tags only, so escaped memory text can never trip a rule.
TAG = re.compile(r"<[a-zA-Z][^>]*>")
RENDERED_RULES = {
    "<style> element": re.compile(r"^<style\b", re.I),
    "<script> without src": re.compile(r"^<script\b(?![^>]*\bsrc=)", re.I),
    "style= attribute": re.compile(r"\sstyle\s*=", re.I),
    "on*= event handler": re.compile(r"\son[a-z]+\s*=", re.I),
    "hx-on handler": re.compile(r"\shx-on", re.I),
    "javascript: URL": re.compile(r"javascript:", re.I),
}


BLOCK_COMMENTS = re.compile(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}", re.S)


def unclosed_comments(source: str) -> list[int]:
    """Lines where a `{#` comment does not close on the same line: Django's `{# #}` is one line
    only, and a longer one is sent to the browser as text (issue 19, defect 10: the jobs page
    showed `{# The list refreshes itself ... #}`). `{% comment %}` blocks may hold anything."""
    text = BLOCK_COMMENTS.sub(lambda block: "\n" * block.group(0).count("\n"), source)
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if re.search(r"{#(?![^\n]*?#})", line)
    ]


def template_problems(source: str) -> list[str]:
    text = COMMENTS.sub("", source)
    return [name for name, rule in TEMPLATE_RULES.items() if rule.search(text)]


def page_problems(html: str) -> list[str]:
    return [
        f"{name}: {tag[:120]}"
        for tag in TAG.findall(html)
        for name, rule in RENDERED_RULES.items()
        if rule.search(tag)
    ]


def all_templates() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.html"))


def test_there_are_templates_to_check():
    names = {path.relative_to(TEMPLATES).as_posix() for path in all_templates()}
    assert {"base.html", "dashboard/review.html", "dashboard/replay.html"} <= names


@pytest.mark.parametrize(
    "path", all_templates(), ids=lambda path: path.relative_to(TEMPLATES).as_posix()
)
def test_a_template_has_no_inline_css_or_javascript(path):
    assert template_problems(path.read_text()) == []


@pytest.mark.parametrize(
    "path", all_templates(), ids=lambda path: path.relative_to(TEMPLATES).as_posix()
)
def test_every_short_comment_of_a_template_closes_on_its_own_line(path):
    assert unclosed_comments(path.read_text()) == []


def test_the_comment_check_catches_a_comment_over_two_lines():
    assert unclosed_comments("<p>{# one line #}</p>\n{# two\nlines #}\n{# a #}{# b #}") == [2]
    assert unclosed_comments("{% comment %}\n{# inside a block #\n{% endcomment %}") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "<style>.x { color: red }</style>",
        "<script>alert(1)</script>",
        '<script type="module">\n  go();\n</script>',
        '<div style="margin:0">',
        '<button onclick="go()">',
        "<textarea onkeydown='go()'>",
        '<form hx-on:submit="go()">',
        "<div hx-vals='js:{a: go()}'>",
        '<a href="javascript:go()">',
    ],
)
def test_the_template_check_catches_inline_code(snippet):
    assert template_problems(f"<div>{snippet}</div>")


def test_the_template_check_allows_files_comments_and_data_attributes():
    source = (
        '{% htmx_script %}<script src="/static/js/app.js" defer></script>\n'
        "{# no <style> or style= here #}{% comment %}<script>x()</script>{% endcomment %}\n"
        '<button data-reveal-button="edit" hx-post="/x" hx-target="closest tr">Edit</button>'
    )
    assert template_problems(source) == []


def test_htmx_is_told_not_to_inject_its_indicator_style_nor_settle_style_attributes():
    # Otherwise htmx adds a <style> element at load, and after a swap copies the old element's
    # style attribute onto the new one (issue 19): inline styles that style-src 'self' refuses.
    base = (TEMPLATES / "base.html").read_text()
    found = re.search(r"""<meta name="htmx-config" content='([^']*)'>""", base)
    assert found, "base.html configures htmx with a <meta name=htmx-config>"
    config = json.loads(found.group(1))
    assert config["includeIndicatorStyles"] is False
    assert "style" not in config["attributesToSettle"]


@pytest.mark.django_db
def test_the_main_pages_render_without_inline_css_or_javascript(
    admin_client_role, pipeline_run, tmp_path
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    notes = tmp_path / "notes.md"
    notes.write_text("- Kenji deploys billing-api.\n- ...\n")
    pipeline_run(
        "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly.",
        "Kenji maintains ingest-worker. Mail him at kenji@lumen.dev if it breaks.",
        "Priya prefers squash merges for feature branches. Said in the review channel.",
    )
    proposal = Proposal.objects.order_by("created_at").first()
    memory = Memory.objects.order_by("created_at").first()
    job = Job.objects.order_by("created_at").first()
    run = runs.import_file(notes)
    urls = [
        reverse("dashboard:overview"),
        reverse("dashboard:review"),
        reverse("dashboard:contradictions"),
        reverse("dashboard:proposal", args=[proposal.id]),
        reverse("dashboard:memories") + "?q=deploy",
        reverse("dashboard:memory", args=[memory.id]),
        reverse("dashboard:jobs"),
        reverse("dashboard:job", args=[job.id]),
        reverse("dashboard:entities"),
        reverse("dashboard:settings"),
        reverse("dashboard:analytics"),
        reverse("dashboard:evaluation"),
        reverse("dashboard:eval-compare"),
        reverse("dashboard:replay") + f"?proposal={proposal.id}",
        reverse("dashboard:transfer"),
        reverse("dashboard:import-run", args=[run.id]),
        reverse("dashboard:purge") + f"?memory={memory.id}",
    ]
    for url in urls:
        response = admin_client_role.get(url)
        assert response.status_code == 200, url
        assert page_problems(response.content.decode()) == [], url
        # Django names a field's help text in its aria-describedby: the page must hold it.
        assert undescribed_errors(response.content.decode()) == [], url


def test_the_aria_check_catches_a_missing_id_an_unnamed_message_and_a_silent_invalid_field():
    assert undescribed_errors('<input aria-describedby="x_helptext">') == [
        "<input > names #x_helptext, which is not on the page"
    ]
    assert undescribed_errors('<input name="a" aria-invalid="true"><p class="field-error">Bad') == [
        "the error 'Bad' is named by no field",
        "<input a> is aria-invalid and names no message",
    ]
    described = '<input name="a" aria-invalid="true" aria-describedby="a_error">'
    assert undescribed_errors(described + '<p class="field-error" id="a_error">Bad</p>') == []
    assert undescribed_errors('<p class="field-error" data-form-error>Nothing saved</p>') == []


def test_the_page_check_catches_inline_code_but_not_escaped_text():
    assert page_problems('<p><span class="bar"><i style="width: 40%"></i></span></p>')
    assert page_problems("<script>go()</script>")
    assert page_problems("<p>set style=dark &lt;b onclick=x&gt;</p>") == []

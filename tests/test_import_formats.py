"""What an import file holds (pipeline.imports.formats): the format told from the first line, the
Markdown / plain text split (one memory per paragraph or list item), mem0's two shapes with the
line each item starts on, and each bad item refused alone with its line and field."""

import json

import pytest

from memory import export
from memory.imported import Incoming
from pipeline.imports import formats, report
from pipeline.imports.formats import FileRefused, Options, Refusal

OPTIONS = Options(file_name="notes.md", who="ada")


def lines(text: str) -> list[bytes]:
    return text.encode().splitlines(keepends=True)


def texts(text: str) -> list[tuple[int, str]]:
    found = list(formats.items(lines(text), formats.TEXT, OPTIONS))
    return [(i.line, i.text.storage) if isinstance(i, Incoming) else str(i) for i in found]


HEADER = json.dumps({"format": export.FORMAT, "version": export.VERSION})


def test_a_list_item_with_nothing_after_its_marker_is_refused_not_dropped_unseen():
    """Found by a day of QA: "- " and "-" read as a heading's underline and fell out of every
    count; an underline under a paragraph stays a heading."""
    found = texts("- first item\n- \n-\n- \u200b\n- last item\n\nRelease notes\n-------------\n")
    assert found[0] == (1, "first item") and found[-1] == (5, "last item")
    refused = found[1:-1]
    assert [item.split(":")[0] for item in refused] == ["line 2", "line 3", "line 4"]
    assert all("content" in item for item in refused), refused


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (HEADER, formats.EXPORT),
        ('{"results": [{"memory": "x"}]}', formats.MEM0),
        ("{", formats.MEM0),
        ("[", formats.MEM0),
        ("# Notes", formats.TEXT),
        ("Priya prefers squash merges.", formats.TEXT),
        # Read as an export, so its refusal says the header is missing (a QA pass: it was read
        # as mem0 and refused as "line 2: not valid JSON: Extra data").
        ('{"content": "an export line without its header"}', formats.EXPORT),
        # Markdown opening with a link is text, not a JSON list (it was refused as bad JSON).
        ("[Runbook](http://x) says restart the pod first.", formats.TEXT),
        ("[WIP] Kenji deploys billing-api.", formats.TEXT),
        ("[x] done: the wiki moved", formats.TEXT),
        ("[1]: https://example.com/runbook", formats.TEXT),
        ("[ ] rotate the key", formats.TEXT),
        ("[[Billing]] runs on Postgres", formats.TEXT),
        ("[]", formats.MEM0),
        ("[", formats.MEM0),
        ('[{"memory": "x"}]', formats.MEM0),
    ],
)
def test_the_format_is_told_from_the_first_line(first, expected):
    assert formats.detect(first.encode()) == expected


def test_an_export_without_its_header_is_refused_saying_so():
    text = '{"content": "one"}\n{"content": "two"}\n'
    with pytest.raises(FileRefused, match="an export starts with its header line"):
        list(formats.items(lines(text), formats.detect(text.split("\n")[0].encode()), OPTIONS))


def test_markdown_gives_one_memory_per_paragraph_or_list_item_and_skips_headings():
    text = (
        "---\ntitle: notes\n---\n"  # front matter: lines 1-3
        "# Team notes\n"  # 4: heading
        "\n"
        "Priya prefers squash merges\n"  # 6: a paragraph over two lines
        "for every repository.\n"
        "\n"
        "- Kenji deploys billing-api with Terraform.\n"  # 9
        "- The staging database lives in eu-west\n"  # 10: an item with a continuation line
        "  and is rebuilt every Monday.\n"
        "* [x] Rotate the Vault tokens monthly.\n"  # 12: a done task
        "1. Numbered items count too.\n"  # 13
        "   - and so do nested ones.\n"  # 14
        "\n"
        "Release notes\n"  # 16: an underlined heading
        "=============\n"
        "\n"
        "> Quoted advice: never deploy on Fridays.\n"  # 19
        "\n"
        "```\nmake deploy\n\nmake verify\n```\n"  # 21-25: a fence keeps its blank line
        "***\n"
        "Last line without a newline."  # 27
    )
    assert texts(text) == [
        (6, "Priya prefers squash merges for every repository."),
        (9, "Kenji deploys billing-api with Terraform."),
        (10, "The staging database lives in eu-west and is rebuilt every Monday."),
        (12, "Rotate the Vault tokens monthly."),
        (13, "Numbered items count too."),
        (14, "and so do nested ones."),
        (19, "Quoted advice: never deploy on Fridays."),
        (21, "``` make deploy make verify ```"),
        (27, "Last line without a newline."),
    ]


def test_plain_text_paragraphs_are_split_on_blank_lines_with_windows_line_ends():
    text = "First memory,\r\nstill the first.\r\n\r\n\r\nSecond memory.\r\n"
    assert texts(text) == [(1, "First memory, still the first."), (5, "Second memory.")]


def test_a_text_item_with_nothing_visible_is_refused_with_its_line():
    assert texts("A memory.\n\n- ...\n\nAnother.\n") == [
        (1, "A memory."),
        "line 3: content: is empty after normalisation",
        (5, "Another."),
    ]


def test_text_memories_carry_the_file_and_line_as_their_source_and_go_to_the_agent_given():
    options = Options(file_name="notes.md", agent="ops-bot", who="ada")
    (item,) = formats.items(lines("\n\nOne memory.\n"), formats.TEXT, options)
    assert (item.agent_id, item.who, item.source_type, item.source_id) == (
        "ops-bot",
        "ada",
        "text",
        "notes.md:3",
    )


MEM0_ITEM = {
    "id": "3f6c1d7e-1111-4c1a-9a57-0c6d2b3c9a11",
    "memory": "Prefers vegetarian food",
    "hash": "d41d8cd98f00b204e9800998ecf8427e",
    "metadata": {"source": "chat"},
    "created_at": "2024-07-20T01:26:51.123456-07:00",
    "updated_at": None,
    "user_id": "alice",
}


def test_mem0_results_object_items_start_on_the_lines_where_they_are_written():
    document = {"relations": [], "results": [MEM0_ITEM, {"id": "2", "memory": "Likes hiking"}]}
    text = json.dumps(document, indent=2)
    found = list(formats.items(lines(text), formats.MEM0, Options(file_name="m.json")))
    starts = [n + 1 for n, line in enumerate(text.splitlines()) if line == "    {"]
    assert [item.line for item in found] == starts
    first = found[0]
    assert first.text.storage == "Prefers vegetarian food"
    assert (first.agent_id, first.who, first.source_type, first.source_id) == (
        "alice",
        "alice",
        "mem0",
        MEM0_ITEM["id"],
    )
    assert first.created_at.isoformat() == "2024-07-20T08:26:51.123456+00:00"  # the instant, in UTC
    assert first.origin["mem0"]["metadata"] == {"source": "chat"}
    assert "hash" not in first.origin["mem0"]  # a digest of the text would outlive its purge


def test_mem0_plain_list_of_older_versions_and_a_bad_item_refused_alone():
    text = (
        "[\n"
        '  {"id": "1", "memory": "Works at Lumen", "agent_id": "helper", "categories": ["work"]},\n'
        '  {"id": "2", "memory": 42},\n'
        '  "not an object",\n'
        '  {"id": "4", "memory": "Lives in Lisbon", "created_at": "yesterday"},\n'
        '  {"id": "5", "memory": "Drinks tea"}\n'
        "]\n"
    )
    found = list(formats.items(lines(text), formats.MEM0, Options(file_name="m.json")))
    assert [str(i) if isinstance(i, Refusal) else (i.line, i.agent_id) for i in found] == [
        (2, "helper"),
        "line 3: memory: is required and must be a string",
        "line 4: item: must be an object with a memory",
        "line 5: created_at: 'yesterday' is not an ISO 8601 date and time, like "
        "2027-01-31T00:00:00Z",
        (6, "default"),
    ]
    assert found[0].tags == ["work"]


def test_a_mem0_file_that_is_not_json_is_refused_whole_naming_the_line():
    with pytest.raises(FileRefused, match="line 3: not valid JSON"):
        list(formats.items(lines('{"results": [\n{"memory": "a"},\n}'), formats.MEM0, OPTIONS))


def test_an_export_of_a_newer_version_is_refused_whole():
    newer = json.dumps({"format": export.FORMAT, "version": export.VERSION + 1})
    with pytest.raises(FileRefused, match="line 1: the file is version 2"):
        list(formats.items(lines(newer + "\n"), formats.EXPORT, OPTIONS))
    with pytest.raises(FileRefused, match="starts with its header line"):
        list(formats.items(lines('{"content": "x"}\n'), formats.EXPORT, OPTIONS))


def test_export_records_are_validated_field_by_field_with_the_path_of_nested_fields():
    good = {"content": "Kenji deploys billing-api.", "agentId": "ops"}
    records = [
        good,
        {**good, "importance": 7},
        {**good, "tags": "ops"},
        {**good, "entities": [{"type": "person"}]},
        {**good, "history": [{"event": "created", "createdAt": "soon"}]},
        {**good, "content": "bad\u0000byte"},
        {**good, "pinned": "yes"},
        {**good, "id": "../../etc"},
        {**good, "id": "Recall"},  # GET /api/memory/recall is recall's (a QA pass)
    ]
    text = HEADER + "\n" + "\n".join(json.dumps(r) for r in records) + "\nnot json\n"
    found = [
        str(i) if isinstance(i, Refusal) else i.line
        for i in formats.items(lines(text), formats.EXPORT, OPTIONS)
    ]
    assert found == [
        2,
        "line 3: importance: must be a number between 0 and 1",
        "line 4: tags: must be a list of strings",
        "line 5: entities[0].name: is required",
        "line 6: history[0].createdAt: 'soon' is not an ISO 8601 date and time, like "
        "2027-01-31T00:00:00Z",
        "line 7: content: contains a NUL byte",
        "line 8: pinned: must be true or false",
        "line 9: id: must be a memory id (letters, digits and dashes, at most 36)",
        "line 10: id: 'Recall' is a word of the API's routes, not a memory id",
        "line 11: line: is not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ]


# --- the per-line report ------------------------------------------------------------------------


def test_the_report_keeps_ranges_of_consecutive_outcomes_and_every_refusal():
    from memory.imported import DEDUPED, DONE, Outcome
    from pipeline.imports.report import Progress, spans

    first = Progress().after(
        [
            Outcome(2, DONE, "a"),
            Outcome(3, DONE, "b"),
            Outcome(5, DONE, "c"),  # line 4 was blank: the range goes on
            Outcome(6, DEDUPED, "d"),
            Refusal(7, "content", "is empty after normalisation"),
        ]
    )
    second = first.after([Outcome(8, DONE, "e"), Outcome(9, DEDUPED, "f")])
    assert first.columns()["report"]["imported"] == [[2, 5]]  # left as it was
    report = second.columns()
    assert (report["imported"], report["deduped"], report["refused"]) == (3 + 1, 2, 1)
    assert spans(report["report"]["imported"]) == "2-5, 8"
    assert spans(report["report"]["deduped"]) == "6, 9"
    assert report["report"]["refused"] == [
        {"line": 7, "field": "content", "message": "is empty after normalisation"}
    ]
    assert (report["position"], report["last_line"]) == (7, 9)


def test_the_report_stops_listing_ranges_past_its_limit_but_counts_exactly(monkeypatch):
    from memory.imported import DEDUPED, DONE, Outcome

    monkeypatch.setattr(report, "RANGES_KEPT", 2)
    alternating = [Outcome(n, DONE if n % 2 else DEDUPED, str(n)) for n in range(1, 11)]
    done = report.Progress().after(alternating).columns()
    assert done["imported"] == 5 and done["report"]["imported"] == [[1, 1], [3, 3]]
    assert done["report"]["unlisted"] == {"imported": 3, "deduped": 3}
    assert report.spans([[1, 1], [3, 3]], 3) == "1, 3 and 3 more not listed"


def test_a_report_says_line_for_one_line_and_lines_for_more():
    assert report.lines([[2, 2]]) == "line 2"
    assert report.lines([[2, 3]]) == "lines 2-3"
    assert report.lines([[1, 1], [3, 3]]) == "lines 1, 3"
    assert report.lines([[2, 2]], 4) == "lines 2 and 4 more not listed"
    assert report.lines([]) == ""


def test_a_date_and_time_without_a_time_zone_is_read_as_utc_in_every_format():
    """docs/export-import.md: other stores write naive times; they are UTC, not the machine's."""
    mem0 = json.dumps([{"id": "1", "memory": "Likes tea", "created_at": "2024-07-20T08:26:51"}])
    (item,) = formats.items(lines(mem0), formats.MEM0, Options(file_name="m.json"))
    assert item.created_at.isoformat() == "2024-07-20T08:26:51+00:00"
    record = {"content": "Kenji deploys billing-api.", "createdAt": "2024-07-20T08:26:51"}
    exported = f"{HEADER}\n{json.dumps(record)}\n"
    (item,) = formats.items(lines(exported), formats.EXPORT, OPTIONS)
    assert item.created_at.isoformat() == "2024-07-20T08:26:51+00:00"

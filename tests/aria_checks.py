"""A page's field errors are tied to their fields for assistive technology: every field marked
aria-invalid names a message with aria-describedby, every id a field names is on the page, and
every field's error message is named by its field (a form's own error, about no one field, is
marked `data-form-error`)."""

from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text: dict[str, str] = {}  # id -> the text inside its element
        self.fields: list[tuple[str, bool, str | None]] = []  # (name, invalid, describedby)
        self.messages: list[str | None] = []  # the id of each field error message
        self.message_texts: list[list[str]] = []
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        element_id = attributes.get("id")
        if element_id:
            self.text.setdefault(element_id, "")
        invalid = attributes.get("aria-invalid") == "true"
        if invalid or "aria-describedby" in attributes:
            name = f"<{tag} {attributes.get('name') or element_id or ''}>"
            self.fields.append((name, invalid, attributes.get("aria-describedby")))
        if tag not in VOID:
            self._open.append((tag, element_id))
        classes = (attributes.get("class") or "").split()
        if "field-error" in classes and "data-form-error" not in attributes:
            self.messages.append(element_id)
            self.message_texts.append([])
            self._open[-1] = (tag, element_id, len(self.messages) - 1)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self._open.pop()

    def handle_data(self, data):
        for _, element_id, *message in self._open:
            if element_id:
                self.text[element_id] += data
            if message:
                self.message_texts[message[0]].append(data)

    def handle_endtag(self, tag):
        for position in range(len(self._open) - 1, -1, -1):
            if self._open[position][0] == tag:
                del self._open[position:]
                return


def undescribed_errors(body: str) -> list[str]:
    """What is wrong: a field marked invalid with no aria-describedby or only empty messages, a
    field naming an id that is not on the page, or a field's error message no field names."""
    page = _Collector()
    page.feed(body)
    problems = []
    named = {
        target for _, _, described_by in page.fields for target in (described_by or "").split()
    }
    for message_id, text in zip(page.messages, page.message_texts, strict=True):
        if "".join(text).strip() and message_id not in named:
            problems.append(f"the error {''.join(text).strip()[:60]!r} is named by no field")
    for name, invalid, described_by in page.fields:
        targets = (described_by or "").split()
        missing = [target for target in targets if target not in page.text]
        problems += [f"{name} names #{target}, which is not on the page" for target in missing]
        if invalid and not any(page.text.get(target, "").strip() for target in targets):
            problems.append(f"{name} is aria-invalid and names no message")
    return problems


def assert_errors_described(body: str) -> None:
    problems = undescribed_errors(body)
    assert not problems, problems

"""The redaction form: which span of which memory (or of a proposal's fact), its finding's kind,
why, and where it was asked (the queue row, the memory's page, the proposal's page), so the
answer goes back there."""

from __future__ import annotations

from django import forms

from pipeline.redaction import SPAN_MAX, Request

ORIGINS = [("row", "the review queue"), ("memory", "a memory's page"), ("proposal", "a proposal")]
STEPS = [("preview", "preview"), ("redact", "redact")]
# A refusal of the domain, shown next to the field it is about (else above the form).
REFUSAL_FIELDS = {
    "reason_required": "reason",
    "reason_holds_text": "reason",
    "empty_span": "span",
    "span_too_short": "span",
    "span_too_long": "span",
    "span_not_found": "span",
    "span_not_a_finding": "span",
    "invalid_span": "span",
    "invalid_kind": "kind",
}


class RedactForm(forms.Form):
    memory = forms.CharField(max_length=36)
    proposal = forms.CharField(max_length=36, required=False)
    span = forms.CharField(
        max_length=SPAN_MAX,
        strip=False,
        error_messages={"required": "Give the text to redact."},
    )
    kind = forms.CharField(max_length=40)
    reason = forms.CharField(
        max_length=500,
        required=False,
        help_text="Kept in the memory's history. Describe the text, do not repeat it.",
    )
    origin = forms.ChoiceField(choices=ORIGINS)
    # The id of the element the confirmation fills (a queue row's proposal id, "memory", ...).
    slot = forms.RegexField(regex=r"^[A-Za-z0-9_-]{1,64}$")
    step = forms.ChoiceField(choices=STEPS)

    def redaction_request(self, *, any_span: bool = False) -> Request:
        """The request; `any_span` for an admin (a reviewer redacts a finding's span only)."""
        data = self.cleaned_data
        return Request(
            data["memory"], data["span"], data["kind"], data["proposal"] or None, any_span
        )

    def add_refusal(self, code: str, message: str) -> None:
        field = REFUSAL_FIELDS.get(code)
        self.add_error(field, message[:1].upper() + message[1:] + ".")

"""The purge page's form: what to purge (a scope and its one argument), why, and the typed
confirmation that the previewed set is the one to erase."""

from __future__ import annotations

import hashlib

from django import forms

from dashboard.memory_forms import REASON_REQUIRED
from pipeline.purge import Request, Scope

SCOPE_CHOICES = [
    (Scope.MEMORY.value, "One memory"),
    (Scope.LINEAGE.value, "A raw memory and everything derived from it"),
    (Scope.AGENT.value, "Every memory of an agent"),
    (Scope.TEXT.value, "Every memory holding a text (a leaked key, an address)"),
]
# The argument each scope needs, and the form field that holds it.
ARGUMENT = {
    Scope.MEMORY: "memory",
    Scope.LINEAGE: "memory",
    Scope.AGENT: "agent",
    Scope.TEXT: "text",
}
CONFIRM_WORD = "PURGE"
# A refusal of the domain, shown next to the field it is about.
REFUSAL_FIELDS = {
    "reason_required": "reason",
    "reason_holds_text": "reason",
    "not_found": "memory",
    "already_purged": "memory",
    "unknown_agent": "agent",
    "empty_text": "text",
    "text_too_short": "text",
}


def previewed(memory_ids: list[str]) -> str:
    """What the confirmation carries: the previewed set of memory ids, hashed (ids only)."""
    return hashlib.sha256(",".join(sorted(memory_ids)).encode()).hexdigest()


class PurgeForm(forms.Form):
    scope = forms.ChoiceField(choices=SCOPE_CHOICES, widget=forms.RadioSelect, initial="memory")
    memory = forms.CharField(required=False, max_length=36, label="Memory id")
    agent = forms.CharField(required=False, max_length=200, label="Agent")
    text = forms.CharField(required=False, max_length=2000, label="Text", strip=False)
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": REASON_REQUIRED},
        help_text="Kept with the tombstone and the receipt. Describe the text, do not repeat it.",
    )
    confirm = forms.CharField(required=False, max_length=20, label=f"Type {CONFIRM_WORD}")
    previewed = forms.CharField(required=False, widget=forms.HiddenInput)

    def full_clean(self):
        super().full_clean()
        # Radios in a fieldset: Django names no message in their aria-describedby.
        if "scope" in self.errors:
            described = f"{self['scope'].auto_id}_error"
            self.fields["scope"].widget.attrs["aria-describedby"] = described

    def clean(self):
        data = super().clean()
        scope = data.get("scope")
        if scope:
            name = ARGUMENT[Scope(scope)]
            if not (data.get(name) or "").strip():
                self.add_error(name, f"Give the {self.fields[name].label.lower()} to purge.")
        return data

    def purge_request(self) -> Request:
        data = self.cleaned_data
        scope = Scope(data["scope"])
        value = data[ARGUMENT[scope]]
        key = "memory_id" if ARGUMENT[scope] == "memory" else ARGUMENT[scope]
        return Request(scope, **{key: value.strip() if key != "text" else value})

    def confirmed(self, memory_ids: list[str]) -> bool:
        """The admin typed the word and confirms the very set the preview showed; else the
        confirmation field says what to do."""
        data = self.cleaned_data
        if data.get("previewed") != previewed(memory_ids):
            self.add_error(
                "confirm",
                "What this would purge changed since the preview: check the new preview, then "
                "confirm again.",
            )
            return False
        if data.get("confirm") != CONFIRM_WORD:
            self.add_error("confirm", f"Type {CONFIRM_WORD} (in capitals) to purge for good.")
            return False
        return True

    def add_refusal(self, code: str, message: str) -> None:
        field = REFUSAL_FIELDS.get(code)
        self.add_error(field, message[:1].upper() + message[1:] + ".")

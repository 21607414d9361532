"""Forms of the memory browser: the list filters and one small form per reviewer action."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils import timezone

from dashboard.feedback import FEEDBACK_CHOICES
from memory import expiry

PINNED_CHOICES = [("", "any"), ("yes", "pinned"), ("no", "not pinned")]
# live: neither deleted nor expired (what recall finds); expired: not deleted, past its expiry.
DELETED_CHOICES = [("live", "live"), ("expired", "expired"), ("deleted", "deleted"), ("all", "all")]
ORIGIN_CHOICES = [("", "any"), ("raw", "raw"), ("derived", "derived")]


class MemoryFilterForm(forms.Form):
    """GET filters of the list. Unknown values of a choice are ignored, never an error page."""

    q = forms.CharField(required=False, max_length=500, strip=True)
    type = forms.CharField(required=False, max_length=40)
    who = forms.CharField(required=False, max_length=200)
    tag = forms.CharField(required=False, max_length=100)  # a remember's tags are up to 100 chars
    agent = forms.CharField(required=False, max_length=200)
    pinned = forms.ChoiceField(required=False, choices=PINNED_CHOICES)
    deleted = forms.ChoiceField(required=False, choices=DELETED_CHOICES)
    origin = forms.ChoiceField(required=False, choices=ORIGIN_CHOICES)
    feedback = forms.ChoiceField(required=False, choices=FEEDBACK_CHOICES)

    def filters(self) -> dict[str, str]:
        """Every filter with its default; a field that did not validate counts as unset."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        values = {name: (data.get(name) or "") for name in self.fields}
        values["deleted"] = values["deleted"] or "live"
        return values


REASON_REQUIRED = "Give a reason: it is kept in the audit trail."


class ActionForm(forms.Form):
    """Fields every action shares. if_version guards against acting on a stale page."""

    action = forms.CharField(widget=forms.HiddenInput)
    if_version = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)


class PinForm(ActionForm):
    reason = forms.CharField(required=False, max_length=500)

    def reason_or_default(self, action: str) -> str:
        return self.cleaned_data.get("reason") or f"{action}ned from the memory browser"


class EditForm(ActionForm):
    reason = forms.CharField(max_length=500, error_messages={"required": REASON_REQUIRED})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The limit is read per form, not when the module is imported: it is a setting.
        self.fields["content"] = forms.CharField(
            max_length=settings.MEMORY_MAX_CONTENT_CHARS,
            widget=forms.Textarea(attrs={"rows": 5}),
            error_messages={"required": "The content cannot be empty."},
        )
        self.order_fields(["action", "if_version", "content", "reason"])


class ExpiryForm(ActionForm):
    """When the memory expires, in UTC (a browser's datetime-local value, or ISO 8601 with a
    zone); empty lifts the expiry. A moment already past expires it now."""

    expires_at = forms.CharField(required=False, max_length=40)
    reason = forms.CharField(required=False, max_length=500)

    def clean_expires_at(self):
        text = self.cleaned_data.get("expires_at") or ""
        if not text.strip():
            return None
        try:
            return expiry.parse(text, name="The expiry", default_utc=True)
        except expiry.BadExpiry as exc:
            raise forms.ValidationError(
                f"{exc}. Pick a date and time (UTC), or empty the field for no expiry."
            ) from None

    def moment_for(self, current):
        """The expiry to save: `current` (the memory's own) while the field still shows it. The
        field keeps whole seconds, so an untouched re-save moved a precise expiry by its fraction
        of a second, as a change with its own audit row (a QA pass)."""
        moment = self.cleaned_data.get("expires_at")
        if moment is not None and current is not None and moment == current.replace(microsecond=0):
            return current
        return moment

    def reason_or_default(self, current) -> str:
        """The reason given, or what the change does (`current`: the memory's own expiry)."""
        if reason := self.cleaned_data.get("reason"):
            return reason
        moment = self.cleaned_data.get("expires_at")
        return f"{expiry.change_described(current, moment, timezone.now())} from the memory browser"


class ForgetForm(ActionForm):
    reason = forms.CharField(max_length=500, error_messages={"required": REASON_REQUIRED})
    force = forms.BooleanField(required=False)


class RecoverForm(ActionForm):
    reason = forms.CharField(max_length=500, error_messages={"required": REASON_REQUIRED})


ACTION_FORMS: dict[str, type[ActionForm]] = {
    "pin": PinForm,
    "unpin": PinForm,
    "edit": EditForm,
    "expiry": ExpiryForm,
    "forget": ForgetForm,
    "recover": RecoverForm,
}

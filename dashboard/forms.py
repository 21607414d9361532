"""Forms of the jobs, settings and entities pages, and the model pickers of the second opinion and
evaluation pages. They validate input; writes happen elsewhere."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings

from memory.models import JobStatus
from pipeline.config import FIELDS, ConfigError, Mode, flatten, preview
from pipeline.llm import OFFLINE_MODEL, PROVIDERS

# The model pickers of the second opinion and the evaluation pages.
PROVIDER_CHOICES = [(name, provider.label) for name, provider in PROVIDERS.items()]


def default_provider() -> str:
    configured = (settings.MEMORY_LLM_PROVIDER or "").strip().lower()
    return configured if configured in PROVIDERS else "ollama"


def default_model(provider: str) -> str:
    return OFFLINE_MODEL if provider == "offline" else settings.MEMORY_EXTRACTION_MODEL


class JobFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "All statuses"), *JobStatus.choices], required=False)


class EntitySearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")


def _said(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else f"{value}"


def field_name(key: str) -> str:
    """Form field name of a config key ("search.alpha" -> "search__alpha")."""
    return key.replace(".", "__")


def flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """config_json() flattened to FIELDS keys (mode and timestamps dropped)."""
    flat = flatten(config)
    return {key: flat[key] for key in FIELDS}


def risky_switches(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What in a change needs an explicit confirmation (DESIGN §5: full, disabled, frozen)."""
    risky = []
    if after["mode"] == Mode.FULL and before["mode"] != Mode.FULL:
        risky.append("switch to full mode (UPDATE and DELETE applied without review)")
    if before["enabled"] and not after["enabled"]:
        risky.append("disable the pipeline (no job is processed)")
    if not before["mutationsFrozen"] and after["mutationsFrozen"]:
        risky.append("pull the emergency brake (no pipeline write, no reviewer apply)")
    return risky


def _prefilled(field: forms.Field, raw: str, fallback: Any) -> Any:
    try:
        value = field.clean(raw)
    except forms.ValidationError:
        return fallback
    return fallback if value is None else value


class SettingsForm(forms.Form):
    """Every flag of pipeline.config.FIELDS plus a reason and a confirmation for risky switches.

    After is_valid(): `changes` (key -> new value, only what differs), `before`/`after` (config
    JSON as it is and as it would be) and `risky` (what needs the confirmation box).
    """

    reason = forms.CharField(
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "Why? This goes in the change log."}
        ),
        max_length=2000,
        error_messages={"required": "Say why you are changing the settings; it goes in the log."},
    )
    confirm = forms.BooleanField(
        required=False, label="I understand what this switch does and want it now"
    )
    # The settings as this form showed them: only what its admin changed from these is saved, so
    # a form opened before another admin's change (the brake pulled, say) does not undo it.
    loaded = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(
        self, *args, current: dict[str, Any], prefill=None, previewing: bool = False, **kwargs
    ):
        """`prefill`: values (by config key, as a query string gives them) shown in an unbound
        form instead of the current ones; an invalid one is ignored. `previewing`: nothing is
        saved, so the reason and the confirmation are not asked for (their fields are not
        marked invalid)."""
        super().__init__(*args, **kwargs)
        self.previewing = previewing
        if previewing:
            self.fields["reason"].required = False
        self.current = current
        self.flat_current = flat_config(current)
        self.changes: dict[str, Any] = {}
        self.before: dict[str, Any] = current
        self.after: dict[str, Any] | None = None
        self.risky: list[str] = []
        self.prefilled: dict[str, Any] = {}
        self.clashes: list[str] = []
        setting_fields = {}
        for key, spec in FIELDS.items():
            common = {"label": key, "help_text": spec.help, "initial": self.flat_current[key]}
            if spec.kind is bool:
                field = forms.BooleanField(required=False, **common)
            elif spec.kind is int:
                field = forms.IntegerField(
                    min_value=int(spec.low), max_value=int(spec.high), **common
                )
            else:
                field = forms.FloatField(
                    min_value=spec.low,
                    max_value=spec.high,
                    widget=forms.NumberInput(attrs={"step": "0.05"}),
                    **common,
                )
            field.config_key = key
            if prefill and key in prefill and spec.kind is not bool:
                field.initial = _prefilled(field, prefill[key], field.initial)
                if field.initial != self.flat_current[key]:
                    self.prefilled[key] = field.initial
            setting_fields[field_name(key)] = field
        self.fields = {**setting_fields, **self.fields}
        self.fields["loaded"].initial = json.dumps(self.flat_current, sort_keys=True)

    def setting_fields(self):
        return [self[name] for name in self.fields if name not in {"reason", "confirm", "loaded"}]

    def flag_fields(self):
        return [f for f in self.setting_fields() if isinstance(f.field, forms.BooleanField)]

    def number_fields(self):
        return [f for f in self.setting_fields() if not isinstance(f.field, forms.BooleanField)]

    def _loaded(self, posted: str | None) -> dict[str, Any]:
        """The values the form showed (the current ones when it posted none, or garbage)."""
        try:
            shown = json.loads(posted or "null")
        except ValueError:
            shown = None
        if not isinstance(shown, dict):
            return dict(self.flat_current)
        return {key: shown.get(key, self.flat_current[key]) for key in FIELDS}

    def settings_valid(self) -> bool:
        """True when every setting parsed (reason and confirmation may still be missing)."""
        self.is_valid()
        return not any(field_name(key) in self.errors for key in FIELDS)

    def clean(self):
        cleaned = super().clean()
        names = {field_name(key): key for key in FIELDS}
        if any(name in self.errors for name in names):
            return cleaned
        loaded = self._loaded(cleaned.get("loaded"))
        edited = {
            key: cleaned[name]
            for name, key in names.items()
            if name in cleaned and cleaned[name] != loaded[key]
        }
        # Changed by this admin and, since the form was shown, by someone else to another value.
        clashes = [
            f"{key} is now {_said(self.flat_current[key])} (it was {_said(loaded[key])} here)"
            for key, value in edited.items()
            if loaded[key] != self.flat_current[key] != value
        ]
        self.clashes = clashes  # the preview says them too
        if clashes:
            raise forms.ValidationError(
                "Someone changed these settings since this page was opened: "
                + "; ".join(clashes)
                + ". Reload the page and make your change again."
            )
        self.changes = {k: v for k, v in edited.items() if v != self.flat_current[k]}
        if not self.changes:
            raise forms.ValidationError("Nothing changed: every setting has its current value.")
        try:
            self.before, self.after = preview(self.changes)
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from exc
        self.risky = risky_switches(self.before, self.after)
        if self.risky and not cleaned.get("confirm") and not self.previewing:
            self.add_error(
                "confirm", "Tick this box to confirm: this will " + "; ".join(self.risky) + "."
            )
        return cleaned

"""Settings: the mode flags with a preview of what a switch would do (the blast radius), and
the log of every change. Everyone reads; admins change."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponseForbidden
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.views.decorators.http import require_http_methods

from dashboard.access import role_required
from dashboard.forms import SettingsForm, flat_config
from dashboard.htmx import render_page, review_changed
from memory.models import Job, JobStatus
from memory.roles import ADMIN, has_role, role_of
from pipeline.approvals import needs_two
from pipeline.config import (
    FIELDS,
    ConfigError,
    Mode,
    Outcome,
    config_json,
    flatten,
    get_config,
    policy_mode,
    write_policy,
)
from pipeline.eval.runs import configured_model_evidence
from pipeline.models import Action, ConfigChange
from pipeline.review import update_config
from pipeline.status import mode_words, recent_volume

LOG_PAGE_SIZE = 20
ACTIONS = [a.value for a in Action]
# What the two-person rule makes of an action a mode would apply by itself (pipeline.approvals).
TWO_REVIEWERS = "two_reviewers"
HANDLING = {  # the outcomes of pipeline.config.WRITE_POLICY, as the preview shows them
    Outcome.APPLIED: ("applied automatically", "badge-add"),
    Outcome.REVIEW: ("waits for a reviewer", "badge-status"),
    Outcome.RECORDED: ("recorded only", "badge-none"),
    Outcome.HELD: ("held: nobody can apply", "badge-delete"),
    Outcome.WAITS: ("not processed", "badge-warn"),
    TWO_REVIEWERS: ("waits for two reviewers", "badge-status"),
}


# --- settings -------------------------------------------------------------------------------------


def show(value) -> str:
    """A config value as people read it: on/off for flags, numbers as they are."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


def display_mode(config: dict) -> str:
    """The effective mode, with the emergency brake shown as its own state (like the banner)."""
    return policy_mode(config["mode"], mutations_frozen=config["mutationsFrozen"])


def mode_info(config: dict) -> dict:
    key = display_mode(config)
    label, meaning = mode_words(
        key,
        mutations_frozen=config["mutationsFrozen"],
        destructive_approvals=config["review"]["destructiveApprovals"],
    )
    return {"key": key, "label": label, "meaning": meaning}


def handling(mode_key: str, action: str, approvals: int = 1) -> str:
    """How a mode handles an action's proposals, with `approvals` (review.destructiveApprovals):
    a DELETE a mode would apply by itself waits for two reviewers under the two-person rule."""
    kind = write_policy(mode_key, action).outcome
    if kind == Outcome.APPLIED and needs_two(action, None, approvals):
        return TWO_REVIEWERS
    return kind


def _handling_cell(kind: str) -> dict:
    text, css = HANDLING[kind]
    return {"kind": kind, "text": text, "css": css}


def _preview_context(form: SettingsForm | None, current: dict) -> dict:
    """What a change would do: modes, auto-applied actions, waiting jobs, last week's volume."""
    before = current
    after = current
    errors = False
    changes: list[dict] = []
    risky: list[str] = []
    if form is not None and form.is_bound:
        if form.settings_valid() and form.after is not None:
            before, after = form.before, form.after
            risky = form.risky
            changes = [
                {"key": key, "before": show(form.flat_current[key]), "after": show(value)}
                for key, value in form.changes.items()
            ]
        else:
            errors = any(
                name in form.errors for name in form.fields if name not in {"reason", "confirm"}
            )
    before_mode, after_mode = mode_info(before), mode_info(after)
    week = recent_volume(7)
    volume = []
    approvals_before = before["review"]["destructiveApprovals"]
    approvals_after = after["review"]["destructiveApprovals"]
    for action in ACTIONS:
        now_kind = handling(before_mode["key"], action, approvals_before)
        new_kind = handling(after_mode["key"], action, approvals_after)
        volume.append(
            {
                "action": action,
                "count": week.get(action, 0),
                "now": _handling_cell(now_kind),
                "after": _handling_cell(new_kind),
                "changes": now_kind != new_kind,
            }
        )
    # Before a switch into a mode that writes: how the model jobs use fared on an evaluation.
    writes_now = after_mode["key"] in (Mode.CONTROLLED_WRITE, Mode.FULL)
    evidence = None
    if writes_now and after_mode["key"] != before_mode["key"]:
        evidence = configured_model_evidence()
    auto_before = {row["action"] for row in volume if row["now"]["kind"] == Outcome.APPLIED}
    auto_after = {row["action"] for row in volume if row["after"]["kind"] == Outcome.APPLIED}
    return {
        "preview": {
            "bound": bool(form is not None and form.is_bound),
            "errors": errors,
            "changes": changes,
            "before": before_mode,
            "after": after_mode,
            "start": [a for a in ACTIONS if a in auto_after - auto_before],
            "stop": [a for a in ACTIONS if a in auto_before - auto_after],
            "start_volume": sum(week.get(a, 0) for a in auto_after - auto_before),
            # By the flag, not the mode shown: disabled shows first and hides the brake.
            "freezes": not before["mutationsFrozen"] and after["mutationsFrozen"],
            "unfreezes": before["mutationsFrozen"] and not after["mutationsFrozen"],
            "disables": before["enabled"] and not after["enabled"],
            "enables": not before["enabled"] and after["enabled"],
            "risky": risky,
            "volume": volume,
            "week_total": sum(week.values()),
            "pending_jobs": Job.objects.filter(status=JobStatus.PENDING).count(),
            "evidence": evidence,
            "two_person": approvals_after == 2,
        }
    }


def change_diff(change: ConfigChange) -> list[dict]:
    """The keys a logged change touched, mode first, in FIELDS order."""
    before, after = flatten(change.before or {}), flatten(change.after or {})
    for flat in (before, after):  # the brake shows as "frozen", like the banner
        if "mode" in flat:
            flat["mode"] = policy_mode(
                flat["mode"], mutations_frozen=bool(flat.get("mutationsFrozen"))
            )
    keys = ["mode", *FIELDS, *(k for k in after if k not in FIELDS and k != "mode")]
    return [
        {"key": key, "before": show(before.get(key)), "after": show(after.get(key))}
        for key in dict.fromkeys(keys)
        if key != "updatedAt" and before.get(key) != after.get(key)
    ]


def _settings_context(request, form: SettingsForm | None, current: dict, **extra) -> dict:
    """`form` is None for viewers and reviewers: they see the settings and the log read-only."""
    flat = flat_config(current)
    log = Paginator(ConfigChange.objects.order_by("-changed_at", "-id"), LOG_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    for change in log.object_list:
        change.diff = change_diff(change)
    rows = [
        {"key": key, "value": show(flat[key]), "help": spec.help} for key, spec in FIELDS.items()
    ]
    return {
        "current": current,
        "current_mode": mode_info(current),
        "rows": rows,
        "form": form,
        "can_edit": form is not None,
        "log": log,
        **_preview_context(form, current),
        **extra,
    }


def _forbidden(request, needed: str):
    body = render_to_string(
        "403.html", {"needed": needed, "role": role_of(request.user)}, request=request
    )
    return HttpResponseForbidden(body)


@role_required("viewer")
@require_http_methods(["GET", "POST"])
def settings_page(request):
    """Everyone reads; admins get the form, a live preview (`preview=1`) and save (POST)."""
    if request.method == "POST" and not has_role(request.user, ADMIN):
        return _forbidden(request, ADMIN)
    current = config_json(get_config())
    template = "dashboard/settings.html"
    if not has_role(request.user, ADMIN):
        context = _settings_context(request, None, current)
        return render_page(request, template, "settings-main", context)

    data = request.POST if request.method == "POST" else request.GET
    if "preview" in data or "preview" in request.GET:
        # Nothing is saved: the form is validated only to show what the change would do.
        form = SettingsForm(data, current=current, previewing=True)
        context = _settings_context(request, form, current, previewing=True)
        return render_page(request, template, "settings-preview", context)
    if request.method == "GET":
        # A link may pre-fill values (the Evaluation page's operating point): shown, not saved.
        form = SettingsForm(current=current, prefill=request.GET)
        context = _settings_context(request, form, current)
        return render_page(request, template, "settings-main", context)

    form = SettingsForm(request.POST, current=current)
    if form.is_valid():
        try:
            saved = update_config(
                form.changes,
                changed_by=request.user.get_username(),
                reason=form.cleaned_data["reason"],
            )
        except ConfigError as exc:
            form.add_error(None, str(exc))
        else:
            was, now = display_mode(form.before), display_mode(saved)
            text = f"Settings saved. Mode: {was} → {now}." if was != now else "Settings saved."
            if saved["mutationsFrozen"] and now == Mode.DISABLED:
                text += " The emergency brake is still on."
            if not request.htmx:
                messages.success(request, text)
                return redirect("dashboard:settings")
            current = config_json(get_config())
            context = _settings_context(
                request, SettingsForm(current=current), current, saved_note=text
            )
            # The mode banner and the nav counts refresh themselves on review-changed.
            return review_changed(render_page(request, template, "settings-main", context))
    return render_page(
        request, template, "settings-main", _settings_context(request, form, current)
    )

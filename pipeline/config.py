"""Pipeline configuration: who the pipeline is, the singleton row, the effective mode, the write
policy of each mode, and validation of changes (saved by pipeline.writes.config; the interfaces
save one through pipeline.review.update_config)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings

from memory.models import DERIVED_SOURCE_TYPE, ActorType, RowRead
from memory.moments import iso
from memory.writes import Actor
from pipeline.models import Action, PipelineConfig

# The pipeline's name on its audits and decisions: the source_type of the memories it derives.
PIPELINE_NAME = DERIVED_SOURCE_TYPE
PIPELINE_ACTOR = Actor(PIPELINE_NAME, ActorType.PIPELINE)
SHADOW_ACTOR = Actor("pipeline-shadow", ActorType.PIPELINE)


class Mode(StrEnum):
    """The effective modes of DESIGN section 5 (a StrEnum: each equals its plain word)."""

    DISABLED = "disabled"
    SHADOW = "shadow"
    CONTROLLED_WRITE = "controlled-write"
    FULL = "full"


MODES = tuple(Mode)


def effective_mode(
    *, enabled: bool, shadow_mode: bool, mutations_frozen: bool, allow_update_delete: bool
) -> str:
    """The one place flags become a mode. autonomous.* only governs maintenance, never writes."""
    if not enabled:
        return Mode.DISABLED
    if shadow_mode or mutations_frozen:
        return Mode.SHADOW
    return Mode.FULL if allow_update_delete else Mode.CONTROLLED_WRITE


def mode_of(config: PipelineConfig) -> str:
    return effective_mode(
        enabled=config.enabled,
        shadow_mode=config.shadow_mode,
        mutations_frozen=config.mutations_frozen,
        allow_update_delete=config.allow_update_delete,
    )


# --- write policy ---------------------------------------------------------------------------------

FROZEN = "frozen"  # the emergency brake: its own row of the policy (and banner), not a mode


class Outcome(StrEnum):
    """What a mode does with one proposed action (Handling.outcome). `applied` goes through the
    gates: duplicates, confidence, safety, contradictions and pinned targets can still hold it."""

    APPLIED = "applied"
    REVIEW = "review"  # pending, with `blocked_reason`
    HELD = "held"  # pending, and no reviewer can apply it either
    RECORDED = "recorded"  # kept as a decision
    WAITS = "waits"  # no job runs


@dataclass(frozen=True)
class Handling:
    """What a mode does with one proposed action: an Outcome and, when it waits for a reviewer,
    the blocked reason the proposal carries."""

    outcome: Outcome
    blocked_reason: str | None = None


def _every_action(change: Handling) -> dict[str, Handling]:
    return {
        Action.ADD: change,
        Action.UPDATE: change,
        Action.DELETE: change,
        Action.NONE: Handling(Outcome.RECORDED),
    }


_DESTRUCTIVE_WAITS = Handling(Outcome.REVIEW, "destructive_mutations_disabled")

# DESIGN section 5, read by the job's record write (its gates) and by the settings preview.
WRITE_POLICY: dict[str, dict[str, Handling]] = {
    Mode.DISABLED: dict.fromkeys(Action, Handling(Outcome.WAITS)),
    Mode.SHADOW: _every_action(Handling(Outcome.REVIEW, "shadow_mode")),
    FROZEN: _every_action(Handling(Outcome.HELD, "mutations_frozen")),
    Mode.CONTROLLED_WRITE: {
        **_every_action(Handling(Outcome.APPLIED)),
        Action.UPDATE: _DESTRUCTIVE_WAITS,
        Action.DELETE: _DESTRUCTIVE_WAITS,
    },
    Mode.FULL: _every_action(Handling(Outcome.APPLIED)),
}


def policy_mode(mode: str, *, mutations_frozen: bool) -> str:
    """The WRITE_POLICY row of an effective mode: the brake is its own row, except while disabled
    (then nothing runs at all). The banner and the settings page show the same key."""
    return FROZEN if mutations_frozen and mode != Mode.DISABLED else mode


def write_policy(policy: str, action: str) -> Handling:
    return WRITE_POLICY[policy][action]


def applied_automatically(policy: str) -> set[str]:
    """The actions a mode applies without a reviewer (gates permitting)."""
    return {
        action for action, how in WRITE_POLICY[policy].items() if how.outcome == Outcome.APPLIED
    }


def get_config() -> PipelineConfig:
    """The one settings row (created on first use). A raw query: the job's write reads it again
    under the write lock, where the ORM took three times longer to build it than SQLite to run."""
    config = config_read().get()
    if config is None:
        config, _ = PipelineConfig.objects.get_or_create(pk=1)
    return config


def config_read() -> RowRead:
    """The settings row, sent now and read by `.get()` (None before its first use)."""
    return RowRead(PipelineConfig, "id = 1")


def maintenance_allowed(config: PipelineConfig) -> bool:
    """Whether the maintenance schedule runs: autonomous.enabled and not autonomous.frozen."""
    return config.autonomous_enabled and not config.autonomous_frozen


def search_settings() -> tuple[float, float]:
    config = get_config()
    return config.search_alpha, config.search_min_score


@dataclass(frozen=True)
class Field:
    attr: str
    kind: type
    low: float | None = None
    high: float | None = None
    help: str = ""


# JSON key (dotted for nested objects) -> model field, type and bounds.
FIELDS: dict[str, Field] = {
    "enabled": Field("enabled", bool, help="Master switch. Off: no job is processed; jobs wait."),
    "shadowMode": Field(
        "shadow_mode", bool, help="Record every proposal for review; write nothing to memories."
    ),
    "allowUpdateDelete": Field(
        "allow_update_delete",
        bool,
        help="Let the pipeline apply UPDATE and DELETE itself (full mode) instead of queueing them.",
    ),
    "mutationsFrozen": Field(
        "mutations_frozen",
        bool,
        help="Emergency brake: no pipeline write and no reviewer apply. Raw ingestion continues.",
    ),
    "minFactConfidenceForWrite": Field(
        "min_fact_confidence_for_write",
        float,
        0.0,
        1.0,
        "Facts below this confidence are never added automatically.",
    ),
    "autonomous.enabled": Field(
        "autonomous_enabled",
        bool,
        help="Run the maintenance schedule (embed missing vectors, purge old jobs and expired "
        "memories).",
    ),
    "autonomous.frozen": Field(
        "autonomous_frozen", bool, help="Pause the maintenance schedule only."
    ),
    "autonomous.intervalMinutes": Field(
        "autonomous_interval_minutes", int, 1, 1440, "Minutes between maintenance runs."
    ),
    "search.alpha": Field(
        "search_alpha", float, 0.0, 1.0, "Weight of the vector leg in hybrid search."
    ),
    "search.minScore": Field(
        "search_min_score", float, 0.0, 1.0, "Hybrid scores below this are dropped."
    ),
    "rejectionsAsExamples": Field(
        "rejections_as_examples",
        bool,
        help="Show the agent's recent rejections to the decision model as counter-examples.",
    ),
    "jobs.maxAttempts": Field("max_attempts", int, 1, 20, "Attempts before a job is dead."),
    "jobs.leaseTimeoutSeconds": Field(
        "lease_timeout_seconds", int, 30, 86400, "A lease older than this is reclaimed."
    ),
    "jobs.retentionDays": Field(
        "retention_days",
        int,
        1,
        3650,
        "Completed jobs and model-call logs older than this are purged.",
    ),
    "review.staleHours": Field(
        "stale_hours",
        int,
        1,
        8760,
        "Proposals pending longer than this go in the daily staleness digest.",
    ),
    "review.claimMinutes": Field(
        "claim_minutes",
        int,
        1,
        240,
        "Focusing or opening a proposal claims it for this many minutes: others skip it.",
    ),
    "review.destructiveApprovals": Field(
        "destructive_approvals",
        int,
        1,
        2,
        "2: every DELETE, and an UPDATE of a pinned or person-asserted memory, needs two "
        "different reviewers' approvals, and full mode never applies one by itself.",
    ),
    "retention.expiredPurgeDays": Field(
        "expired_purge_days",
        int,
        0,
        3650,
        "Days an expired memory is kept (out of recall) before maintenance purges it; 0: never.",
    ),
}


def config_json(config: PipelineConfig) -> dict[str, Any]:
    return {
        "enabled": config.enabled,
        "shadowMode": config.shadow_mode,
        "allowUpdateDelete": config.allow_update_delete,
        "mutationsFrozen": config.mutations_frozen,
        "minFactConfidenceForWrite": config.min_fact_confidence_for_write,
        "rejectionsAsExamples": config.rejections_as_examples,
        "autonomous": {
            "enabled": config.autonomous_enabled,
            "frozen": config.autonomous_frozen,
            "intervalMinutes": config.autonomous_interval_minutes,
        },
        "search": {"alpha": config.search_alpha, "minScore": config.search_min_score},
        "jobs": {
            "maxAttempts": config.max_attempts,
            "leaseTimeoutSeconds": config.lease_timeout_seconds,
            "retentionDays": config.retention_days,
        },
        "review": {
            "staleHours": config.stale_hours,
            "claimMinutes": config.claim_minutes,
            "destructiveApprovals": config.destructive_approvals,
        },
        "retention": {"expiredPurgeDays": config.expired_purge_days},
        "mode": mode_of(config),
        "updatedAt": iso(config.updated_at),
    }


class ConfigError(ValueError):
    """A config change that names an unknown key or a value of the wrong type or range."""


def flatten(changes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"autonomous": {"enabled": false}} -> {"autonomous.enabled": false}."""
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _field(key: str) -> Field:
    field = FIELDS.get(key)
    if field is None:
        raise ConfigError(f"unknown setting '{key}'; known: {', '.join(FIELDS)}")
    return field


def from_text(key: str, text: str) -> Any:
    """A setting's value as the command line writes it (`true`, `off`, `0.5`), for coerce: the
    JSON API takes JSON's own booleans and numbers only (a QA pass: "yes" pulled the brake)."""
    field, text = _field(key), text.strip().lower()
    if field.kind is bool:
        if text not in {"true", "false", "1", "0", "on", "off", "yes", "no"}:
            raise ConfigError(f"{key} must be true or false")
        return text in {"true", "1", "on", "yes"}
    try:
        number = float(text)
    except ValueError as exc:
        raise ConfigError(f"{key} must be a number") from exc
    return int(number) if field.kind is int and number.is_integer() else number


def coerce(key: str, value: Any) -> Any:
    """Check one value against its field: a JSON boolean or number (from_text reads text)."""
    field = _field(key)
    if field.kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} must be a number")
    try:
        whole = float(value).is_integer()
    except OverflowError as exc:
        raise ConfigError(f"{key} is out of range") from exc
    if field.kind is int and not whole:
        raise ConfigError(f"{key} must be a whole number")
    try:
        value = field.kind(value)
    except (OverflowError, ValueError) as exc:
        raise ConfigError(f"{key} is out of range") from exc
    if field.low is not None and not field.low <= value <= field.high:
        raise ConfigError(f"{key} must be between {field.low:g} and {field.high:g}")
    if key == "jobs.leaseTimeoutSeconds" and value < lease_floor():
        raise ConfigError(
            f"{key} must be at least {lease_floor()} s: one attempt's model calls may take that "
            "long (MEMORY_LLM_TIMEOUT_SECONDS for the extraction and for the decisions, "
            "MEMORY_EMBED_TIMEOUT_SECONDS for the embedding), and a shorter lease is taken back "
            "from a worker still waiting on them (its job's result is then thrown away)"
        )
    return value


def lease_floor() -> int:
    """The shortest lease that outlasts one attempt's model calls at their timeouts."""
    seconds = 2 * settings.MEMORY_LLM_TIMEOUT_SECONDS + settings.MEMORY_EMBED_TIMEOUT_SECONDS
    return max(FIELDS["jobs.leaseTimeoutSeconds"].low, math.ceil(seconds))


def preview(changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(before, after) JSON of the config if `changes` were applied; nothing is saved."""
    config = get_config()
    before = config_json(config)
    for key, value in flatten(changes).items():
        value = coerce(key, value)  # first: an unknown key is a ConfigError, not a KeyError
        setattr(config, FIELDS[key].attr, value)
    return before, config_json(config)


def validate_change(changes: dict[str, Any], reason: str) -> dict[str, Any]:
    """Model field -> checked value for a change request; a ConfigError names the first problem."""
    if not reason or not str(reason).strip():
        raise ConfigError("reason is required")
    flat = flatten(changes)
    if not flat:
        raise ConfigError("no settings given")
    values = {}
    for key, value in flat.items():
        value = coerce(key, value)  # first: an unknown key is a ConfigError, not a KeyError
        values[FIELDS[key].attr] = value
    return values

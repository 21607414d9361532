"""Saving a config change: the singleton row and its change-log entry in one transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from pipeline.config import config_json, get_config, validate_change
from pipeline.models import ConfigChange, PipelineConfig


def update_config(changes: dict[str, Any], *, changed_by: str, reason: str) -> dict[str, Any]:
    """Validate everything first, then save the row and log who, when, why, before and after."""
    values = validate_change(changes, reason)
    get_config()  # the row exists from here on (made on first use)
    with transaction.atomic():
        # Locked (PostgreSQL): two admins saving at once each change the row as the other left
        # it; a save of every column read before the other's commit dropped its change.
        config = PipelineConfig.objects.select_for_update().get(pk=1)
        before = config_json(config)
        for attr, value in values.items():
            setattr(config, attr, value)
        config.save()
        ConfigChange.objects.create(
            changed_by=changed_by,
            changed_at=timezone.now(),
            before=before,
            after=config_json(config),
            reason=str(reason).strip(),
        )
    return config_json(config)

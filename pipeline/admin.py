"""Django admin for the pipeline. Proposals, model calls and the config log are read-only here:
decisions go through the review screens so they are audited."""

from django.contrib import admin

from memory.admin import ReadOnlyAdmin
from pipeline.models import ConfigChange, LlmCall, PipelineConfig, Proposal


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyAdmin):
    list_display = (
        "action",
        "status",
        "fact_content",
        "review_needed",
        "model",
        "decided_by",
        "created_at",
    )
    list_filter = ("status", "action", "review_needed", "model")
    search_fields = ("fact_content", "id", "source_memory__id")


@admin.register(LlmCall)
class LlmCallAdmin(ReadOnlyAdmin):
    list_display = ("kind", "model", "provider", "duration_ms", "error", "created_at")
    list_filter = ("kind", "model", "provider")


@admin.register(ConfigChange)
class ConfigChangeAdmin(ReadOnlyAdmin):
    list_display = ("changed_by", "changed_at", "reason")


@admin.register(PipelineConfig)
class PipelineConfigAdmin(ReadOnlyAdmin):
    """Flags change on the Settings page, which previews the effect and logs the change."""

    list_display = ("__str__", "enabled", "shadow_mode", "allow_update_delete", "mutations_frozen")

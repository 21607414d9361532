"""The pipeline app: modes, model calls, extraction, decisions, review and jobs."""

from django.apps import AppConfig


class PipelineConfig(AppConfig):
    name = "pipeline"
    verbose_name = "Pipeline"
    default_auto_field = "django.db.models.BigAutoField"

"""The memory store app."""

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory store"
    default_auto_field = "django.db.models.BigAutoField"

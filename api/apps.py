"""The web layer for programs: the JSON API (and its token commands)."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "JSON API"

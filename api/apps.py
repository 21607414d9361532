"""The web layer for programs: the JSON API, the MCP server (`manage.py mcp`) and API tokens."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "JSON API"

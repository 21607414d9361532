"""The web layer for people: every HTML page, role guards, template tags and the serve command."""

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"

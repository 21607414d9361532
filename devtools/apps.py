"""Development tools (benchmark, demo data): management commands no product module imports."""

from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    name = "devtools"
    verbose_name = "Development tools"

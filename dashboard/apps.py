"""The web layer for people: every HTML page, role guards, template tags and the serve command."""

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class DashboardConfig(AppConfig):
    default = True  # the config of "dashboard"; the admin config below is named explicitly
    name = "dashboard"
    verbose_name = "Dashboard"


class CurationAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with our site, which lets the `admin` role group in."""

    default = False
    default_site = "dashboard.admin_site.CurationAdminSite"

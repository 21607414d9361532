"""The Django admin site: staff as usual, plus members of the `admin` role group (README: admins
manage users in /admin/), who see what their group's permissions allow."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from dashboard.throttle import ThrottleMessageMixin
from memory.roles import ADMIN, has_role


def may_use_admin(user) -> bool:
    return user.is_active and (user.is_staff or has_role(user, ADMIN))


class RoleAdminAuthenticationForm(ThrottleMessageMixin, AdminAuthenticationForm):
    def confirm_login_allowed(self, user):
        AuthenticationForm.confirm_login_allowed(self, user)
        if not may_use_admin(user):
            raise ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


class CurationAdminSite(admin.AdminSite):
    site_header = "Memory curation admin"
    login_form = RoleAdminAuthenticationForm

    def has_permission(self, request) -> bool:
        return may_use_admin(request.user)

"""The dashboard's own tables: failed sign-ins (throttling) and each person's display preferences."""

from django.conf import settings
from django.db import models


class LoginThrottle(models.Model):
    key = models.CharField(max_length=300, unique=True)  # "user:<name>" or "addr:<ip>"
    failures = models.PositiveIntegerField(default=0)
    last_failed_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "login_throttle"

    def __str__(self) -> str:
        return f"{self.key}: {self.failures} failure(s)"


class Preferences(models.Model):
    """How one person likes the dashboard: compact queue rows, a hint already dismissed."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dashboard_preferences"
    )
    compact_rows = models.BooleanField(default=False)
    overview_hint_dismissed = models.BooleanField(default=False)

    class Meta:
        db_table = "dashboard_preferences"

    def __str__(self) -> str:
        return f"preferences of user {self.user_id}"

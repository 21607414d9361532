"""The dashboard's only table: failed sign-ins per username and per client address (throttling)."""

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

"""Security headers on every response the app renders (dashboard, admin and /api/; static files are
served by WhiteNoise before this runs): Content-Security-Policy, Permissions-Policy, and
`Cache-Control: no-store`, because nearly every page and API answer carries memory content."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render

from memory.backend import storage_full


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Permissions-Policy", settings.PERMISSIONS_POLICY)
        # A shared or back-button cache must never keep a page of memories; a view that knows
        # its answer is safe to cache sets its own Cache-Control.
        if "Cache-Control" not in response.headers:
            response.headers["Cache-Control"] = "no-store"
        return response


class StorageFullMiddleware:
    """A page or htmx action that fails because the disk is full answers 507 with a message that
    says so (nothing was saved), instead of a generic server error."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not storage_full(exception):
            return None
        if request.path.startswith("/api/"):
            return None  # the API's own wrapper answers JSON
        return render(request, "507.html", status=507)

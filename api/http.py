"""JSON API plumbing: bearer auth, method checks, strict body parsing and JSON errors."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from api.auth import authenticate, has_scope
from memory.writes import Refused

REFUSAL_STATUS = {
    "not_found": 404,
    "reason_required": 400,
    "invalid_content": 400,
    "autonomous_force_denied": 403,
    "frozen": 409,
}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request"):
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


def error(status: int, code: str, message: str, **details: Any) -> JsonResponse:
    return JsonResponse({"error": code, "message": message, **details}, status=status)


def refusal_response(refused: Refused) -> JsonResponse:
    status = REFUSAL_STATUS.get(refused.code, 409)
    return error(status, refused.code, refused.message, **refused.details)


def _check_strings(value: Any, path: str = "body") -> None:
    """Reject NUL bytes and unpaired surrogates anywhere in the body: they cannot be stored."""
    if isinstance(value, str):
        if "\x00" in value:
            raise BadRequest(f"{path} contains a NUL byte")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(f"{path} contains an invalid unicode surrogate") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, path)
            _check_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_strings(item, f"{path}[{index}]")


def json_body(request: HttpRequest, *, allow_empty: bool = False) -> dict[str, Any]:
    """The request body as a JSON object, or BadRequest with a message saying what is wrong."""
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise BadRequest("request body is too large", 413, "too_large") from exc
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("request body must be a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("request body is not valid UTF-8") from exc
    try:
        body = json.loads(text)
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        _check_strings(body)
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply") from exc
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    return body


def optional(body: dict, key: str, kind: type | tuple[type, ...], label: str | None = None):
    """body[key] when present and of the right JSON type (bools are not numbers), else None."""
    if key not in body or body[key] is None:
        return None
    value = body[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise BadRequest(f"{key} must be {label or kinds[0].__name__}")
    if not isinstance(value, kinds):
        raise BadRequest(f"{key} must be {label or kinds[0].__name__}")
    return value


def api(methods: tuple[str, ...], scope: str | None = None, *, public: bool = False) -> Callable:
    """Decorate a JSON view: 405 for other methods, 401/403 for tokens, JSON for every error."""

    def decorate(view: Callable) -> Callable:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            if request.method not in methods:
                response = error(405, "method_not_allowed", f"{request.method} is not allowed here")
                response["Allow"] = ", ".join(methods)
                return response
            if not public:
                token = authenticate(request.headers.get("Authorization"))
                if token is None:
                    return error(
                        401,
                        "unauthorized",
                        "a valid 'Authorization: Bearer <token>' header is required",
                    )
                if not has_scope(token, scope):
                    return error(403, "forbidden", f"this token lacks the '{scope}' scope")
                request.api_token = token
            try:
                return view(request, *args, **kwargs)
            except BadRequest as exc:
                return error(exc.status, exc.code, exc.message)
            except Refused as refused:
                return refusal_response(refused)

        return wrapper

    return decorate

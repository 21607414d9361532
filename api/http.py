"""JSON API plumbing: bearer auth, method checks, strict body parsing and JSON errors."""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from api.auth import authenticate, refusal, scope_refusal
from memory.backend import storage_full
from memory.writes import Refused

REFUSAL_STATUS = {
    "not_found": 404,
    "reason_required": 400,
    "invalid_content": 400,
    "autonomous_force_denied": 403,
    "frozen": 409,
    "unknown_agent": 404,
    "empty_text": 400,
    "text_too_short": 400,
    "invalid_scope": 400,
    "reason_holds_text": 400,
    "empty_span": 400,
    "span_too_short": 400,
    "span_too_long": 400,
    "span_not_found": 400,
    "span_not_a_finding": 400,
    "invalid_span": 400,
    "invalid_kind": 400,
    "invalid_action": 400,  # approving as an action the proposal cannot take
}


API_PREFIX = "/api/"
# The largest integer a JSON number carries exactly (2^53 - 1): far below SQLite's 64-bit limit, so
# an offset plus a limit can never overflow a query.
MAX_INT = 2**53 - 1


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request"):
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


def error(status: int, code: str, message: str, **details: Any) -> JsonResponse:
    return JsonResponse({"error": code, "message": message, **details}, status=status)


STORAGE_FULL_MESSAGE = (
    "the server has no storage left: nothing of this request was stored; "
    "free disk space (or raise the database's limit) and send it again"
)


def storage_full_response() -> JsonResponse:
    """507: the disk (or the database's size limit) is full. The write failed whole (one
    transaction), so nothing of the request was stored."""
    return error(507, "storage_full", STORAGE_FULL_MESSAGE)


def refusal_response(refused: Refused) -> JsonResponse:
    status = REFUSAL_STATUS.get(refused.code, 409)
    return error(status, refused.code, refused.message, **refused.details)


def check_strings(value: Any, path: str = "body") -> None:
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
            check_strings(key, path)
            check_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_strings(item, f"{path}[{index}]")


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
        body = json.loads(
            text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        check_strings(body)
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply") from exc
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    return body


def _no_constant(name: str):
    raise BadRequest(f"numbers must be finite: {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadRequest(f"numbers must be finite: {text[:40]} is too large")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)  # over 4,300 digits raises ValueError: "not valid JSON"
    if abs(value) > MAX_INT:
        raise BadRequest(f"integers must be between -{MAX_INT} and {MAX_INT}")
    return value


def known_fields(body: dict, allowed: set[str]) -> dict:
    """`body`, refused (400) when it holds a field the endpoint does not take: a misspelt one
    (`contnet`) would otherwise be dropped without a word, and the call do something else."""
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(
            f"unknown field(s): {', '.join(unknown)}; this endpoint takes {', '.join(sorted(allowed))}"
        )
    return body


def no_misspelt_fields(body: dict, allowed: set[str]) -> dict:
    """`body`, refused (400) when a field it does not take is close to one it does (`contnet`):
    dropped, the call would do something else with a 200. Other fields are ignored, as the
    endpoints that take this have always done."""
    for name in sorted(set(body) - allowed):
        close = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.75)
        if close:
            raise BadRequest(
                f"unknown field {name}: did you mean {close[0]}? This endpoint takes "
                f"{', '.join(sorted(allowed))}"
            )
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


def bool_param(request: HttpRequest, name: str) -> bool | None:
    """A true/false query parameter (1/0, yes/no too); None when absent or empty."""
    value = request.GET.get(name)
    if value is None or value == "":
        return None
    if value.lower() in {"1", "true", "yes"}:
        return True
    if value.lower() in {"0", "false", "no"}:
        return False
    raise BadRequest(f"{name} must be true or false")


UNAUTHORIZED = "a valid 'Authorization: Bearer <token>' header is required"


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
                header = request.headers.get("Authorization")
                token = authenticate(header)
                if token is None:
                    return error(401, *refusal(header, UNAUTHORIZED))
                if (refused := scope_refusal(token, scope)) is not None:
                    return error(403, "forbidden", refused)
                request.api_token = token
            try:
                return view(request, *args, **kwargs)
            except BadRequest as exc:
                return error(exc.status, exc.code, exc.message)
            except Refused as refused:
                return refusal_response(refused)
            except (DatabaseError, OSError) as exc:
                if not storage_full(exc):
                    raise
                return storage_full_response()

        return wrapper

    return decorate


# --- JSON errors outside the views: unknown routes, uncaught 404s and 500s ----------------------


@csrf_exempt
def unknown_route(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """The last route under /api/: anything no other route matched (any method)."""
    return error(404, "not_found", f"no API route for {request.method} {request.path}")


def handler404(request: HttpRequest, exception: Exception) -> Any:
    """JSON under /api/ (the README promises JSON errors there), Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return error(404, "not_found", f"{request.path} was not found")
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> Any:
    if request.path.startswith(API_PREFIX):
        return error(500, "internal_error", "the server failed on this request; it is logged")
    return defaults.server_error(request)

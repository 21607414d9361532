"""DATABASE_URL parsing: postgres://user:pass@host:port/db?key=value into a Django DATABASES entry
for this backend (query keys go to libpq as options); ValueError names what is wrong."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit


def database_settings(url: str, **extra) -> dict:
    """DATABASES entry for postgres://user:pass@host:port/db, with the `extra` keys (CONN_MAX_AGE,
    TEST, ...) added as given."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ValueError(f"DATABASE_URL must start with postgres://, not {parts.scheme}://")
    options = dict(parse_qsl(parts.query))
    if "prepare_threshold" in options:  # psycopg takes a number, or None for never
        value = options["prepare_threshold"].strip().lower()
        if value not in {"none", "off"} and not value.isdigit():
            raise ValueError(
                f"DATABASE_URL: prepare_threshold must be a number, none or off: {value}"
            )
        options["prepare_threshold"] = None if value in {"none", "off"} else int(value)
    return {
        "ENGINE": "memory.backend.postgres",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": options.pop("host", parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
        **extra,
    }

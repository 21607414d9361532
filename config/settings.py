"""Settings: one file, driven by environment variables, with defaults that run locally on SQLite."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from memory.backend.postgres.url import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, "1" if default else "0").strip().lower() in {
        "1",
        "true",
        "yes",
        "on",
    }


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def owner_only(path: Path, mode: int) -> None:
    """chmod a file or folder we own to `mode` (0600 / 0700): it holds sessions, memories or the
    secret key, which no other local user may read. Another owner's path is left alone."""
    if os.name != "posix":
        return  # Windows: file modes do not apply; the folder's ACL decides
    try:
        if (
            path.exists()
            and path.stat().st_uid == os.getuid()
            and path.stat().st_mode & 0o777 != mode
        ):
            path.chmod(mode)
    except OSError:
        pass  # a read-only mount or a foreign file: nothing this process may change


DATA_DIR = Path(env_str("MEMORY_DATA_DIR", str(BASE_DIR / "data")))
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
owner_only(DATA_DIR, 0o700)


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, else a key generated once into data/ so sessions survive restarts."""
    if key := os.environ.get("DJANGO_SECRET_KEY"):
        return key
    path = DATA_DIR / "secret_key"
    if not path.exists():
        # Created 0600 from the start: no moment in which another local user could read it.
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:  # another process of this app is creating it right now
            fd = None
        if fd is not None:
            with os.fdopen(fd, "w") as key:
                key.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DJANGO_DEBUG")
ALLOWED_HOSTS = [
    h.strip()
    for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]
# The MCP server's own Host/Origin allow-list (DNS-rebinding protection), beside Django's: a `*`
# in DJANGO_ALLOWED_HOSTS does not reach it; only `*` here turns the check off.
MEMORY_MCP_ALLOWED_HOSTS = [
    h.strip() for h in env_str("MEMORY_MCP_ALLOWED_HOSTS", "").split(",") if h.strip()
]
# MCP sessions live in the server's memory: bounded in all, per token, and in idle time.
MEMORY_MCP_MAX_SESSIONS = env_int("MEMORY_MCP_MAX_SESSIONS", 500)
MEMORY_MCP_SESSIONS_PER_TOKEN = env_int("MEMORY_MCP_SESSIONS_PER_TOKEN", 20)
MEMORY_MCP_SESSION_IDLE_SECONDS = env_int("MEMORY_MCP_SESSION_IDLE_SECONDS", 600)

INSTALLED_APPS = [
    "dashboard.apps.CurationAdminConfig",  # django.contrib.admin with the role-aware site
    # Before django.contrib.auth, so that its createsuperuser (which refuses a token's name) wins.
    "dashboard",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_q",
    "memory",
    "pipeline",
    "api",
    "devtools",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # After WhiteNoise: static files keep their long cache headers, everything else gets no-store.
    "dashboard.security.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "dashboard.security.StorageFullMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.context.dashboard",
            ],
            "builtins": [
                "template_partials.templatetags.partials",
                "dashboard.templatetags.curation",
            ],
        },
    }
]

# Every atomic() takes SQLite's write lock at BEGIN (IMMEDIATE): with the default DEFERRED mode the
# web process and the django-q2 workers failed with "database is locked" on lock upgrades. It is
# also why no model call may run inside a transaction: it would hold the lock for seconds.
# ATOMIC_REQUESTS stays off for the same reason: views must not run inside a transaction.
SQLITE_DATABASE = {
    "ENGINE": "memory.backend",
    "NAME": env_str("MEMORY_DB_PATH", str(DATA_DIR / "memory.sqlite3")),
    "OPTIONS": {
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA cache_size = -20000; PRAGMA temp_store = MEMORY",
    },
    "TEST": {"NAME": os.environ.get("MEMORY_TEST_DB_PATH") or None},
    # Reuse connections: each new one loads sqlite-vec and, when it is the last to close,
    # checkpoints the WAL inside somebody's request.
    "CONN_MAX_AGE": env_int("MEMORY_CONN_MAX_AGE", 300),
    "CONN_HEALTH_CHECKS": True,
}


def postgres_database(url: str) -> dict:
    """DATABASES entry for a postgres:// URL (memory.backend.postgres.url parses it), with the
    connection settings of this file."""
    return database_settings(
        url,
        TEST={"NAME": os.environ.get("MEMORY_TEST_DB_NAME") or None},
        CONN_MAX_AGE=env_int("MEMORY_CONN_MAX_AGE", 300),
        CONN_HEALTH_CHECKS=True,
    )


# One setting picks the engine: DATABASE_URL=postgres://... for PostgreSQL + pgvector (several
# web and queue nodes), unset for the embedded SQLite file.
DATABASE_URL = env_str("DATABASE_URL", "").strip()
DATABASES = {"default": postgres_database(DATABASE_URL) if DATABASE_URL else SQLITE_DATABASE}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Security ---------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# DJANGO_SECURE=1 when users reach the site over HTTPS: session and CSRF cookies travel only over
# TLS, and browsers are told (HSTS, one year) never to use plain HTTP for this host again.
DJANGO_SECURE = env_bool("DJANGO_SECURE")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = DJANGO_SECURE
SECURE_HSTS_SECONDS = 31_536_000 if DJANGO_SECURE else 0
# Only behind a TLS-terminating proxy that sets X-Forwarded-Proto itself (and drops the client's).
if env_bool("DJANGO_TRUST_X_FORWARDED_PROTO"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Sent by dashboard.security on every page: the templates carry no inline script or style.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
PERMISSIONS_POLICY = (
    "accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), "
    "microphone=(), payment=(), usb=()"
)
# Failed sign-ins slow down, then lock, per username and per address (dashboard.throttle).
AUTHENTICATION_BACKENDS = ["dashboard.throttle.ThrottledModelBackend"]
# Proxies (addresses or networks) whose X-Forwarded-For is believed for the sign-in throttle's
# client address; nobody's by default, so a client cannot pick its own address.
TRUSTED_PROXIES = [p.strip() for p in env_str("DJANGO_TRUSTED_PROXIES", "").split(",") if p.strip()]


def private_sqlite_files(database: dict) -> None:
    """The SQLite file and its -wal/-shm companions owner-only. A missing file is created 0600 (an
    empty file is a new database), and SQLite gives -wal and -shm the database file's mode."""
    name = str(database["NAME"])
    if database["ENGINE"] != "memory.backend" or name.startswith(("file:", ":memory:")):
        return
    path = Path(name)
    if path.parent.is_dir() and not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for companion in (path, Path(f"{name}-wal"), Path(f"{name}-shm")):
        owner_only(companion, 0o600)


private_sqlite_files(DATABASES["default"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", "INFO")},
    # httpx logs each request's whole URL at INFO: a model server's or a webhook's user,
    # password, secret path and token with it. Our own messages name a URL without them
    # (pipeline.llm.transport.shown_url).
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpcore")},
}

# --- The memory store -------------------------------------------------------------------------
MEMORY_VECTOR_BACKEND = env_str("MEMORY_VECTOR_BACKEND", "sqlite-vec")  # or "numpy"
# KNN engine: "matrix" (one quantised matrix file per machine under DATA_DIR/vectors, kept in
# step with `embeddings`; exact re-rank) or "vec0".
MEMORY_VECTOR_SEARCH = env_str("MEMORY_VECTOR_SEARCH", "matrix")
MEMORY_MAX_CONTENT_CHARS = env_int("MEMORY_MAX_CONTENT_CHARS", 100_000)
MEMORY_RECOVER_DAYS = 30
# The largest file the dashboard's import takes (kept in the database until its run finishes);
# `manage.py import` reads files of any size from disk.
MEMORY_IMPORT_MAX_BYTES = env_int("MEMORY_IMPORT_MAX_BYTES", 100_000_000)

# --- Model servers ----------------------------------------------------------------------------
MEMORY_LLM_PROVIDER = env_str("MEMORY_LLM_PROVIDER", "auto")  # auto | ollama | openai | offline
# Embeddings may come from another server than chat; blank means the same as MEMORY_LLM_PROVIDER.
MEMORY_EMBEDDING_PROVIDER = env_str("MEMORY_EMBEDDING_PROVIDER", "")
OLLAMA_URL = env_str("OLLAMA_URL", "http://127.0.0.1:11434")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL", "https://api.openai.com/v1")
OPENAI_API_KEY = env_str("OPENAI_API_KEY", "")
MEMORY_EXTRACTION_MODEL = env_str("MEMORY_EXTRACTION_MODEL", "qwen3:4b")
MEMORY_EMBEDDING_MODEL = env_str("MEMORY_EMBEDDING_MODEL", "nomic-embed-text")
MEMORY_EMBEDDING_DIMENSIONS = env_int("MEMORY_EMBEDDING_DIMENSIONS", 768)
MEMORY_LLM_TIMEOUT_SECONDS = float(env_str("MEMORY_LLM_TIMEOUT_SECONDS", "90"))
MEMORY_EMBED_TIMEOUT_SECONDS = float(env_str("MEMORY_EMBED_TIMEOUT_SECONDS", "30"))
# Recall answers a person or an agent waiting on a web request: past this, keyword results only.
MEMORY_RECALL_EMBED_TIMEOUT_SECONDS = float(env_str("MEMORY_RECALL_EMBED_TIMEOUT_SECONDS", "2"))
# Recalls of one web process waiting on the embedding server at once; the next answers
# keyword-only at once. Keep it below WEB_THREADS: a hung server then holds only these threads.
MEMORY_RECALL_EMBED_PARALLEL = max(1, env_int("MEMORY_RECALL_EMBED_PARALLEL", 2))
MEMORY_PROBE_TIMEOUT_SECONDS = float(env_str("MEMORY_PROBE_TIMEOUT_SECONDS", "1.5"))
# Decision calls of one job run side by side, at most this many at once (a local Ollama serves
# 4 requests of one model at a time when memory allows; its queue holds the rest).
MEMORY_LLM_PARALLEL = max(1, env_int("MEMORY_LLM_PARALLEL", 4))
# Queue workers lower their CPU priority by this much (nice); 0 keeps them level with the web.
MEMORY_WORKER_NICE = max(0, min(19, env_int("MEMORY_WORKER_NICE", 10)))

# --- The staleness digest (pipeline.digest) ------------------------------------------------------
# Email goes through Django's email framework: the console by default; EMAIL_BACKEND=
# django.core.mail.backends.smtp.EmailBackend with EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER,
# EMAIL_HOST_PASSWORD and EMAIL_USE_TLS sends it over SMTP.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "memory-curation@localhost")
# Who gets the digest besides the reviewers assigned to a queue with stale proposals.
MEMORY_DIGEST_TO = [a.strip() for a in env_str("MEMORY_DIGEST_TO", "").split(",") if a.strip()]
# When set, the digest is also POSTed there as JSON: each attempt waits at most the timeout.
MEMORY_WEBHOOK_URL = env_str("MEMORY_WEBHOOK_URL", "")
MEMORY_WEBHOOK_TIMEOUT_SECONDS = float(env_str("MEMORY_WEBHOOK_TIMEOUT_SECONDS", "5"))
MEMORY_WEBHOOK_ATTEMPTS = max(1, env_int("MEMORY_WEBHOOK_ATTEMPTS", 3))
MEMORY_WEBHOOK_BACKOFF_SECONDS = float(env_str("MEMORY_WEBHOOK_BACKOFF_SECONDS", "2"))

# --- django-q2 (ORM broker on the same database, or Redis) ------------------------------------
# retry must exceed timeout, and timeout must exceed the slowest model call: otherwise a task is
# re-delivered while it still runs. Re-delivery is harmless anyway: each job starts with a claim.
Q_CLUSTER = {
    "name": "memory",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 2),
    # A job is one extraction plus up to 20 decisions; at 90 s per call that can take 30 minutes.
    "timeout": env_int("Q_TIMEOUT", 1800),
    "retry": env_int("Q_RETRY", 1860),
    "max_attempts": 1,
    "ack_failures": True,
    "poll": float(env_str("Q_POLL", "0.5")),
    "catch_up": False,
    "save_limit": 250,
    "label": "Task queue",
}
# Queue workers on several machines share one Redis list instead of polling the database.
Q_BROKER_URL = env_str("Q_BROKER_URL", "").strip()
if Q_BROKER_URL:
    Q_CLUSTER.pop("orm")
    Q_CLUSTER["redis"] = Q_BROKER_URL

"""Health: liveness for anyone (is the database answering); the full report (database and
sqlite-vec versions, model servers and their URLs, queue counts and movement, mode and the brake,
the supervised processes, the data folder's free disk and the problems found: `ok` is false when there is one) only with a
valid token. Neither ever waits on a model server."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.http import JsonResponse

from api.auth import authenticate, refusal
from api.http import api
from memory import backend, processes, queue_beat, vectors
from memory.models import Job, JobStatus
from memory.moments import iso
from pipeline.config import get_config, mode_of
from pipeline.llm import ProviderError, get_chat_client, get_embedder
from pipeline.llm.ollama import ollama_reachable
from pipeline.llm.transport import shown_url


@api(("GET",), None, public=True)
def health(request):
    header = request.headers.get("Authorization")
    if authenticate(header):
        report = health_report()
    else:
        report = liveness()
        if header:
            # A token it refused (expired, revoked, unknown) is said, but the answer stays the
            # liveness one with its status: a probe that sends a token must not fail for it.
            code, message = refusal(header, "this API token is not valid")
            report["token"] = {"ok": False, "error": code, "message": message}
    return JsonResponse(report, status=200 if report["database"]["ok"] else 503)


def liveness() -> dict:
    """What anyone may see: the service answers and so does its database."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        alive = True
    except Exception:  # the answer must still come when the database does not
        alive = False
    return {
        "ok": alive,
        "database": {"ok": alive},
        "detail": "send 'Authorization: Bearer <token>' for the full report",
    }


def health_report() -> dict:
    report: dict = {}
    try:
        report["database"] = {"ok": True, **backend.describe()}
    except Exception as exc:  # the report must still answer when the database does not
        report["database"] = {"ok": False, "error": str(exc)}
        return report
    vector = vectors.describe()
    vector["dimensions"] = settings.MEMORY_EMBEDDING_DIMENSIONS
    report["vector"] = vector
    report["llm"] = _models()
    counts = dict(
        Job.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    report["queue"] = {status: counts.get(status, 0) for status in JobStatus.values}
    try:
        config = get_config()
        report["mode"] = mode_of(config)
        # The brake reads as `shadow` in the mode words (DESIGN §5); a probe must see it as such.
        report["mutationsFrozen"] = config.mutations_frozen
    except Exception:
        report["mode"] = report["mutationsFrozen"] = None
    # The processes `manage.py serve` supervises (None under another process manager).
    report["processes"] = processes.read()
    quiet = _queue_movement(report)
    report["disk"] = _disk()
    report["problems"] = (
        _problems(report, quiet) + _model_problems(report["llm"]) + _disk_problems(report["disk"])
    )
    report["ok"] = not report["problems"]
    return report


def _queue_movement(report: dict) -> float | None:
    """Add when a worker last started or ended a task, and whether the queue is stalled (running
    no task while tasks wait: memory.queue_beat), to the report's queue; returns the seconds it
    has been quiet when stalled."""
    workers = ((report["processes"] or {}).get("children") or {}).get("workers") or {}
    supervised = (report["processes"] or {}).get("supervisorAlive")
    running_since = (
        workers.get("startedAt") if supervised and workers.get("state") == "running" else None
    )
    quiet = queue_beat.stalled(running_since, time.time())
    last = queue_beat.last_task_at()
    report["queue"]["lastTaskAt"] = (
        iso(datetime.fromtimestamp(last, UTC)) if last is not None else None
    )
    report["queue"]["stalled"] = quiet is not None
    return quiet


def _problems(report: dict, quiet: float | None) -> list[str]:
    """What is wrong though the database answers, in words: a queue that runs no task while
    tasks wait (`quiet` seconds; every process alive: a QA pass saw `ok: true` for minutes of
    it), a supervised part restarting, a supervisor record left by one that died. Each sets `ok`
    to false."""
    problems = []
    if quiet is not None:
        problems.append(
            f"the queue has run no task for {quiet:.0f} s while tasks wait (a tick is due every "
            "minute): jobs wait; restart the queue workers"
        )
    record = report["processes"] or {}
    if record and not record.get("supervisorAlive"):
        problems.append("the record of serve's processes was left by a supervisor that stopped")
    for name, child in sorted((record.get("children") or {}).items()):
        if record.get("supervisorAlive") and child.get("state") != "running":
            problems.append(f"{name} is restarting (last exit: {child.get('lastExit')})")
    return problems


# Under this, a remember or a job's write may be the one that finds the disk full.
DISK_LOW_BYTES = 256 * 2**20


def _disk() -> dict:
    """Free space where the data folder is (the SQLite database, its vectors, the queue's
    files); None when it cannot be read."""
    try:
        free = shutil.disk_usage(settings.DATA_DIR).free
    except OSError:
        free = None
    return {"freeBytes": free}


def _disk_problems(disk: dict) -> list[str]:
    free = disk["freeBytes"]
    if free is None or free >= DISK_LOW_BYTES:
        return []
    return [
        f"the data folder's disk has {free // 2**20} MiB free: writes fail with 507 "
        "storage_full once it is full; free some space"
    ]


def _model_problems(models: dict) -> list[str]:
    """A model client that cannot be made (a misspelt provider), or an Ollama named outright
    that does not answer: jobs then fail and retry until one answers. Under 'auto' an absent
    Ollama is no problem: the offline heuristics serve, as a fresh install's do."""
    problems = [
        f"the {what} client cannot be used ({models[key][len('error: ') :]}): jobs fail"
        for key, what in (("active", "chat model"), ("embeddingActive", "embedding"))
        if str(models[key]).startswith("error: ")
    ]
    named = {models["configured"].strip().lower(), models["embeddingConfigured"].strip().lower()}
    if "ollama" in named and models["ollamaReachable"] is False:
        problems.append(
            f"the model server at {models['ollamaUrl']} does not answer: jobs fail and are "
            "retried until it does"
        )
    return problems


def _models() -> dict:
    """Which provider and model serve chat and embeddings: as configured, and as resolved now.

    Never waits on a model server: Ollama's reachability comes from a probe that runs beside the
    request (see ollama_status); 'auto' stays unresolved while that probe is still out."""
    configured = settings.MEMORY_LLM_PROVIDER
    embedding_configured = settings.MEMORY_EMBEDDING_PROVIDER or configured
    named = {configured.strip().lower(), embedding_configured.strip().lower()}
    uses_ollama = named & {"auto", "ollama"}  # as the providers read it: "Ollama" is ollama
    reachable = ollama_status() if uses_ollama else None
    models = {
        "configured": configured,
        "embeddingConfigured": embedding_configured,
        "ollamaUrl": shown_url(settings.OLLAMA_URL),  # no user, password or token
        "ollamaReachable": reachable,
    }
    active, model = _resolved(
        configured, reachable, get_chat_client, settings.MEMORY_EXTRACTION_MODEL
    )
    models.update(active=active, extractionModel=model)
    active, model = _resolved(
        embedding_configured, reachable, get_embedder, settings.MEMORY_EMBEDDING_MODEL
    )
    models.update(embeddingActive=active, embeddingModel=model)
    return models


def _resolved(configured: str, reachable: bool | None, make, default_model: str) -> tuple[str, str]:
    """(provider, model) of a client; 'auto' is resolved only once the probe has answered."""
    if configured.strip().lower() == "auto" and reachable is None:
        return "unknown: the Ollama probe has not answered yet", default_model
    try:
        client = make()  # 'auto' reads the probe's cached answer: no wait here
    except ProviderError as exc:
        return f"error: {exc}", default_model
    return client.provider, client.model


# --- Ollama's reachability, probed beside the request ---------------------------------------------

PROBE_WAIT_SECONDS = 0.5
_probes: dict[str, threading.Thread] = {}
_answers: dict[str, bool] = {}
_probes_lock = threading.Lock()


def ollama_status(wait: float = PROBE_WAIT_SECONDS) -> bool | None:
    """Whether Ollama answers, or None when its probe is still out after `wait` seconds (False
    when the last probe's answer was no).

    The probe (cached by the transport for a while) runs in a daemon thread, at most one per URL:
    a hung server costs a health request `wait` seconds at most, and the answer lands in the
    cache for the next request."""
    url = settings.OLLAMA_URL
    with _probes_lock:
        probe = _probes.get(url)
        if probe is None or not probe.is_alive():
            probe = threading.Thread(
                target=_probe, args=(url,), name="health-ollama-probe", daemon=True
            )
            _probes[url] = probe
            probe.start()
    probe.join(wait)
    if probe.is_alive():
        # Still out: a server that did not answer the last probe is taken as still not
        # answering (a hung one otherwise read "unknown" to every poll a minute apart).
        return False if _answers.get(url) is False else None
    return _answers.get(url)


def _probe(url: str) -> None:
    _answers[url] = ollama_reachable(url)

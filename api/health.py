"""Health report: database, vector backend, model provider reachability and queue counts."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import Count

from memory.models import Job
from pipeline.embedders import ollama_reachable, resolve_provider


def health_report() -> dict:
    report: dict = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT sqlite_version()")
            sqlite_version = cursor.fetchone()[0]
        report["database"] = {"ok": True, "engine": "sqlite", "version": sqlite_version}
    except Exception as exc:  # the report must still answer when the database does not
        report["database"] = {"ok": False, "error": str(exc)}
        return report
    loaded = bool(getattr(connection, "sqlite_vec_loaded", False))
    vector = {"backend": settings.MEMORY_VECTOR_BACKEND, "sqliteVecLoaded": loaded}
    if loaded:
        with connection.cursor() as cursor:
            cursor.execute("SELECT vec_version()")
            vector["sqliteVecVersion"] = cursor.fetchone()[0]
    vector["dimensions"] = settings.MEMORY_EMBEDDING_DIMENSIONS
    report["vector"] = vector
    configured = settings.MEMORY_LLM_PROVIDER
    try:
        active = resolve_provider()
    except Exception as exc:
        active = f"error: {exc}"
    report["llm"] = {
        "configured": configured,
        "active": active,
        "ollamaUrl": settings.OLLAMA_URL,
        "ollamaReachable": ollama_reachable() if configured in {"auto", "ollama"} else None,
        "extractionModel": settings.MEMORY_EXTRACTION_MODEL
        if active != "offline"
        else "offline-heuristic-v1",
        "embeddingModel": settings.MEMORY_EMBEDDING_MODEL
        if active != "offline"
        else f"offline-hash-{settings.MEMORY_EMBEDDING_DIMENSIONS}",
    }
    counts = dict(
        Job.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    report["queue"] = {
        status: counts.get(status, 0)
        for status in ("pending", "leased", "completed", "dead", "cancelled")
    }
    try:
        from pipeline.config import get_config, mode_of

        report["mode"] = mode_of(get_config())
    except Exception:
        report["mode"] = None
    report["ok"] = True
    return report

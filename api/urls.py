"""Routes of the JSON API, mounted under /api/ (contract: DESIGN section 7)."""

from django.urls import path, re_path

from api import export, health, http, memories, pipeline, purge, redact

urlpatterns = [
    path("memory/remember", memories.remember, name="api-remember"),
    path("memory/recall", memories.recall, name="api-recall"),
    path("memory/<str:memory_id>", memories.memory_detail, name="api-memory"),
    path("memory/<str:memory_id>/history", memories.history, name="api-memory-history"),
    path("memory/<str:memory_id>/recover", memories.recover, name="api-memory-recover"),
    path("memory/<str:memory_id>/purge", purge.purge_memory, name="api-memory-purge"),
    path("purge", purge.purge_store, name="api-purge"),
    path("memory/<str:memory_id>/redact", redact.redact_memory, name="api-memory-redact"),
    path("health", health.health, name="api-health"),
    path("export", export.export, name="api-export"),
    path("jobs/<str:job_id>", pipeline.job_detail, name="api-job"),
    path("proposals", pipeline.proposals, name="api-proposals"),
    path("proposals/<str:proposal_id>/approve", pipeline.approve, name="api-proposal-approve"),
    path("proposals/<str:proposal_id>/reject", pipeline.reject, name="api-proposal-reject"),
    path("proposals/<str:proposal_id>/revert", pipeline.revert, name="api-proposal-revert"),
    path("proposals/<str:proposal_id>/undo", pipeline.undo, name="api-proposal-undo"),
    path("pipeline/config", pipeline.pipeline_config, name="api-pipeline-config"),
    # Last: any other path under /api/ answers a JSON 404, whatever the method (and in DEBUG).
    re_path(r"", http.unknown_route, name="api-unknown"),
]

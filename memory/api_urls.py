"""Routes of the memory JSON API."""

from django.urls import path

from memory import api

urlpatterns = [
    path("memory/remember", api.remember, name="api-remember"),
    path("memory/recall", api.recall, name="api-recall"),
    path("memory/<str:memory_id>", api.memory_detail, name="api-memory"),
    path("memory/<str:memory_id>/history", api.history, name="api-memory-history"),
    path("memory/<str:memory_id>/recover", api.recover, name="api-memory-recover"),
    path("health", api.health, name="api-health"),
]

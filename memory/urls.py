"""Dashboard routes of the memory browser."""

from django.urls import path

from memory import views

app_name = "memory"

urlpatterns = [
    path("", views.memory_list, name="list"),
    path("<str:memory_id>/", views.memory_detail, name="detail"),
    path("<str:memory_id>/action/", views.memory_action, name="action"),
]

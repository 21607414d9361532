"""Dashboard routes of the pipeline app (review, contradictions, jobs, settings, entities)."""

from django.urls import path

from pipeline import views, views_admin, views_jobs

app_name = "pipeline"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("banner/", views.banner, name="banner"),
    path("review/", views.review, name="review"),
    path("review/bulk/", views.bulk, name="bulk"),
    path("proposals/<str:proposal_id>/", views.proposal, name="proposal"),
    path("proposals/<str:proposal_id>/decide/", views.decide, name="decide"),
    path("contradictions/", views.contradictions, name="contradictions"),
    path("jobs/", views_jobs.jobs, name="jobs"),
    path("jobs/<str:job_id>/", views_jobs.job, name="job"),
    path("jobs/<str:job_id>/retry/", views_jobs.retry, name="job-retry"),
    path("settings/", views_admin.settings_page, name="settings"),
    path("entities/", views_admin.entities, name="entities"),
    path("entities/<int:entity_id>/", views_admin.entity, name="entity"),
]

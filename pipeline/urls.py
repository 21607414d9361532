"""Dashboard routes of the pipeline app (review, contradictions, jobs, settings, entities)."""

from django.urls import path

from pipeline import views, views_admin, views_analytics, views_beyond, views_jobs, views_replay

app_name = "pipeline"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("banner/", views.banner, name="banner"),
    path("review/", views.review, name="review"),
    path("review/bulk/", views.bulk, name="bulk"),
    path("proposals/<str:proposal_id>/", views.proposal, name="proposal"),
    path("proposals/<str:proposal_id>/decide/", views.decide, name="decide"),
    path("proposals/<str:proposal_id>/revert/", views_beyond.revert, name="revert"),
    path("proposals/<str:proposal_id>/revert/undo/", views_beyond.undo_revert, name="undo-revert"),
    path("proposals/<str:proposal_id>/reopen/", views_beyond.reopen, name="reopen"),
    path("proposals/<str:proposal_id>/unsuppress/", views_beyond.unsuppress, name="unsuppress"),
    path(
        "sources/<str:memory_id>/revert-derived/",
        views_beyond.revert_derived,
        name="revert-derived",
    ),
    path("contradictions/", views.contradictions, name="contradictions"),
    path("replay/", views_replay.replay, name="replay"),
    path("replay/adopt/<str:proposal_id>/", views_replay.adopt, name="replay-adopt"),
    path("jobs/", views_jobs.jobs, name="jobs"),
    path("jobs/<str:job_id>/", views_jobs.job, name="job"),
    path("jobs/<str:job_id>/retry/", views_jobs.retry, name="job-retry"),
    path("settings/", views_admin.settings_page, name="settings"),
    path("entities/", views_admin.entities, name="entities"),
    path("entities/<int:entity_id>/", views_admin.entity, name="entity"),
    path("analytics/", views_analytics.analytics_page, name="analytics"),
    path("analytics.csv", views_analytics.analytics_csv, name="analytics-csv"),
    path("triples/<int:triple_id>/decide/", views_analytics.decide_triple, name="triple-decide"),
]

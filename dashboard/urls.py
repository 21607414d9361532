"""Every dashboard page: one line per route, views grouped one module per screen."""

from django.urls import path

from dashboard.views import analytics, jobs, memories, replay, revert, review, settings

app_name = "dashboard"

urlpatterns = [
    path("", review.overview, name="overview"),
    path("banner/", review.banner, name="banner"),
    path("review/", review.review, name="review"),
    path("review/bulk/", review.bulk, name="bulk"),
    path("proposals/<str:proposal_id>/", review.proposal, name="proposal"),
    path("proposals/<str:proposal_id>/decide/", review.decide, name="decide"),
    path("proposals/<str:proposal_id>/revert/", revert.revert, name="revert"),
    path("proposals/<str:proposal_id>/revert/undo/", revert.undo_revert, name="undo-revert"),
    path("proposals/<str:proposal_id>/reopen/", revert.reopen, name="reopen"),
    path("proposals/<str:proposal_id>/unsuppress/", revert.unsuppress, name="unsuppress"),
    path("sources/<str:memory_id>/revert-derived/", revert.revert_derived, name="revert-derived"),
    path("contradictions/", review.contradictions, name="contradictions"),
    path("replay/", replay.replay, name="replay"),
    path("replay/adopt/<str:proposal_id>/", replay.adopt, name="replay-adopt"),
    path("jobs/", jobs.jobs, name="jobs"),
    path("jobs/<str:job_id>/", jobs.job, name="job"),
    path("jobs/<str:job_id>/retry/", jobs.retry, name="job-retry"),
    path("settings/", settings.settings_page, name="settings"),
    path("entities/", settings.entities, name="entities"),
    path("entities/<int:entity_id>/", settings.entity, name="entity"),
    path("analytics/", analytics.analytics_page, name="analytics"),
    path("analytics.csv", analytics.analytics_csv, name="analytics-csv"),
    path("triples/<int:triple_id>/decide/", analytics.decide_triple, name="triple-decide"),
    path("memories/", memories.memory_list, name="memories"),
    path("memories/<str:memory_id>/", memories.memory_detail, name="memory"),
    path("memories/<str:memory_id>/action/", memories.memory_action, name="memory-action"),
]

"""Every dashboard page: one line per route, one view module per screen (dashboard/views/)."""

from django.urls import path

from dashboard.views import (
    analytics,
    contradictions,
    entities,
    evaluation,
    glossary,
    jobs,
    memories,
    overview,
    prefs,
    proposal,
    proposal_actions,
    purge,
    redact,
    replay,
    review,
    settings,
    triples,
)

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("banner/", overview.banner, name="banner"),
    path("glossary/", glossary.glossary, name="glossary"),
    path("prefs/density/", prefs.density, name="prefs-density"),
    path("prefs/overview-hint/", prefs.dismiss_hint, name="prefs-dismiss-hint"),
    path("review/", review.review, name="review"),
    path("review/bulk/", review.bulk, name="bulk"),
    path("proposals/<str:proposal_id>/", proposal.proposal, name="proposal"),
    path("proposals/<str:proposal_id>/decide/", review.decide, name="decide"),
    path("proposals/<str:proposal_id>/undo/", proposal_actions.undo_decision, name="undo-decision"),
    path("proposals/<str:proposal_id>/revert/", proposal_actions.revert, name="revert"),
    path(
        "proposals/<str:proposal_id>/revert/undo/",
        proposal_actions.undo_revert,
        name="undo-revert",
    ),
    path("proposals/<str:proposal_id>/reopen/", proposal_actions.reopen, name="reopen"),
    path("proposals/<str:proposal_id>/unsuppress/", proposal_actions.unsuppress, name="unsuppress"),
    path(
        "sources/<str:memory_id>/revert-derived/",
        proposal_actions.revert_derived,
        name="revert-derived",
    ),
    path("contradictions/", contradictions.contradictions, name="contradictions"),
    path("replay/", replay.replay, name="replay"),
    path("replay/adopt/<str:proposal_id>/", replay.adopt, name="replay-adopt"),
    path("replay/runs/<str:run_id>/", replay.replay_run, name="replay-run"),
    path("jobs/", jobs.jobs, name="jobs"),
    path("jobs/<str:job_id>/", jobs.job, name="job"),
    path("jobs/<str:job_id>/retry/", jobs.retry, name="job-retry"),
    path("settings/", settings.settings_page, name="settings"),
    path("evaluation/", evaluation.evaluation, name="evaluation"),
    path("evaluation/compare/", evaluation.eval_compare, name="eval-compare"),
    path("evaluation/runs/<str:run_id>/", evaluation.eval_run, name="eval-run"),
    path(
        "evaluation/runs/<str:run_id>/cases/<str:case_id>/", evaluation.eval_case, name="eval-case"
    ),
    path("entities/", entities.entities, name="entities"),
    path("entities/<int:entity_id>/", entities.entity, name="entity"),
    path("analytics/", analytics.analytics_page, name="analytics"),
    path("analytics.csv", analytics.analytics_csv, name="analytics-csv"),
    path("triples/<int:triple_id>/decide/", triples.decide_triple, name="triple-decide"),
    path("memories/", memories.memory_list, name="memories"),
    path("memories/<str:memory_id>/", memories.memory_detail, name="memory"),
    path("memories/<str:memory_id>/action/", memories.memory_action, name="memory-action"),
    path("purge/", purge.purge_page, name="purge"),
    path("purge/receipts/<str:tombstone_id>/", purge.purge_receipt, name="purge-receipt"),
    path("redact/", redact.redact, name="redact"),
    path("redact/receipts/<str:event_id>/", redact.redaction_receipt, name="redaction-receipt"),
]

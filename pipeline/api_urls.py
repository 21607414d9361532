"""Routes of the pipeline JSON API."""

from django.urls import path

from pipeline import api

urlpatterns = [
    path("jobs/<str:job_id>", api.job_detail, name="api-job"),
    path("proposals", api.proposals, name="api-proposals"),
    path("proposals/<str:proposal_id>/approve", api.approve, name="api-proposal-approve"),
    path("proposals/<str:proposal_id>/reject", api.reject, name="api-proposal-reject"),
    path("proposals/<str:proposal_id>/revert", api.revert, name="api-proposal-revert"),
    path("pipeline/config", api.pipeline_config, name="api-pipeline-config"),
]

"""Dashboard routes of the pipeline app."""

app_name = "pipeline"
urlpatterns = []

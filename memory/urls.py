"""Dashboard routes of the memory browser."""

app_name = "memory"
urlpatterns = []

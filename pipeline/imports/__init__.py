"""Moving memories in: an import file's formats (formats.py), its runs (runs.py: a queued task
for the dashboard, in-process for `manage.py import`) and the run's row (models.py). The way out
is memory.export."""

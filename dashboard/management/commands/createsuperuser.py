"""createsuperuser: Django's command, which also refuses the name of a live API token without an
owner (memory.reviewer_names), as the admin's user forms do."""

from django.contrib.auth.management.commands import createsuperuser

from memory.reviewer_names import check_user_name


class Command(createsuperuser.Command):
    def _validate_username(self, username, verbose_field_name, database):
        # Django's own checks first (taken, blank, the field's validators), then the name rule;
        # both the prompt and --noinput report the string returned here.
        refused = super()._validate_username(username, verbose_field_name, database)
        if refused:
            return refused
        try:
            check_user_name(username)
        except ValueError as taken_by_token:
            return f"Error: {taken_by_token}"
        return None

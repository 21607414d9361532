"""revoke_api_token NAME_OR_PREFIX: revoke one token at once (every request with it gets 401)."""

from django.core.management.base import BaseCommand, CommandError

from api.auth import revoke


class Command(BaseCommand):
    help = (
        "Revoke the API token with this name, or with this prefix (mcd_ and the characters the "
        "admin's token list shows). Refuses, listing them, when several tokens match."
    )

    def add_arguments(self, parser):
        parser.add_argument("name_or_prefix")

    def handle(self, *args, name_or_prefix, **options):
        try:
            token = revoke(name_or_prefix)
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Revoked token '{token.name}' ({token.prefix}…, agent '{token.agent_id}'): "
            "requests with it now get 401."
        )

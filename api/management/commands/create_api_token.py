"""create_api_token NAME [--agent ID] [--multi-agent] [--scopes ingest,review,admin]: prints the
token once."""

from django.core.management.base import BaseCommand, CommandError

from api.auth import create_token


class Command(BaseCommand):
    help = "Create an API token. The token is printed once, alone on the last line; only its hash is kept."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--agent", default="default", help="the agent the token belongs to (reads and writes)"
        )
        parser.add_argument(
            "--multi-agent",
            action="store_true",
            help="also let it read and write other agents' memories (agentId in a request)",
        )
        parser.add_argument(
            "--scopes", default="ingest", help="comma-separated: ingest,review,admin"
        )

    def handle(self, *args, name, agent, multi_agent, scopes, **options):
        try:
            row, plain = create_token(
                name,
                agent_id=agent,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                multi_agent=multi_agent,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        reach = " (and, multi-agent, any other agent)" if row.multi_agent else ""
        self.stdout.write(
            f"Created token '{row.name}' for agent '{row.agent_id}'{reach} "
            f"with scopes {','.join(row.scopes)}."
        )
        self.stdout.write("Store it now: it cannot be shown again.")
        self.stdout.write(plain)

"""create_api_token NAME [--agent ID] [--multi-agent] [--scopes ingest,review,assert,admin |
--read-only] [--expires DATE | --expires-in-days N] [--owner USER]: prints the token once."""

from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from api.auth import create_token, when


def parse_expiry(text: str) -> datetime:
    """`2027-01-31` (that day's 00:00 UTC) or an ISO date-time (UTC unless it names an offset)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise CommandError(
            f"--expires {text!r} is not a date: write 2027-01-31 or 2027-01-31T18:00+01:00"
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def held_by(row) -> str:
    """What the token's reviews count as: its owner's, or (a review token without one) its own."""
    if row.owner:
        return f", held by {row.owner} (its reviews count as theirs)"
    if "review" in row.scopes:
        return ", held by no dashboard user (its reviews count as the token's own: see --owner)"
    return ""


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
        access = parser.add_mutually_exclusive_group()
        # No default here: argparse lets a value equal to the default pass beside --read-only.
        access.add_argument("--scopes", help="comma-separated: ingest,review,assert,admin (ingest)")
        access.add_argument(
            "--read-only",
            action="store_true",
            help="no scope: the token recalls and reads its agent's memories, and writes nothing",
        )
        parser.add_argument(
            "--owner",
            metavar="USER",
            help="the dashboard user who holds it: its reviews count as theirs (two-person rule)",
        )
        expiry = parser.add_mutually_exclusive_group()
        expiry.add_argument(
            "--expires",
            metavar="DATE",
            help="refuse the token from then on: 2027-01-31 (00:00 UTC) or an ISO date-time",
        )
        expiry.add_argument(
            "--expires-in-days", type=int, metavar="N", help="refuse the token N days from now"
        )

    def handle(
        self,
        *args,
        name,
        agent,
        multi_agent,
        scopes,
        read_only,
        expires,
        expires_in_days,
        owner=None,
        **options,
    ):
        expires_at = parse_expiry(expires) if expires else None
        if expires_in_days is not None:
            if expires_in_days < 1:
                raise CommandError("--expires-in-days must be 1 or more")
            expires_at = timezone.now() + timedelta(days=expires_in_days)
        scopes = "ingest" if scopes is None else scopes
        chosen = [] if read_only else [s.strip() for s in scopes.split(",") if s.strip()]
        if not chosen and not read_only:
            # An empty list by mistake must not make a token of another kind: ask for it by name.
            raise CommandError(
                "--scopes names no scope: give one or more of ingest, review, assert, admin, "
                "or --read-only for a token that only reads"
            )
        try:
            row, plain = create_token(
                name,
                agent_id=agent,
                scopes=chosen,
                multi_agent=multi_agent,
                expires_at=expires_at,
                owner=owner,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        reach = " (and, multi-agent, any other agent)" if row.multi_agent else ""
        until = f", expiring at {when(row.expires_at)}" if row.expires_at else ", never expiring"
        self.stdout.write(
            f"Created token '{row.name}' for agent '{row.agent_id}'{reach} "
            f"with {'scopes ' + ','.join(row.scopes) if row.scopes else 'no scope (read only)'}"
            f"{until}{held_by(row)}."
        )
        self.stdout.write("Store it now: it cannot be shown again.")
        self.stdout.write(plain)

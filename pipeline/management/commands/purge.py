"""purge (--memory ID [--lineage] | --agent A | --text T) --reason R [--dry-run] [--by NAME]:
erase memories for good and print the erasure receipt as JSON (pipeline.purge). Exits with an
error when the verification found copies (the purge is reported as failed, never as done)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from memory.models import ActorType
from memory.writes import Actor, Refused
from pipeline import review
from pipeline.management.who import command_user
from pipeline.purge import Request, Scope


class Command(BaseCommand):
    help = (
        "Purge memories for good (one, a raw memory with its lineage, every memory of an agent, "
        "or every memory holding a text) and print the erasure receipt as JSON."
    )

    def add_arguments(self, parser):
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--memory", help="a memory's id")
        what.add_argument("--agent", help="every memory of this agent")
        what.add_argument("--text", help="every memory holding this text, exactly as written")
        parser.add_argument(
            "--lineage", action="store_true", help="with --memory: everything derived from it too"
        )
        parser.add_argument("--reason", required=True, help="why (kept with the tombstone)")
        parser.add_argument(
            "--dry-run", action="store_true", help="write nothing; show what would go"
        )
        parser.add_argument("--by", help="who purges (default: the operating system's user)")

    def handle(self, *args, **options):
        if options["lineage"] and not options["memory"]:
            raise CommandError("--lineage goes with --memory")
        if options["memory"]:
            scope = Scope.LINEAGE if options["lineage"] else Scope.MEMORY
            request = Request(scope, memory_id=options["memory"])
        elif options["agent"] is not None:
            request = Request(Scope.AGENT, agent=options["agent"])
        else:
            request = Request(Scope.TEXT, text=options["text"])
        by = options["by"] or command_user("purge")
        try:
            receipt = review.purge(
                request,
                reason=options["reason"],
                actor=Actor(by, ActorType.OPERATOR),
                dry_run=options["dry_run"],
            )
        except Refused as refused:
            raise CommandError(f"{refused.code}: {refused.message}") from None
        self.stdout.write(json.dumps(receipt.as_json(), indent=2))
        if not receipt.dry_run and not receipt.verified:
            raise CommandError(
                "the purge failed its verification: copies were found (see `found` above)"
            )

"""export [--agent A] [--include-history] [--include-deleted] > store.jsonl: the store as JSON
Lines (memory.export), written line by line as the pages are read, so its memory use does not
grow with the store. The count goes to stderr; stdout holds only the file."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory import export


class Command(BaseCommand):
    help = (
        "Write every memory (of one agent with --agent) as JSON Lines to stdout: a header line "
        f"({export.FORMAT}, version {export.VERSION}), then one object per memory."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="only this agent's memories")
        parser.add_argument(
            "--include-history", action="store_true", help="each memory's audit trail too"
        )
        parser.add_argument("--include-deleted", action="store_true", help="forgotten memories too")
        parser.add_argument("--output", help="write to this file instead of stdout")

    def handle(self, *args, **options):
        agent = options["agent"]
        if agent is not None and not agent.strip():
            raise CommandError("--agent needs an agent id")
        lines = export.lines(
            agent=agent,
            include_history=options["include_history"],
            include_deleted=options["include_deleted"],
        )
        count = -1  # the header is not a memory
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8", newline="\n") as out:
                for line in lines:
                    out.write(line)
                    count += 1
        else:
            for line in lines:
                self.stdout.write(line, ending="")
                count += 1
            self.stdout.flush()
        self.stderr.write(f"Exported {count} memor{'y' if count == 1 else 'ies'}.")

"""import FILE [--agent A] [--process] [--format F]: import memories from our export, mem0's
get_all JSON, or plain text / Markdown, in this process (pipeline.imports.runs). Refused lines
are printed as they are met; the run ends with its per-line report (imported / deduplicated /
refused). With -v 2 every item's outcome is printed too."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.imported import DEDUPED, Outcome
from pipeline.imports import fields, formats, runs
from pipeline.imports.formats import FileRefused, Refusal
from pipeline.imports.report import kept_stored_text, lines


class Command(BaseCommand):
    help = (
        "Import memories from a file: our export (JSON Lines), mem0's get_all JSON, or plain "
        "text / Markdown (one memory per paragraph or list item). Raw-first and idempotent: "
        "what the store already has is deduplicated."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the file to import")
        parser.add_argument("--agent", default="", help="import every memory for this agent")
        parser.add_argument(
            "--process",
            action="store_true",
            help="queue an extraction job for each imported memory (off by default: imported "
            "memories are not re-decided)",
        )
        parser.add_argument(
            "--format",
            choices=["auto", *formats.FORMATS],
            default="auto",
            help="the file's format; auto (default) tells from its first line",
        )

    def handle(self, *args, **options):
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path} is not a file")
        agent = options["agent"].strip()
        if len(agent) > fields.NAME_CHARS:  # as the Data page's form and the API
            raise CommandError(f"--agent must be at most {fields.NAME_CHARS} characters")
        self.verbose = options["verbosity"] >= 2
        fmt = "" if options["format"] == "auto" else options["format"]
        try:
            run = runs.import_file(
                path,
                agent=agent,
                process=options["process"],
                fmt=fmt,
                on_batch=self._batch,
            )
        except FileRefused as exc:
            raise CommandError(f"{path.name} was not imported: {exc}") from None
        self._report(run)

    def _batch(self, handled: list[Outcome | Refusal], progress) -> None:
        for item in handled:
            if isinstance(item, Refusal):
                self.stderr.write(f"line {item.line}: refused: {item.field}: {item.message}")
            elif self.verbose and item.relation:
                verb = "already stored:" if item.status == DEDUPED else "imported"
                self.stdout.write(f"line {item.line}: {verb} relation {item.relation}")
            elif self.verbose:
                verb = (
                    "deduplicated, the same memory as" if item.status == DEDUPED else "imported as"
                )
                kept = " (its stored text differs: the file's was not taken)"
                self.stdout.write(
                    f"line {item.line}: {verb} {item.memory_id}{kept if item.text_differs else ''}"
                )

    def _report(self, run) -> None:
        report = run.report or {}
        described = formats.FORMATS.get(run.format, run.format)
        self.stdout.write(
            f"{run.file_name} ({described}): {run.imported} imported, {run.deduped} "
            f"deduplicated, {run.refused} refused of {run.handled} item"
            f"{'' if run.handled == 1 else 's'}"
            + (" (extraction jobs queued)." if run.process and run.imported else ".")
        )
        unlisted = report.get("unlisted", {})
        for label, key in (("Imported", "imported"), ("Deduplicated", "deduped")):
            if report.get(key):
                self.stdout.write(f"{label}: {lines(report[key], unlisted.get(key, 0))}")
        if kept := kept_stored_text(report):
            self.stdout.write(
                f"Stored text kept: {kept} (memories already here by their id, with another "
                "text; the file's was not taken)"
            )
        refusals = report.get("refused") or []
        if refusals:
            self.stdout.write("Refused:")
            for refusal in refusals:
                self.stdout.write(
                    f"  line {refusal['line']}: {refusal['field']}: {refusal['message']}"
                )
            if run.refused > len(refusals):
                self.stdout.write(f"  … and {run.refused - len(refusals)} more")

"""eval [--set FILE] [--provider P] [--model M] [--json OUT] [--concurrency N] [--limit N]
[--category C]: score the model's decisions and extractions on a labelled set, never touching the
store. eval export-reviewed [--since DATE] [--agent A]: reviewers' verdicts as a set, on stdout."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime, time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from pipeline.eval import cases as case_format
from pipeline.eval import report as reports
from pipeline.eval.reviewed import export_reviewed
from pipeline.eval.run import run_cases
from pipeline.llm import ProviderError, get_chat_client

EXPORT = "export-reviewed"
BAR = 30
# Each option's flag, and the options each command takes.
OPTIONS = {
    "case_file": "--set",
    "provider": "--provider",
    "model": "--model",
    "json_out": "--json",
    "concurrency": "--concurrency",
    "limit": "--limit",
    "category": "--category",
    "since": "--since",
    "agent": "--agent",
}
EXPORT_OPTIONS = {"since", "agent"}
EVAL_OPTIONS = set(OPTIONS) - EXPORT_OPTIONS


def _since(value: str | None) -> datetime | None:
    if not value:
        return None
    try:  # a well-formed day that is no day (2026-13-45) raises instead of answering None
        moment = parse_datetime(value)
        day = parse_date(value) if moment is None else None
    except ValueError:
        moment = day = None
    if moment is None:
        if day is None:
            raise CommandError(f"--since expects a date (2026-01-31) or a datetime, got {value!r}")
        moment = datetime.combine(day, time.min)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _write_atomically(path: str, text: str) -> None:
    """The report appears whole or not at all."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class Progress:
    """A progress bar on stderr, redrawn at most once per percent."""

    def __init__(self, stream):
        self.stream, self.shown = stream, -1  # a management command's OutputWrapper

    def __call__(self, done: int, total: int) -> None:
        percent = done * 100 // total if total else 100
        if percent == self.shown and done != total:
            return
        self.shown = percent
        filled = BAR * done // total if total else BAR
        bar = f"\r[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} cases"
        self.stream.write(bar, ending="\n" if done == total else "")
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "Evaluate the configured model's decisions and extractions on a labelled set (default: "
        "the shipped set) through the job's own code, writing nothing to the store; or, with "
        f"'{EXPORT}', write the reviewers' verdicts as a set of decision cases to stdout."
    )

    def add_arguments(self, parser):
        parser.add_argument("command", nargs="?", choices=[EXPORT], help="export reviewed cases")
        parser.add_argument("--set", dest="case_file", help="a JSON Lines case file")
        parser.add_argument("--provider", help="the chat provider (default MEMORY_LLM_PROVIDER)")
        parser.add_argument("--model", help="the chat model (default MEMORY_EXTRACTION_MODEL)")
        parser.add_argument("--json", dest="json_out", metavar="OUT", help="write the report")
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="model calls at a time (default MEMORY_LLM_PARALLEL)",
        )
        parser.add_argument("--limit", type=int, help="run only the first N cases")
        parser.add_argument("--category", help="run only the cases of this category")
        parser.add_argument("--since", help=f"{EXPORT}: proposals decided on or after DATE")
        parser.add_argument("--agent", help=f"{EXPORT}: one agent's proposals only")

    def handle(self, *args, command, **options):
        # An option the chosen command does not take is refused, not ignored (a QA pass ran
        # `eval --since ...` and got the shipped set's score as if it were the verdicts').
        takes = EXPORT_OPTIONS if command == EXPORT else EVAL_OPTIONS
        given = [name for name in OPTIONS if name not in takes and options.get(name) is not None]
        if given:
            flags = ", ".join(OPTIONS[name] for name in given)
            doing = (
                f"'{EXPORT}'" if command == EXPORT else "an evaluation (without export-reviewed)"
            )
            raise CommandError(f"{flags}: not an option of {doing}")
        if command == EXPORT:
            return self._export(options["since"], options["agent"])
        return self._evaluate(**options)

    def _export(self, since: str | None, agent: str | None) -> None:
        export = export_reviewed(since=_since(since), agent=agent)
        self.stdout.write(
            f"# {len(export.cases)} reviewed decisions exported "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; run: manage.py eval --set FILE"
        )
        for case in export.cases:
            self.stdout.write(json.dumps(case.as_json(), ensure_ascii=False))
        for note in export.notes:
            self.stderr.write(note)
        self.stderr.write(
            f"{len(export.cases)} cases ({export.from_call_log} checked against the call log)"
        )

    def _evaluate(
        self, *, case_file, provider, model, json_out, concurrency, limit, category, **_
    ) -> None:
        if limit is not None and limit < 1:
            raise CommandError("--limit must be 1 or more")
        concurrency = settings.MEMORY_LLM_PARALLEL if concurrency is None else concurrency
        if concurrency < 1:
            raise CommandError("--concurrency must be 1 or more")
        if json_out and json_out != "-" and not Path(json_out).resolve().parent.is_dir():
            raise CommandError(f"--json: the folder of {json_out} does not exist")
        if json_out and json_out != "-" and Path(json_out).is_dir():  # found after every call
            raise CommandError(f"--json: {json_out} is a folder; name the report's file")
        try:
            case_set = case_format.load(case_file).select(category=category, limit=limit)
        except case_format.CaseError as exc:
            raise CommandError(str(exc)) from exc
        if not case_set.cases:
            raise CommandError(f"no case of category {category!r} in the set")
        try:
            client = get_chat_client(provider, model)
        except ProviderError as exc:
            raise CommandError(str(exc)) from exc
        outcomes = run_cases(
            client, case_set.cases, concurrency=concurrency, progress=Progress(self.stderr)
        )
        failed = reports.provider_errors(outcomes)
        asked = sum(1 for o in outcomes if o.call is not None or o.error)
        if asked and failed == asked:
            first = next(o.error for o in outcomes if o.error)
            raise CommandError(f"the model server answered none of the {asked} calls: {first}")
        if failed:
            self.stderr.write(f"warning: {failed} model calls failed; their cases count as wrong")
        report = reports.build_report(case_set, client.provider, client.model, outcomes)
        text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        table = reports.table(report)
        if json_out == "-":
            self.stdout.write(text, ending="")
            self.stderr.write(table)
            return
        if json_out:
            _write_atomically(json_out, text)
        self.stdout.write(table)
        if json_out:
            self.stdout.write(f"Report written to {json_out}")

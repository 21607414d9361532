"""pipeline_config [--set key=value ...] [--reason TEXT] [--by NAME] [--json]: show or change the
pipeline flags; a change is logged as by NAME (default: the operating system's user)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from pipeline.config import FIELDS, ConfigError, config_json, flatten, from_text, get_config
from pipeline.management.who import command_user
from pipeline.review import update_config


def _show(value) -> str:
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


class Command(BaseCommand):
    help = (
        "Show the pipeline settings and the effective mode, or change them with "
        "--set key=value (dotted keys for nested settings, e.g. search.alpha=0.5) and a --reason."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--set",
            dest="assignments",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"change one setting (repeatable); keys: {', '.join(FIELDS)}",
        )
        parser.add_argument("--reason", default=None, help="why (required with --set; audited)")
        parser.add_argument("--by", help="who changes it (default: the operating system's user)")
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="print the config as JSON"
        )

    def handle(self, *args, assignments, reason, as_json, by=None, **options):
        if assignments:
            # Who, as the change log records it (a QA pass: every change read "manage.py").
            by = (by or "").strip() or command_user("pipeline_config")
            if not reason or not reason.strip():
                raise CommandError("--reason is required with --set: every change is audited")
            changes = {}
            for assignment in assignments:
                key, sep, value = assignment.partition("=")
                if not sep or not key.strip():
                    raise CommandError(f"--set expects key=value, got {assignment!r}")
                try:
                    changes[key.strip()] = from_text(key.strip(), value)
                except ConfigError as exc:
                    raise CommandError(str(exc)) from exc
            before = config_json(get_config())
            try:
                after = update_config(changes, changed_by=by, reason=reason)
            except ConfigError as exc:
                raise CommandError(str(exc)) from exc
            if not as_json:
                self.stdout.write(f"Saved. Mode: {before['mode']} -> {after['mode']}.")
        config = config_json(get_config())
        if as_json:
            self.stdout.write(json.dumps(config, indent=2, sort_keys=True))
            return
        flat = flatten(config)
        width = max(len(key) for key in FIELDS)
        for key in FIELDS:
            self.stdout.write(f"{key.ljust(width)}  {_show(flat[key])}")
        self.stdout.write(f"{'mode'.ljust(width)}  {config['mode']}")

"""seed_demo [--if-empty] [--provider P] [--with-demo-users]: fill the store with a demo team's memories."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db.models import Count

from dashboard.roles import REVIEWER, VIEWER, ensure_role_groups
from devtools.demo_data import BASE_COUNT, DEMO_ENTITIES, DEMO_MEMORIES
from memory.models import Memory
from memory.writes import Actor, Triple, remember
from pipeline.config import get_config, update_config
from pipeline.models import Proposal
from pipeline.tasks import process_pending

DEMO_USERS = ((REVIEWER, "demo-reviewer"), (VIEWER, "demo-viewer"))


class Command(BaseCommand):
    help = "Seed about 100 demo memories of a fictional team so the review queue has work in it."

    def add_arguments(self, parser):
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing when any memory exists"
        )
        parser.add_argument(
            "--provider",
            default="offline",
            choices=("offline", "auto", "ollama", "openai"),
            help="model provider for this run only (default: offline, deterministic and fast)",
        )
        parser.add_argument(
            "--with-demo-users",
            action="store_true",
            help='also create users "reviewer" and "viewer" (passwords demo-reviewer / demo-viewer)',
        )

    def handle(self, *args, if_empty, provider, with_demo_users, **options):
        if if_empty and Memory.objects.exists():
            self.stdout.write("Memories already exist; seed_demo --if-empty did nothing.")
            return
        ensure_role_groups()
        if with_demo_users:
            self._demo_users()
        previous_provider = settings.MEMORY_LLM_PROVIDER
        settings.MEMORY_LLM_PROVIDER = provider
        # django-q logs one "Enqueued" line per remembered memory; the summary says enough.
        queue_log = logging.getLogger("django-q")
        previous_level = queue_log.level
        queue_log.setLevel(logging.WARNING)
        try:
            self._seed()
        finally:
            settings.MEMORY_LLM_PROVIDER = previous_provider
            queue_log.setLevel(previous_level)

    def _seed(self) -> None:
        if not get_config().enabled:
            self.stderr.write(
                "The pipeline is disabled (enabled=false): demo memories will stay unprocessed."
            )
        base, later = DEMO_MEMORIES[:BASE_COUNT], DEMO_MEMORIES[BASE_COUNT:]
        # Controlled-write before the base memories are written, so a running worker cluster that
        # picks their jobs up also applies the clean ADDs.
        update_config(
            {"shadowMode": False},
            changed_by="seed_demo",
            reason="demo: apply clean facts from the base memories",
        )
        try:
            created, deduped = self._remember(base, offset=0)
            first = process_pending()
        finally:
            update_config(
                {"shadowMode": True},
                changed_by="seed_demo",
                reason="demo: back to shadow so new proposals wait for review",
            )
        # One at a time, as a live worker would: a statement written but not yet processed has no
        # vector, and keyword-only hits outrank embedded ones in hybrid search, so a batch would let
        # unprocessed statements crowd the memories they contradict out of each other's candidates.
        more_created = more_deduped = 0
        second: dict[str, int] = {}
        for index, item in enumerate(later, start=BASE_COUNT):
            one_created, one_deduped = self._remember([item], offset=index)
            more_created, more_deduped = more_created + one_created, more_deduped + one_deduped
            for status, n in process_pending().items():
                second[status] = second.get(status, 0) + n
        self._review_history()
        self._summary(created + more_created, deduped + more_deduped, first, second)

    def _review_history(self) -> None:
        """A few reviewer decisions, a revert and a suppressed repeat, so every screen has data."""
        from memory.writes import Actor, Refused
        from pipeline import apply, review
        from pipeline.models import Proposal

        rita, ada = Actor("rita", "operator"), Actor("ada", "operator")
        adds = list(
            Proposal.objects.filter(status="pending", action="add", safety_kinds="").order_by(
                "created_at"
            )
        )
        try:
            if adds:
                review.approve(adds[0].id, rita, note="matches the team wiki")
            if len(adds) > 1:
                edited = adds[1].fact_content.rstrip(".") + " (confirmed in standup)."
                review.approve(adds[1].id, ada, content=edited, note="added where it was confirmed")
            if len(adds) > 2:
                review.reject(adds[2].id, rita, reason="not durable knowledge")
            # "Keep existing" on one contradiction: when an agent repeats the statement later,
            # the identical UPDATE is suppressed instead of queued again.
            flagged = Proposal.objects.filter(status="pending", review_needed=True).select_related(
                "source_memory"
            )
            # A fact that is its whole raw memory would come back as "identical", not as a repeat.
            contradiction = next(
                (
                    p
                    for p in flagged.order_by("created_at")
                    if p.fact_content != p.source_memory.content
                ),
                None,
            )
            rejected = None
            if contradiction is not None:
                rejected = review.reject(
                    contradiction.id, ada, reason="keep existing: the wiki is right"
                )
            auto = Proposal.objects.filter(
                status="applied", decided_by="pipeline-v2", action="add"
            ).first()
            if auto is not None:
                apply.revert(auto.id, reviewer=ada, reason="demo: this automatic ADD was wrong")
            if rejected is not None:
                # The same fact arriving again is suppressed instead of queued a second time.
                self._remember(
                    [
                        {
                            "content": f"{rejected.fact_content} Someone repeated it in chat.",
                            "who": "slack-bot",
                            "type": "fact",
                            "agentId": rejected.agent_id,
                            "tags": [],
                            "pinned": False,
                        }
                    ],
                    offset=len(DEMO_MEMORIES),
                )
                process_pending()
        except Refused as refused:
            self.stderr.write(f"Demo review history stopped early: {refused.message}")
        self._recorded_reply()

    def _recorded_reply(self) -> None:
        """One raw memory processed with a recorded model reply that adds an unsupported fact."""
        from devtools.demo_data import RECORDED_EXTRACTION, RECORDED_MEMORY, RECORDED_MODEL
        from memory.writes import Actor, remember
        from pipeline import apply, tasks
        from pipeline.llm import OfflineChat

        class RecordedChat(OfflineChat):
            model = RECORDED_MODEL

            def extract(self, text):
                call = super().extract(text)
                call.raw_response = RECORDED_EXTRACTION
                return call

        result = remember(RECORDED_MEMORY, actor=Actor("standup-notes", "agent"), why="demo")
        claim = apply.claim_job(result.job.id) if result.job else None
        if claim is not None:
            calls = []
            apply.record_job(tasks.compute(claim, calls, client=RecordedChat()))

    def _remember(self, items: list[dict], *, offset: int) -> tuple[int, int]:
        created = deduped = 0
        for index, item in enumerate(items, start=offset):
            triples = [
                Triple(
                    t["source"],
                    t["relationship"],
                    t["target"],
                    source_type=t["sourceType"],
                    target_type=t["targetType"],
                    confidence=0.9,
                )
                for t in DEMO_ENTITIES.get(index, [])
            ]
            result = remember(
                item["content"],
                actor=Actor(item["who"], "agent"),
                who=item["who"],
                why="demo",
                type=item["type"],
                agent_id=item["agentId"],
                pinned=item["pinned"],
                tags=item["tags"],
                triples=triples or None,
            )
            if result.deduped:
                deduped += 1
            else:
                created += 1
        return created, deduped

    def _demo_users(self) -> None:
        users = get_user_model()
        for name, password in DEMO_USERS:
            if users.objects.filter(username=name).exists():
                self.stdout.write(f'User "{name}" already exists; left unchanged.')
                continue
            user = users.objects.create_user(username=name, password=password)
            user.groups.add(Group.objects.get(name=name))
            self.stdout.write(f'Created demo user "{name}" (group {name}, password "{password}").')

    def _summary(self, created: int, deduped: int, first: dict, second: dict) -> None:
        def counts(values: dict) -> str:
            return ", ".join(f"{n} {key}" for key, n in sorted(values.items())) or "none"

        live = Memory.objects.filter(is_deleted=False)
        derived = live.filter(source_type="pipeline-v2").count()
        by_status = dict(
            Proposal.objects.values_list("status").annotate(n=Count("id")).order_by("status")
        )
        review = Proposal.objects.filter(review_needed=True)
        self.stdout.write(
            f"Remembered {created} demo memories ({deduped} exact duplicates folded into existing ones)."
        )
        self.stdout.write(f"Jobs, base pass (controlled-write): {counts(first)}.")
        self.stdout.write(f"Jobs, second pass (shadow): {counts(second)}.")
        self.stdout.write(
            f"Live memories: {live.count()} ({derived} extracted facts applied by the pipeline)."
        )
        self.stdout.write(f"Proposals by status: {counts(by_status)}.")
        self.stdout.write(
            f"Review needed (contradictions): {review.count()}, "
            f"{review.filter(status='pending').count()} of them pending."
        )

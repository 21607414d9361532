"""seed_demo [--if-empty] [--provider P] [--with-demo-users]: fill the store with a demo team's memories."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db.models import Count, F
from django.utils import timezone

from dashboard.roles import ensure_role_groups
from devtools.demo_data import BASE_COUNT, DEMO_ENTITIES, DEMO_MEMORIES
from memory import queue
from memory.models import DERIVED_SOURCE_TYPE, Job, JobStatus, Memory
from memory.roles import REVIEWER, VIEWER
from memory.writes import Actor, Triple, remember
from pipeline.config import PIPELINE_NAME, get_config
from pipeline.llm import PROVIDERS
from pipeline.models import Proposal
from pipeline.tasks import process_pending
from pipeline.writes.config import update_config

DEMO_USERS = ((REVIEWER, "demo-reviewer"), (VIEWER, "demo-viewer"))
SPREAD_DAYS = 35  # the demo's history covers the last five weeks
REJECT_REASONS = (
    "too vague to act on",
    "not durable knowledge",
    "needs the sentence before it",
)
# A fact with these in its first words means nothing alone ("Rotate it after the demo."):
# the demo's reviewers reject it.
VAGUE_WORDS = frozenset({"it", "its", "then", "they", "them", "this", "that", "he", "she"})


class Command(BaseCommand):
    help = "Seed about 100 demo memories of a fictional team so the review queue has work in it."

    def add_arguments(self, parser):
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing when any memory exists"
        )
        parser.add_argument(
            "--provider",
            default="offline",
            choices=("auto", *PROVIDERS),
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
            if Memory.objects.exists():
                # Replaying the demo on a live store would flip shadow mode under running workers,
                # add decisions as the demo reviewers and revert one of their own ADDs.
                self.stdout.write(
                    "Memories already exist: created the demo users only. The demo memories and "
                    "their history are seeded into an empty store."
                )
                return
        previous_providers = settings.MEMORY_LLM_PROVIDER, settings.MEMORY_EMBEDDING_PROVIDER
        # The run's provider serves embeddings too (blank: same as chat), so offline stays offline.
        settings.MEMORY_LLM_PROVIDER, settings.MEMORY_EMBEDDING_PROVIDER = provider, ""
        # django-q logs one "Enqueued" line per hand-off; the summary says enough.
        queue_log = logging.getLogger("django-q")
        previous_level = queue_log.level
        queue_log.setLevel(logging.WARNING)
        try:
            # The demo's jobs run here, so they are not queued as well: the workers' first start
            # would run ~100 tasks that find their job completed. What is left pending (a disabled
            # pipeline, a failed attempt) is handed off at the end, as remember would have done.
            with queue.held() as job_ids:
                self._seed()
            for job_id in Job.objects.filter(id__in=job_ids, status=JobStatus.PENDING).values_list(
                "id", flat=True
            ):
                queue.hand_off(job_id)
        finally:
            settings.MEMORY_LLM_PROVIDER, settings.MEMORY_EMBEDDING_PROVIDER = previous_providers
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
        self._more_decisions()
        self._spread_over_weeks()
        self._summary(created + more_created, deduped + more_deduped, first, second)

    def _review_history(self) -> None:
        """A few reviewer decisions, a revert and a suppressed repeat, so every screen has data."""
        from memory.writes import Actor, Refused
        from pipeline import review
        from pipeline.models import Proposal
        from pipeline.writes import review as review_writes

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
                status="applied", decided_by=PIPELINE_NAME, action="add"
            ).first()
            if auto is not None:
                review_writes.revert(
                    auto.id, reviewer=ada, reason="demo: this automatic ADD was wrong"
                )
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

    def _more_decisions(self) -> None:
        """A realistic mix for the analytics: several reviewers approve most clean ADDs, edit a
        few and reject some, and leave the rest (and every contradiction) waiting."""
        from memory.writes import Actor, Refused
        from pipeline import review

        reviewers = [Actor(name, "operator") for name in ("rita", "ada", "sam")]
        adds = list(
            Proposal.objects.filter(
                status="pending", action="add", safety_kinds="", review_needed=False
            ).order_by("created_at", "position")
        )
        # Leave about a third waiting, so the queue still has ADDs in it.
        for index, proposal in enumerate(adds[: len(adds) * 2 // 3]):
            reviewer = reviewers[index % len(reviewers)]
            vague = bool(VAGUE_WORDS & {w.lower() for w in proposal.fact_content.split()[:3]})
            try:
                if vague or proposal.fact_confidence < 0.7:
                    review.reject(proposal.id, reviewer, reason=REJECT_REASONS[index % 3])
                elif index % 4 == 3:
                    edited = proposal.fact_content.rstrip(".") + " (per the team wiki)."
                    review.approve(proposal.id, reviewer, content=edited, note="clarified source")
                else:
                    review.approve(proposal.id, reviewer)
            except Refused:
                continue  # a duplicate of an approved fact, say: the demo goes on

    def _spread_over_weeks(self) -> None:
        """Place the demo's history over the last five weeks instead of the last minute: each raw
        memory (with its job, proposals, model calls, derived memories and audit) moves to its own
        day, in the order it was written; a reviewer decides some minutes to days later."""
        from memory.models import MemoryHistory
        from pipeline.models import LlmCall, TripleReview

        raws = list(
            Memory.objects.exclude(source_type=DERIVED_SOURCE_TYPE).order_by("created_at", "id")
        )
        if not raws:
            return
        now = timezone.now()
        rng = random.Random(7)
        for index, raw in enumerate(raws):
            days_ago = SPREAD_DAYS * (1 - index / len(raws)) + 0.5
            when = now - timedelta(days=days_ago, hours=rng.uniform(0, 8))
            delta = when - raw.created_at
            shift = {"created_at": F("created_at") + delta, "updated_at": F("updated_at") + delta}
            derived = Memory.objects.filter(source_id=raw.id, source_type=DERIVED_SOURCE_TYPE)
            memory_ids = [raw.id, *derived.values_list("id", flat=True)]
            Memory.objects.filter(id__in=memory_ids).update(**shift)
            MemoryHistory.objects.filter(memory_id__in=memory_ids).update(
                created_at=F("created_at") + delta
            )
            jobs = Job.objects.filter(memory_id=raw.id)
            jobs.update(**shift, completed_at=F("completed_at") + delta)
            LlmCall.objects.filter(job__in=jobs).update(created_at=F("created_at") + delta)
            TripleReview.objects.filter(source_memory_id=raw.id).update(
                created_at=F("created_at") + delta
            )
            proposals = Proposal.objects.filter(source_memory_id=raw.id)
            proposals.update(**shift, decided_at=F("decided_at") + delta)
            for proposal in proposals.exclude(decided_by__isnull=True).exclude(
                decided_by=PIPELINE_NAME
            ):
                lag = timedelta(minutes=rng.choice([4, 12, 35, 90, 240, 600, 1500, 2900]))
                decided = min(proposal.created_at + lag, now - timedelta(minutes=5))
                Proposal.objects.filter(id=proposal.id).update(decided_at=decided)

    def _recorded_reply(self) -> None:
        """One raw memory processed with a recorded model reply that adds an unsupported fact."""
        from devtools.demo_data import RECORDED_EXTRACTION, RECORDED_MEMORY, RECORDED_MODEL
        from memory.writes import Actor, remember
        from pipeline import tasks
        from pipeline.llm.offline import OfflineChat
        from pipeline.writes.jobs import claim_job
        from pipeline.writes.record import record_job

        class RecordedChat(OfflineChat):
            model = RECORDED_MODEL

            def extract(self, text):
                call = super().extract(text)
                call.raw_response = RECORDED_EXTRACTION
                return call

        result = remember(RECORDED_MEMORY, actor=Actor("standup-notes", "agent"), why="demo")
        claim = claim_job(result.job.id) if result.job else None
        if claim is not None:
            calls = []
            record_job(tasks.compute(claim, calls, client=RecordedChat()))

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
        derived = live.filter(source_type=DERIVED_SOURCE_TYPE).count()
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

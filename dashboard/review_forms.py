"""Forms of the review queue, the bulk action and the per-proposal decision. The queue's rules
are Proposal.objects.queue(); the forms only read what the reviewer asked for."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.db.models import QuerySet
from django.http import QueryDict

from memory.content import is_effectively_empty
from memory.models import Authority
from pipeline import queues, safety
from pipeline.models import Action, Proposal, ProposalStatus
from pipeline.review import Decision

STATUS_CHOICES = [
    (ProposalStatus.PENDING, "Pending"),
    (ProposalStatus.SKIPPED, "Skipped (low confidence)"),
    (ProposalStatus.STALE, "Stale"),
    (ProposalStatus.SUPPRESSED, "Suppressed (rejected before)"),
]
SORT_CHOICES = [
    ("risk", "Risk: DELETE, UPDATE, ADD"),
    ("confidence", "Lowest confidence"),
    ("age", "Oldest first"),
    ("newest", "Newest first"),
]
AGE_CHOICES = [
    ("", "Any age"),
    ("1h", "Last hour"),
    ("24h", "Last 24 hours"),
    ("7d", "Last 7 days"),
    ("older", "Older than 7 days"),
]
YES_NO = [("", "Any"), ("yes", "Yes"), ("no", "No")]


FLAG_CHOICES = [
    ("", "Any"),
    ("unsupported", "Unsupported by source"),
    ("safety", "Any safety finding"),
    *((name, kind.words[:1].upper() + kind.words[1:]) for name, kind in safety.KINDS.items()),
]


def status_choices() -> list[tuple[str, str]]:
    """STATUS_CHOICES with the number of suppressed proposals: "Suppressed (N)"."""
    suppressed = Proposal.objects.filter(status=ProposalStatus.SUPPRESSED).count()
    return [
        (value, f"Suppressed ({suppressed})" if value == ProposalStatus.SUPPRESSED else label)
        for value, label in STATUS_CHOICES
    ]


class QueueFilterForm(forms.Form):
    # A saved queue (pipeline.team.SavedQueue): its filter applies on top of the fields below.
    queue = forms.ChoiceField(required=False, label="Queue")
    status = forms.ChoiceField(choices=status_choices, required=False)
    action = forms.ChoiceField(
        choices=[("", "Any action"), *Action.choices, ("destructive", "UPDATE or DELETE")],
        required=False,
    )
    review_needed = forms.ChoiceField(choices=YES_NO, required=False, label="Contradiction")
    conf_min = forms.FloatField(required=False, min_value=0, max_value=1, label="Confidence ≥")
    conf_max = forms.FloatField(required=False, min_value=0, max_value=1, label="Confidence ≤")
    agent = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    source = forms.CharField(required=False, max_length=64, label="Source memory")
    age = forms.ChoiceField(choices=AGE_CHOICES, required=False)
    flag = forms.ChoiceField(choices=FLAG_CHOICES, required=False, label="Badge")
    authority = forms.ChoiceField(
        choices=[("", "Any authority"), *Authority.choices],
        required=False,
        label="Asserted by",
        help_text="Who asserted the memory an UPDATE or DELETE changes.",
    )
    sort = forms.ChoiceField(choices=SORT_CHOICES, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.queues = queues.saved_queues()
        self.fields["queue"].choices = [("", "All proposals")] + [
            (q.slug, q.name) for q in self.queues
        ]

    def saved_queue(self):
        """The saved queue the reviewer chose, or None."""
        self.is_valid()
        slug = getattr(self, "cleaned_data", {}).get("queue")
        return next((q for q in self.queues if q.slug == slug), None)

    def clean(self):
        data = super().clean()
        low, high = data.get("conf_min"), data.get("conf_max")
        if low is not None and high is not None and low > high:
            self.add_error("conf_max", "Must be at least the lower bound.")
        return data

    def filters(self) -> dict:
        """The valid fields as Proposal.objects.queue() arguments (an invalid field is left out)."""
        self.is_valid()
        f = getattr(self, "cleaned_data", {})
        review_needed = f.get("review_needed")
        return {
            **{name: f.get(name) for name in ("status", "action", "conf_min", "conf_max", "age")},
            **{name: f.get(name) for name in ("agent", "model", "source", "flag", "sort")},
            "authority": f.get("authority"),
            "review_needed": review_needed == "yes" if review_needed in {"yes", "no"} else None,
        }


def queue_for(
    data: QueryDict | None, now: datetime | None = None
) -> tuple[QueueFilterForm, QuerySet[Proposal]]:
    """The filter form for a request's data and the queue it selects, in its order; the age
    filters count back from `now` (the present unless given)."""
    form = QueueFilterForm(data or None)
    query = Proposal.objects.queue(**form.filters(), now=now)
    saved = form.saved_queue()
    return form, query if saved is None else query.filter(saved.condition(now))


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=Decision.choices)
    content = forms.CharField(required=False, widget=forms.Textarea, max_length=100_000)
    reason = forms.CharField(required=False, max_length=2000)
    confirm_secret = forms.BooleanField(required=False)
    # The reviewer's confirmation to change or delete a pinned memory.
    force = forms.BooleanField(required=False)

    def clean(self):
        data = super().clean()
        decision = data.get("decision")
        if decision == Decision.REJECT and not (data.get("reason") or "").strip():
            self.add_error(
                "reason", "Say why you reject it: the reason is kept in the audit trail."
            )
        if decision == Decision.MERGE and not (data.get("content") or "").strip():
            self.add_error("content", "Write the merged text.")
        elif (
            decision not in {Decision.REJECT, Decision.DELETE_OLD}
            and "content" in self.data
            and is_effectively_empty(data.get("content") or "")
        ):
            # A text box emptied is not "as proposed": approving the model's text then was a
            # decision the reviewer never saw (as the API, which refuses an empty content).
            self.add_error(
                "content",
                "The text is empty: write the fact before approving it.",
            )
        return data


class IdsField(forms.CharField):
    """Every `ids` value posted, as one space-separated string: a ticked checkbox sends one
    `ids=<id>` each (a CharField would keep only the last), the confirm form one joined list."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        if isinstance(value, (list, tuple)):
            value = " ".join(str(part) for part in value)
        return super().to_python(value)


class BulkForm(forms.Form):
    decision = forms.ChoiceField(
        choices=[(Decision.APPROVE, "Approve"), (Decision.REJECT, "Reject")]
    )
    scope = forms.ChoiceField(
        choices=[("selected", "Selected rows"), ("all", "All matching the filter")]
    )
    ids = IdsField(required=False)
    reason = forms.CharField(required=False, max_length=2000)
    step = forms.ChoiceField(choices=[("preview", "Preview"), ("apply", "Apply")])
    after = forms.CharField(required=False)
    done = forms.IntegerField(required=False, min_value=0)
    failed = forms.IntegerField(required=False, min_value=0)
    claimed = forms.IntegerField(required=False, min_value=0)  # skipped: another reviewer holds
    awaiting = forms.IntegerField(required=False, min_value=0)  # recorded as 1 of 2 approvals
    yours = forms.IntegerField(required=False, min_value=0)  # this reviewer's 1 of 2 already
    total = forms.IntegerField(required=False, min_value=0)
    # When the preview counted "all matching": the ones that arrive later are not in its count.
    previewed_at = forms.DateTimeField(required=False)
    include_personal_data = forms.BooleanField(required=False)

    def clean(self):
        data = super().clean()
        if data.get("decision") == Decision.REJECT and not (data.get("reason") or "").strip():
            self.add_error("reason", "A bulk rejection needs a reason.")
        if data.get("scope") == "selected" and not self.id_list():
            self.add_error("ids", "Select at least one row, or choose all matching the filter.")
        return data

    def id_list(self) -> list[str]:
        raw = self.cleaned_data.get("ids") or ""
        return [part for part in raw.replace(",", " ").split() if part][:5000]

"""Dashboard forms: they clean what a person typed; the services decide what is allowed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django import forms

from apikit.errors import ValidationFailed, error_codes
from apikit.inputs import whole_number
from dashboard.pages import STATES
from fleet.models import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    BudgetAction,
    BudgetPeriod,
    Directive,
    IdleDirective,
)
from fleet.plan.services import (
    MAX_BRIEF_LENGTH,
    MAX_PROGRESS_TIMEOUT_S,
    MAX_SLOTS,
    MIN_PROGRESS_TIMEOUT_S,
)
from hands import capabilities as hand_capabilities
from hands.models import Lane, Role, Scope
from leases.models import EventKind
from leases.services import MAX_NAME_LENGTH, MAX_REASON_LENGTH, MAX_RESOURCE_LENGTH

# Each text field is bounded by the limit the service it feeds enforces (docs/api.md, "Sizes");
# a username by Django's user model.
MAX_USERNAME_LENGTH = 150

PRIORITY_LABELS = {0: "0 (first)", DEFAULT_PRIORITY: f"{DEFAULT_PRIORITY} (usual)"}
EXPIRY_CHOICES = [
    ("", "never"),
    (str(3600), "in 1 hour"),
    (str(86_400), "in 1 day"),
    (str(7 * 86_400), "in 7 days"),
    (str(30 * 86_400), "in 30 days"),
    (str(365 * 86_400), "in 1 year"),
]


def _any(choices: list[str], label: str) -> list[tuple[str, str]]:
    return [("", label), *((c, c) for c in choices)]


class _PageField(forms.IntegerField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, min_value=1, max_value=1_000_000, **kwargs)


class BoardFilterForm(forms.Form):
    lane = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False, choices=_any(STATES, "every state"))
    hand = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    page = _PageField()

    def __init__(self, *args: Any, lanes: list[Lane], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(lane.slug, lane.name) for lane in lanes]
        self.fields["lane"].choices = [("", "every lane"), *choices]


class RefusalFilterForm(forms.Form):
    # Every code of the contract (`apikit.errors.error_codes`), read when the form is drawn.
    code = forms.ChoiceField(
        required=False, choices=lambda: _any(list(error_codes()), "every code")
    )
    hand = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    page = _PageField()


class EventFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=_any(list(EventKind.values), "every kind"))
    hand = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    page = _PageField()


class LeaseFilterForm(forms.Form):
    prefix = forms.CharField(
        required=False, max_length=MAX_RESOURCE_LENGTH, label="Resource starts with"
    )
    holder = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    page = _PageField()


class HandFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=MAX_NAME_LENGTH, label="Name contains")
    page = _PageField()


class KeyIssueForm(forms.Form):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[Scope.WORK, Scope.LEASES],
        help_text="A hand's worker key needs work (and leases to take resource leases).",
    )
    expires_in_s = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, required=False, coerce=int, empty_value=None, label="Expires"
    )
    lane = forms.ModelChoiceField(
        queryset=Lane.objects.none(),
        required=False,
        empty_label="every lane",
        label="Limit to lane",
    )

    def __init__(self, *args: Any, workspace_id: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["lane"].queryset = Lane.objects.filter(workspace_id=workspace_id).order_by(
            "slug"
        )


class ReasonForm(forms.Form):
    reason = forms.CharField(
        required=False, max_length=MAX_REASON_LENGTH, widget=forms.Textarea(attrs={"rows": 2})
    )


class SlotReopenForm(forms.Form):
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the slot_reopened event. The finished attempt stays on record.",
    )


class SlotsAddForm(forms.Form):
    count = forms.IntegerField(min_value=1, max_value=MAX_SLOTS, initial=1, label="Slots to add")
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the slots_added event.",
    )


class BreakLeaseForm(forms.Form):
    resource = forms.CharField(max_length=MAX_RESOURCE_LENGTH, widget=forms.HiddenInput)
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the lease_broken event.",
    )


class GrantHandoffForm(forms.Form):
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the lease_broken and handoff_granted events; the asker reads it.",
    )


class DirectiveForm(forms.Form):
    directive = forms.ChoiceField(choices=Directive.choices)


class CapabilitiesField(forms.CharField):
    """Tags typed as a comma-separated list; what a tag may be is `hands.capabilities`'s rule."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "Comma-separated, e.g. python, browser, gpu.")
        super().__init__(required=False, max_length=2000, **kwargs)

    def clean(self, value: Any) -> list[str]:
        text = super().clean(value) or ""
        tags = [tag for tag in text.split(",") if tag.strip()]
        try:
            return hand_capabilities.normalise(tags)
        except ValidationFailed as error:
            raise forms.ValidationError(error.message) from None


class RunCreateForm(forms.Form):
    """A new run of a work package: what it is, how many slots, its place in the ready queue and
    the runs it waits for (the package's, picked; any other run of the workspace, by id)."""

    title = forms.CharField(max_length=MAX_NAME_LENGTH)
    brief = forms.CharField(
        required=False,
        max_length=MAX_BRIEF_LENGTH,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Markdown: what a hand reads before it starts.",
    )
    slots = forms.IntegerField(min_value=1, max_value=MAX_SLOTS, initial=1)
    priority = forms.TypedChoiceField(
        coerce=int,
        choices=[(n, PRIORITY_LABELS.get(n, str(n))) for n in range(MAX_PRIORITY + 1)],
        initial=DEFAULT_PRIORITY,
        help_text="The ready queue's order: 0 first; among equals, the oldest run first.",
    )
    depends_on = forms.TypedMultipleChoiceField(
        coerce=int, required=False, label="Waits for", help_text="Runs of this package."
    )
    other_runs = forms.CharField(
        required=False,
        max_length=500,
        label="Also waits for runs",
        help_text="Ids of other runs of the workspace, e.g. 12, 40.",
    )

    def __init__(self, *args: Any, runs: Sequence[tuple[int, str]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["depends_on"].choices = list(runs)

    def clean_other_runs(self) -> list[int]:
        words = self.cleaned_data.get("other_runs", "").replace(",", " ").split()
        ids = [whole_number(word) for word in words]
        if any(found is None for found in ids):
            raise forms.ValidationError("Run ids in ASCII digits, separated by commas.")
        return [found for found in ids if found is not None]

    def dependencies(self) -> list[int]:
        """Every run the form names, once each, in the order given (the service checks each)."""
        named = [*self.cleaned_data.get("depends_on", []), *self.cleaned_data["other_runs"]]
        return list(dict.fromkeys(named))


class RunIdleForm(forms.Form):
    progress_timeout_s = forms.IntegerField(
        required=False,
        min_value=MIN_PROGRESS_TIMEOUT_S,
        max_value=MAX_PROGRESS_TIMEOUT_S,
        label="Progress timeout (s)",
        help_text="A live hand that reports no progress this long is flagged idle; empty: never.",
    )
    idle_directive = forms.ChoiceField(choices=IdleDirective.choices, label="When idle")


class BudgetForm(forms.Form):
    period = forms.ChoiceField(choices=BudgetPeriod.choices)
    limit_usd = forms.DecimalField(
        required=False, min_value=Decimal("0.000001"), max_digits=14, decimal_places=6,
        label="Limit (USD)",
    )  # fmt: skip
    limit_tokens = forms.IntegerField(required=False, min_value=1, label="Limit (tokens)")
    action = forms.ChoiceField(choices=BudgetAction.choices)


class HandCreateForm(forms.Form):
    name = forms.CharField(max_length=MAX_NAME_LENGTH)
    lane = forms.ModelChoiceField(
        queryset=Lane.objects.none(), required=False, empty_label="no lane"
    )
    capabilities = CapabilitiesField()

    def __init__(self, *args: Any, workspace_id: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["lane"].queryset = Lane.objects.filter(workspace_id=workspace_id).order_by(
            "slug"
        )


class HandCapabilitiesForm(forms.Form):
    capabilities = CapabilitiesField(
        help_text="Comma-separated; a run that needs a tag the hand lacks refuses its claim."
    )


class MembershipForm(forms.Form):
    username = forms.CharField(max_length=MAX_USERNAME_LENGTH, help_text="An existing user.")
    role = forms.ChoiceField(choices=Role.choices)


class WorkspaceSwitchForm(forms.Form):
    workspace = forms.IntegerField()


class ScheduleForm(forms.Form):
    cron = forms.CharField(
        max_length=100, initial="0 6 * * *", help_text="Five fields, in UTC: 0 6 * * * is 06:00."
    )
    key_pattern = forms.CharField(
        max_length=MAX_NAME_LENGTH,
        initial="daily-{date}",
        help_text="{date} (and {time} for more than one period a day) is substituted.",
    )
    title_pattern = forms.CharField(max_length=MAX_NAME_LENGTH, initial="Daily {date}")
    runs = forms.CharField(
        required=False,
        max_length=200_000,
        widget=forms.Textarea(attrs={"rows": 4}),
        initial='[{"title": "Run", "brief": "", "slots": 1}]',
        help_text="A JSON list of runs, each as POST /work-packages/<id>/runs takes one.",
    )

    def clean_runs(self) -> Any:
        text = self.cleaned_data["runs"].strip()
        if not text:
            return []
        try:
            return json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}") from None


class IntegrationForm(forms.Form):
    repository = forms.CharField(
        max_length=140,
        help_text="The GitHub repository, owner/name (e.g. acme/app): only its issues and pull "
        "requests count.",
    )
    label = forms.CharField(
        required=False,
        max_length=100,
        help_text="Only issues with this label become work packages (none: every issue).",
    )

"""The supervisor's loop as a hand sees it: what a report says the work cost, and the notices an
answer carries (idle: no progress for the run's timeout; a lane budget reached), in words."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any


def cost_usd_text(value: Decimal | str | float | int) -> str:
    """A cost as the decimal text the server reads exactly (a float's shortest repr, so 0.1
    stays 0.1 and never 0.1000000000000000055…), in plain ASCII digits: never an exponent
    (`Decimal("1E+2")` is sent as 100), which the server refuses."""
    if isinstance(value, bool):
        raise ValueError("cost_usd must be an amount in US dollars, not a boolean")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value))
    except InvalidOperation:
        raise ValueError(f"cost_usd must be an amount in US dollars, not {value!r}") from None
    if not amount.is_finite():
        raise ValueError(f"cost_usd must be a finite amount, not {value!r}")
    return format(amount, "f")


def cost_fields(
    tokens_in: int | None = None,
    tokens_out: int | None = None,
    cost_usd: Decimal | str | float | int | None = None,
) -> dict[str, Any]:
    """A report's cost fields, those given (the server validates their bounds)."""
    fields: dict[str, Any] = {}
    if tokens_in is not None:
        fields["tokens_in"] = tokens_in
    if tokens_out is not None:
        fields["tokens_out"] = tokens_out
    if cost_usd is not None:
        fields["cost_usd"] = cost_usd_text(cost_usd)
    return fields


def idle_notice(attempt: dict[str, Any]) -> str | None:
    """What an idle attempt's answer means, or None."""
    if not attempt.get("idle"):
        return None
    timeout = attempt.get("progress_timeout_s")
    since = attempt.get("last_progress_at") or attempt.get("claimed_at")
    return (
        f"idle: no progress reported for over {timeout} s (since {since}); report progress "
        "(a message, a percent, a note), or ask for help with a blocker"
    )


def budget_notice(attempt: dict[str, Any]) -> str | None:
    """The lane budget the answer says was reached, in words, or None."""
    budget = attempt.get("budget")
    if not isinstance(budget, dict):
        return None
    message = budget.get("message") or (
        f"lane {budget.get('lane')} has reached its {budget.get('period')} budget: "
        f"{budget.get('action')}"
    )
    return f"{message} (until {budget.get('period_end')})"


def attempt_notices(attempt: dict[str, Any]) -> list[str]:
    """Every notice an attempt's answer carries, in words."""
    return [n for n in (idle_notice(attempt), budget_notice(attempt)) if n]

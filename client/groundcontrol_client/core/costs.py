"""What reports cost, as a supervisor reads and voids it: the costed reports
(`Client.cost_reports`) and the void of one report's cost (`Client.report_void`), which no total
or budget counts from then on, and which lifts a budget hit it caused."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from groundcontrol_client.core.wire import OrDefault, Text, Time, WholeNumber, WireModel


def _money(value: Any) -> Decimal:
    """Money as the contract writes it: a decimal string (never read through a float)."""
    if isinstance(value, str):
        try:
            amount = Decimal(value)
        except InvalidOperation:
            pass
        else:
            if amount.is_finite():
                return amount
    raise PydanticCustomError("money", "not a decimal string")


Money = Annotated[Decimal, BeforeValidator(_money)]


class Void(WireModel, title="report's void"):
    at: Time = None
    actor: Text | None = None  # the supervisor hand (null when the caller may not read it)
    actor_key: Text | None = None
    reason: Text = ""


class CostReport(WireModel, title="costed report"):
    id: WholeNumber
    attempt: WholeNumber
    run: WholeNumber = 0
    lane: Text = ""
    hand: Text | None = None
    kind: Text = ""
    at: Time = None
    tokens_in: WholeNumber = 0
    tokens_out: WholeNumber = 0
    cost_usd: Money
    voided: Void | None = None  # set once a supervisor voided its cost


class ReportVoided(WireModel, title="void's answer"):
    report: CostReport
    voided: bool  # whether this call voided it (false: voided already, by `report.voided`)
    lifted: OrDefault[tuple[int, ...]] = ()  # the budgets whose hit this void lifted

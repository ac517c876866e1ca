"""The benchmark's own logic (bench/): how a window's server CPU is metered and how the targets
are judged. The figures themselves come from `bench/run`, never from a test."""

from __future__ import annotations

import itertools
import math
import statistics
import time

from bench import load, report


def _row(operation: str, runs: list[float], cpu_runs: list[float]) -> report.Row:
    return report.Row(
        "Ground Control",
        operation,
        16,
        statistics.median(runs),
        1.0,
        10.0,
        runs,
        0,
        cpu_us=statistics.median(cpu_runs),
        cpu_runs=cpu_runs,
    )


def _heartbeat_target(rows: list[report.Row]) -> report.Target:
    _, targets = report.ratios(rows, [16])
    (target,) = [t for t in targets if t.text.startswith("GC heartbeat")]
    return target


def test_the_heartbeat_target_is_judged_on_server_cpu_per_call() -> None:
    # Fewer heartbeats per second than renewals, but each costs the servers less: it holds.
    cheaper = _heartbeat_target([_row("heartbeat", [900], [600]), _row("renew", [1000], [620])])
    assert cheaper.holds is True
    assert (
        cheaper.value == "0.97 (median of 1 pair(s) of windows; the rows' medians 600 and 620 µs)"
    )
    # More per second but dearer per call: it does not.
    dearer = _heartbeat_target([_row("heartbeat", [1100], [640]), _row("renew", [1000], [620])])
    assert dearer.holds is False
    # Not measured (no meter, or no renewals): unknown, not a pass.
    unmetered = [_row("heartbeat", [900], [math.nan]), _row("renew", [1000], [620])]
    assert _heartbeat_target(unmetered).holds is None
    assert _heartbeat_target([_row("heartbeat", [900], [600])]).holds is None


def test_ratios_are_taken_within_each_repeat() -> None:
    """The machine drifts between repeats (the second ran everything 40 % slower). In two
    repeats of three the heartbeat cost less than the renewal; the medians, each from a
    different repeat, say the opposite."""
    heartbeat = _row("heartbeat", [1000, 700, 990], [580, 830, 615])
    renew = _row("renew", [980, 690, 1000], [590, 840, 610])
    assert heartbeat.cpu_us / renew.cpu_us > 1  # 615 against 610
    assert report.paired_ratio(heartbeat.cpu_runs, renew.cpu_runs) == 830 / 840
    assert _heartbeat_target([heartbeat, renew]).holds is True
    # Repeats that do not pair up give no ratio.
    assert math.isnan(report.paired_ratio([1.0, 2.0], [1.0]))


def test_a_window_is_metered_from_its_opening_to_its_close() -> None:
    readings = itertools.count(0.0, 0.25)  # every reading: a quarter second more CPU

    def meter() -> dict[str, float]:
        now = next(readings)
        return {"server": now, "database": 2 * now}

    def factory(i: int):  # noqa: ANN202
        def op() -> bool:
            time.sleep(0.001)
            return True

        return op, lambda: None

    sample = load.run(factory, concurrency=2, seconds=0.2, warmup_s=0.05, meter=meter)
    assert sample.ops > 0
    # Read once as the window opens and once as it closes: one step of each part.
    assert sample.cpu_s == {"server": 0.25, "database": 0.5}
    assert math.isclose(sample.cpu_us_per_op, 0.75 / sample.ops * 1e6)


def test_without_a_meter_a_window_has_no_cpu_figure() -> None:
    sample = load.run(
        lambda i: (lambda: True, lambda: None), concurrency=1, seconds=0.05, warmup_s=0
    )
    assert sample.cpu_s == {} and math.isnan(sample.cpu_us_per_op)


def test_the_heartbeat_target_counts_the_back_to_back_pairs_too() -> None:
    """Three repeats say a heartbeat is dearer (two of three); six pairs of windows measured
    back to back say it is cheaper in five: the median of all nine pairs decides."""
    heartbeat = _row("heartbeat", [1000, 990, 1010], [630, 640, 600])
    renew = _row("renew", [1000, 1000, 1000], [620, 620, 620])
    assert _heartbeat_target([heartbeat, renew]).holds is False
    pairs = [(580, 600), (590, 620), (600, 610), (700, 650), (560, 600), (575, 590)]
    _, targets = report.ratios([heartbeat, renew], [16], pairs)
    (target,) = [t for t in targets if t.text.startswith("GC heartbeat")]
    assert target.holds is True
    ratios = sorted([630 / 620, 640 / 620, 600 / 620] + [hb / rn for hb, rn in pairs])
    assert target.value.startswith(f"{ratios[4]:.2f} (median of 9 pair(s) of windows, each ")
    # A pair whose window failed (no figure) is left out, not counted as a pass.
    _, targets = report.ratios([heartbeat, renew], [16], [(math.nan, 600)] * 9)
    (target,) = [t for t in targets if t.text.startswith("GC heartbeat")]
    assert target.holds is False and "median of 3 pair(s)" in target.value

"""The load generator: N closed-loop clients, each a thread with its own connection, for a fixed
time. Every system is driven the same way, so the client's own cost (Python, the GIL, one
connection per client) weighs on all of them alike.

A client is a callable that performs one operation and returns True when the system granted it
(a refused renew is an error, not a fast success).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Op = Callable[[], bool]
# Makes client number i: opens its connection, returns its operation and a closer.
ClientFactory = Callable[[int], tuple[Op, Callable[[], None]]]
# CPU seconds used so far by each of a system's server parts (granian, postgres, ...).
Meter = Callable[[], dict[str, float]]


@dataclass
class Sample:
    ops: int
    errors: int
    seconds: float
    latencies_s: list[float] = field(repr=False)
    first_error: str = ""
    # CPU seconds each server part used in the measured window (with a meter).
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_op(self) -> float:
        """Server CPU per granted operation, in µs (all parts metered); NaN without a meter."""
        if not self.cpu_s or not self.ops:
            return float("nan")
        return sum(self.cpu_s.values()) / self.ops * 1e6

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_s:
            return float("nan")
        ordered = sorted(self.latencies_s)
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index] * 1000


def run(
    factory: ClientFactory,
    *,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    meter: Meter | None = None,
) -> Sample:
    """Run `concurrency` clients for `warmup_s + seconds`; count only the last `seconds`. With a
    `meter`, the servers' CPU is read as the window opens and as it closes."""
    clients = [factory(i) for i in range(concurrency)]
    start = threading.Barrier(concurrency + 1)
    lock = threading.Lock()
    totals = {"ops": 0, "errors": 0}
    latencies: list[float] = []
    first_error: list[str] = []
    measure_from = measure_to = 0.0

    def loop(op: Op) -> None:
        mine: list[float] = []
        errors = 0
        start.wait()
        clock = time.perf_counter
        while True:
            t0 = clock()
            if t0 >= measure_to:
                break
            try:
                ok = op()
            except Exception as exc:  # noqa: BLE001 - counted, and the first one reported
                ok = False
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}"[:300])
            t1 = clock()
            # Only operations that started and ended inside the window count.
            if t0 >= measure_from and t1 <= measure_to:
                if ok:
                    mine.append(t1 - t0)
                else:
                    errors += 1
        with lock:
            totals["ops"] += len(mine)
            totals["errors"] += errors
            latencies.extend(mine)

    threads = [threading.Thread(target=loop, args=(op,), daemon=True) for op, _ in clients]
    for thread in threads:
        thread.start()
    now = time.perf_counter()
    measure_from = now + warmup_s
    measure_to = measure_from + seconds
    start.wait()
    cpu_s: dict[str, float] = {}
    if meter is not None:
        time.sleep(max(0.0, measure_from - time.perf_counter()))
        before = meter()
        time.sleep(max(0.0, measure_to - time.perf_counter()))
        after = meter()
        cpu_s = {part: after[part] - before[part] for part in after}
    for thread in threads:
        thread.join()
    for _, close in clients:
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - closing is best effort
            pass
    return Sample(
        ops=totals["ops"],
        errors=totals["errors"],
        seconds=seconds,
        latencies_s=latencies,
        first_error=first_error[0] if first_error else "",
        cpu_s=cpu_s,
    )


def median_sample(samples: list[Sample]) -> Sample:
    """The run with the median throughput (its own latencies go with it)."""
    ordered = sorted(samples, key=lambda s: s.ops_per_s)
    return ordered[len(ordered) // 2]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")

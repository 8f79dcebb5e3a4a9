"""The shape of a GPU's activity between two scrapes: what 1 s (or the driver's own 1/6 s) samples see
that a scrape's average hides.

Prometheus scrapes every 15-60 s, so what it stores is an average: a training job that alternates full
bursts with empty gaps (data starvation) and a job steady at half activity look the same. The exporter
sees every sample, so it keeps, in counters that any rate() window can read back:

- the distribution of per-sample activity (a histogram over BUCKETS): the share of time at or below 10%,
  above 70%, ... over any window;
- busy/idle transitions (activity crossing BUSY_LEVEL between consecutive samples);
- steady bursts: bursts (rises through BUSY_LEVEL) that start within a factor STEADY_FACTOR of the
  previous burst's period. Training steps repeat at a steady period, so nearly all their bursts are
  steady; requests arrive at random, and for Poisson arrivals only 20% are (for independent exponential
  gaps X1, X2, P(2/3 <= X2/X1 <= 3/2) = 3/5 - 2/5). The share survives any scrape interval, because it
  is a ratio of two counters.

One definition, used by the exporter's sampler (live) and by `gpulens eval` (on simulated seconds), so
that what the analyzer learns from the evaluator is what it reads from Prometheus. Pure Python: a node
does not load numpy for this.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

#: Upper bounds (le) of the activity histogram's buckets. 0.01: no work (IDLE_ACTIVITY; NVML reports
#: whole percent, so 0 or 1%); 0.1 and 0.7: the data-starvation tails (SageMaker Debugger: p5 < 10%,
#: p95 > 70%); 0.5: busy/idle; 0.3, 0.9: the shape in between for heatmaps. Seven series per GPU.
BUCKETS = (0.01, 0.1, 0.3, 0.5, 0.7, 0.9, math.inf)
#: Activity at or above this is "busy" for transitions and bursts (the analyzer's switch level).
BUSY_LEVEL = 0.5
#: A burst is steady when its period is within this factor of the previous burst's period.
STEADY_FACTOR = 1.5
#: The bucket bounds the analyzer reads back (trace columns activity_idle/low/high_ratio): the one home of
#: the thresholds idle_activity, starvation_low and starvation_high (core/thresholds.py takes its defaults
#: from here and refuses an override the histogram cannot honour).
IDLE_BOUND, LOW_BOUND, HIGH_BOUND = 0.01, 0.1, 0.7
#: Activity under this ratio is "no work": SM / GR activity about 0 (docs/signals.md; tool: Princeton JDS
#: uses 0%). The exporter's idle-seconds counters and its activity histogram count with it; the analyzer's
#: threshold idle_activity defaults to it (core/thresholds.py).
IDLE_ACTIVITY = IDLE_BOUND


#: Running totals the analyzer differences between two rows: samples, samples at or below IDLE_BOUND,
#: LOW_BOUND and HIGH_BOUND, transitions, steady bursts.
Totals = tuple[float, float, float, float, float, float]


@dataclass(frozen=True)
class ShapeCounts:
    """Cumulative counts since the exporter started, as published in a snapshot: `buckets` are
    per-bucket (not cumulative) observation counts in BUCKETS order."""

    buckets: tuple[int, ...]
    count: int
    sum: float
    transitions: int
    steady_bursts: int

    def cumulative(self) -> list[int]:
        """Bucket counts as Prometheus wants them: observations at or below each bound."""
        out, running = [], 0
        for n in self.buckets:
            running += n
            out.append(running)
        return out

    def at_most(self, bound: float) -> int:
        """Observations at or below `bound`, one of BUCKETS."""
        return sum(self.buckets[: BUCKETS.index(bound) + 1])

    def totals(self) -> Totals:
        return (
            self.count,
            self.at_most(IDLE_BOUND),
            self.at_most(LOW_BOUND),
            self.at_most(HIGH_BOUND),
            self.transitions,
            self.steady_bursts,
        )


class ActivityShape:
    """Accumulates one device's (or one pod's) activity samples, in time order."""

    __slots__ = ("_buckets", "_count", "_sum", "_transitions", "_steady", "_busy", "_last_rise", "_last_period")

    def __init__(self) -> None:
        self._buckets = [0] * len(BUCKETS)
        self._count = 0
        self._sum = 0.0
        self._transitions = 0
        self._steady = 0
        self.gap()

    def gap(self) -> None:
        """The samples stop being continuous (a device lost, a hung driver call): no transition or burst
        period is counted across the gap."""
        self._busy: bool | None = None
        self._last_rise: float | None = None
        self._last_period: float | None = None

    def observe(self, timestamp: float, value: float) -> None:
        """One sample: `value` is activity 0-1 over the driver's sample period ending at `timestamp` (s)."""
        self._buckets[bisect.bisect_left(BUCKETS, value)] += 1
        self._count += 1
        self._sum += value
        busy = value >= BUSY_LEVEL
        if self._busy is not None and busy != self._busy:
            self._transitions += 1
            if busy:
                if self._last_rise is not None:
                    period = timestamp - self._last_rise
                    last = self._last_period
                    if last is not None and last <= STEADY_FACTOR * period and period <= STEADY_FACTOR * last:
                        self._steady += 1
                    self._last_period = period
                self._last_rise = timestamp
        self._busy = busy

    def counts(self) -> ShapeCounts:
        return ShapeCounts(tuple(self._buckets), self._count, self._sum, self._transitions, self._steady)

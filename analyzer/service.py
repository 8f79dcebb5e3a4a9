"""`gpulens analyzer`: classifies every pod on a fixed cycle and serves the verdicts.

Each cycle reads the window from its input, classifies, and replaces the verdicts as a whole. When
the input fails (Prometheus down or slow, exporters unreachable) the last verdicts stay, marked
stale with their age, and the next attempt backs off; the service never crashes on its input.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpulens.analyzer.classify import Verdict, classify
from gpulens.analyzer.live import AnalyzerInput, InputError
from gpulens.core import metrics as m
from gpulens.core.bottlenecks import CLASSES
from gpulens.core.exposition import Families
from gpulens.core.status import ProblemLog
from gpulens.core.thresholds import Thresholds

log = logging.getLogger(__name__)


@dataclass
class State:
    verdicts: list[Verdict] = field(default_factory=list)
    produced_at: float | None = None  # unix time of the last successful cycle
    cycle_seconds: float = 0.0
    input_errors: int = 0
    wasted_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    wasted_cost: dict[tuple[str, str], float] = field(default_factory=dict)


class AnalyzerService:
    MAX_BACKOFF_SECONDS = 120.0

    def __init__(
        self,
        source: AnalyzerInput,
        thresholds: Thresholds,
        prices: dict[str, float],
        interval: float = 15.0,
        clock: Callable[[], float] = time.time,
    ):
        self.source = source
        self.thresholds = thresholds
        self.prices = prices
        self.interval = interval
        self.clock = clock
        self.state = State()
        self._problems = ProblemLog(log)
        self._stop = threading.Event()

    def cycle(self) -> bool:
        """One analysis; False if the input failed (the previous verdicts are kept)."""
        started = self.clock()
        try:
            frame = self.source.window_frame()
        except InputError as e:
            self.state.input_errors += 1
            self._problems.problem("input", f"{e}; serving the last verdicts, marked stale")
            return False
        self._problems.resolved("input", f"the {self.source.name} input answers again")
        verdicts = classify(frame, self.thresholds, self.prices)
        now = self.clock()
        # Waste counters grow by each pod's waste rate over its window times the time since the last
        # cycle, so their rate() is the waste per second however the cycle is timed.
        elapsed = self.interval if self.state.produced_at is None else now - self.state.produced_at
        seconds, cost = dict(self.state.wasted_seconds), dict(self.state.wasted_cost)
        for v in verdicts:
            if v.window_seconds <= 0 or v.bottleneck == "insufficient_data":
                continue
            key = (v.namespace, v.bottleneck)
            share = elapsed / v.window_seconds
            seconds[key] = seconds.get(key, 0.0) + v.wasted_gpu_seconds * share
            cost[key] = cost.get(key, 0.0) + v.wasted_cost * share
        self.state = State(verdicts, now, now - started, self.state.input_errors, seconds, cost)
        return True

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            failures = 0 if self.cycle() else failures + 1
            delay = self.interval if not failures else min(self.interval * 2**failures, self.MAX_BACKOFF_SECONDS)
            self._stop.wait(delay)

    def start(self) -> None:
        self.source.start()
        threading.Thread(target=self.run, name="gpulens-analyzer", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.source.close()

    # --- serving --------------------------------------------------------------------------------
    def age(self) -> float | None:
        return None if self.state.produced_at is None else max(0.0, self.clock() - self.state.produced_at)

    def stale(self) -> bool:
        age = self.age()
        return age is None or age > 3 * self.interval

    def verdicts_json(self) -> tuple[int, str, bytes]:
        body = {
            "stale": self.stale(),
            "age_seconds": self.age(),
            "input": self.source.name,
            "verdicts": [v.to_dict() for v in self.state.verdicts],
        }
        return 200, "application/json", json.dumps(body).encode()

    def health(self) -> tuple[bool, str]:
        if self.state.produced_at is None:
            return False, "no analysis cycle has succeeded yet"
        if self.stale():
            return False, f"verdicts are {self.age():.0f} s old: the {self.source.name} input is failing"
        return True, "ok"

    def describe(self):
        return []

    def collect(self):
        yield from self._families().metric_families()

    def render_text(self) -> bytes:
        """/metrics in the Prometheus text format, without prometheus_client's generic encoder."""
        return self._families().text().encode()

    def _families(self) -> Families:
        state = self.state
        out = Families()
        for v in state.verdicts:
            ids = (v.namespace, v.pod, v.node)
            for name in CLASSES:
                out.add(m.POD_BOTTLENECK, ids + (name,), 1 if name == v.bottleneck else 0)
            out.add(m.POD_BOTTLENECK_CONFIDENCE, ids, v.confidence)
            out.add(
                m.POD_BOTTLENECK_INFO,
                ids + (v.bottleneck, ",".join(v.secondary), ", ".join(v.evidence), v.recommendation),
                1,
            )
            if v.mean_activity is not None:
                out.add(m.POD_SM_ACTIVE, ids, v.mean_activity)
            if v.idle_ratio is not None:
                out.add(m.POD_IDLE, ids, v.idle_ratio)
            out.add(m.POD_GPUS, ids, len(v.gpus))
        for (namespace, bottleneck), seconds in sorted(state.wasted_seconds.items()):
            out.add(m.WASTED_GPU_SECONDS, (namespace, bottleneck), seconds)
            out.add(m.WASTED_COST, (namespace, bottleneck), state.wasted_cost[(namespace, bottleneck)])
        age = self.age()
        if state.produced_at is not None and age is not None:
            out.add(m.ANALYZER_LAST_SUCCESS, (), state.produced_at)
            out.add(m.ANALYZER_VERDICT_AGE, (), age)
            out.add(m.ANALYZER_CYCLE_DURATION, (), state.cycle_seconds)
        out.add(m.ANALYZER_INPUT_ERRORS, (self.source.name,), state.input_errors)
        return out

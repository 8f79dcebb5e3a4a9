"""The serving engines' load (analyzer/inputs/engines.py) read from a real Prometheus holding ten minutes of vLLM
and SGLang metrics scraped every 250 ms, as a recording beside nvidia-smi at 4 Hz keeps them: peaks from every
sample at any step, values no engine can report left out and said, and a pod's two engines read as the one
that served. The oracle is the samples written, reduced by numpy."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from gpulens.analyzer.inputs.engines import read_engine_loads
from gpulens.analyzer.inputs.store import Store
from tests.helpers import BackfilledPrometheus

START = 1_762_646_400.0  # 2025-11-09 00:00 UTC, a multiple of every step read
INTERVAL = 0.25
TIMES = START + INTERVAL * np.arange(int(600 / INTERVAL))
END = float(TIMES[-1])


def _within(first: float, last: float) -> np.ndarray:
    return (TIMES >= START + first) & (TIMES < START + last)


#: serve/burst-0: idle but for a 6 s burst of 19 requests (02:02 to 02:08 past the start: between two 15 s steps),
#: its KV cache 5% full, 60% in the burst; 20 requests finished when it ends.
BURST_RUNNING = np.where(_within(302, 308), 19.0, 0.0)
BURST_KV = np.where(_within(302, 308), 0.6, 0.05)
BURST_FINISHED = np.where(TIMES >= START + 308, 20.0, 0.0)
#: serve/inf-0: 3 running, +Inf for three minutes (a broken gauge), 5 for a second at 06:45; one request a second.
INF_RUNNING = np.where(_within(120, 300), math.inf, np.where(_within(405, 406), 5.0, 3.0))
STEADY_FINISHED = np.floor(TIMES - START)
#: serve/two-0: vLLM serving 2 at a time beside an SGLang sidecar that counts nothing.
TWO_RUNNING = np.full(len(TIMES), 2.0)


def _openmetrics(series: list[tuple[str, str, np.ndarray]]) -> str:
    """(name, pod, values at TIMES) as OpenMetrics, each family's samples together, timestamps in seconds with
    their quarter seconds."""
    lines = []
    for name in dict.fromkeys(name for name, _, _ in series):
        lines.append(f"# TYPE {name} gauge")
        for _, pod, values in (s for s in series if s[0] == name):
            labels = f'{{job="serving-engines",namespace="serve",pod="{pod}",model_name="m"}}'
            lines += [
                f"{name}{labels} {'+Inf' if math.isinf(v) else v} {t:.2f}" for t, v in zip(TIMES, values, strict=True)
            ]
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    zeros = np.zeros(len(TIMES))
    history = _openmetrics(
        [
            ("vllm:num_requests_running", "burst-0", BURST_RUNNING),
            ("vllm:num_requests_waiting", "burst-0", zeros),
            ("vllm:kv_cache_usage_perc", "burst-0", BURST_KV),
            ("vllm:request_success_total", "burst-0", BURST_FINISHED),
            ("vllm:num_requests_running", "inf-0", INF_RUNNING),
            ("vllm:request_success_total", "inf-0", STEADY_FINISHED),
            ("vllm:num_requests_running", "negative-0", np.full(len(TIMES), -1.0)),
            ("vllm:request_success_total", "negative-0", STEADY_FINISHED),
            ("vllm:num_requests_running", "two-0", TWO_RUNNING),
            ("vllm:request_success_total", "two-0", STEADY_FINISHED),
            ("sglang:num_requests_total", "two-0", zeros),
            ("sglang:num_running_reqs", "two-0", zeros),
        ]
    )
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("engines"), history)
    try:
        yield Store(prometheus.url)
    finally:
        prometheus.stop()


@pytest.mark.slow
@pytest.mark.parametrize("step", [INTERVAL, 15.0])
def test_a_burst_between_two_steps_is_the_peak_at_any_step(store, step):
    """At the store's own 250 ms (a step that was written `[600s:0s]` and refused) and at 15 s, whose points
    fall either side of the 6 s burst: the peak is the burst's 19 running and 60% of the KV cache, the most
    any sample held; the 95th percentile is the idle pod's 0 and 5%."""
    loads = read_engine_loads(store, START, END, step, 0.95)
    burst = loads[("serve", "burst-0")]
    assert (burst.engine, burst.served) == ("vllm", True)
    assert (burst.running_peak, burst.kv_cache_peak) == (BURST_RUNNING.max(), BURST_KV.max()) == (19.0, 0.6)
    assert (burst.running_at_percentile, burst.waiting_at_percentile, burst.waiting_peak) == (0.0, 0.0, 0.0)
    assert burst.kv_cache_at_percentile == pytest.approx(0.05)


@pytest.mark.slow
def test_a_gauge_at_inf_is_left_out_and_said_and_its_pod_still_measured(store, caplog):
    """Three minutes of +Inf in vllm:num_requests_running: those samples are skipped by the store's reductions
    (an overflow in the plan before), the pod's peak and percentile are its finite samples', and the log says
    which pod's series held it. Negative samples count for nothing."""
    with caplog.at_level(logging.WARNING, logger="gpulens.analyzer.inputs.engines"):
        loads = read_engine_loads(store, START, END, INTERVAL, 0.95)
    broken = loads[("serve", "inf-0")]
    finite = INF_RUNNING[np.isfinite(INF_RUNNING)]
    assert (broken.running_peak, broken.running_at_percentile) == (finite.max(), 3.0) == (5.0, 3.0)
    # A gauge that only ever said -1 running counts nothing: no peak and no percentile, not a peak of -1.
    negative = loads[("serve", "negative-0")]
    assert negative.served and math.isnan(negative.running_peak) and math.isnan(negative.running_at_percentile)
    assert [r.getMessage() for r in caplog.records] == [
        "vllm:num_requests_running held +Inf or NaN in 1 pod (serve/inf-0): those samples are left out of their "
        "peaks; check what exports it"
    ]


@pytest.mark.slow
def test_a_pod_running_two_engines_is_read_as_the_one_that_served(store):
    """vLLM serving beside an SGLang sidecar that finished nothing: the pod's load is vLLM's (it was read as
    the sidecar's: 'served: false')."""
    two = read_engine_loads(store, START, END, 15.0, 0.95)[("serve", "two-0")]
    assert (two.engine, two.served, two.running_peak, two.running_at_percentile) == ("vllm", True, 2.0, 2.0)
    assert two.requests == pytest.approx(STEADY_FINISHED[-1] - STEADY_FINISHED[0], rel=0.01)

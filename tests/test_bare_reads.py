"""A read of many steps asks a store bare series (analyzer/inputs/queries.py Bare: a selector, rate() or increase()
alone, without `max by` or arithmetic, which Prometheus evaluates step by step at many times the cost) and
takes the max, the factors and the freshness itself. Read from a real Prometheus and a real
VictoriaMetrics both ways, three hours of every family the analyzer reads give the same frame, value for
value, and the values of the samples written: duplicate scrapes of one exporter (two jobs), a pod handed
over without a staleness marker (backfilled history), a pod that ends while its GPU reports on, every kind
of dcgm-exporter memory series, counters, the activity histogram and clock-event reasons."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import series
from gpulens.analyzer.inputs.series import SeriesReader
from gpulens.analyzer.inputs.store import Store
from gpulens.analyzer.runs import span
from gpulens.core.catalog import MIB
from tests.helpers import BackfilledPrometheus, VictoriaMetrics
from tests.store_history import Families, families_openmetrics, families_prometheus_text

pytestmark = pytest.mark.slow

START = 1_762_732_800.0
STEP = 30.0
STEPS = 360  # three hours
TIMES = START + STEP * np.arange(STEPS)
#: The steps at which pods give way: gpulens' GPU-a from a-1 to a-2, dcgm-exporter's GPU-d from d-1 to d-2;
#: GPU-b's pod b-1 ends (its GPU reports on, held by no pod).
A_HANDOVER, B_ENDS, D_HANDOVER = 180, 240, 120
MODEL = "NVIDIA H100 80GB HBM3"
GPULENS = "10.0.0.1:9835"
DCGM = "10.0.0.2:9400"


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def history() -> tuple[Families, dict[str, np.ndarray]]:
    """The samples, and what a read must find (oracle values by name, one per step)."""
    rng = np.random.default_rng(7)
    families: Families = {}
    expected: dict[str, np.ndarray] = {}

    def write(name: str, labels: str, values: np.ndarray, steps: np.ndarray | None = None) -> None:
        at = np.arange(STEPS) if steps is None else steps
        families.setdefault(name, []).extend((labels, float(TIMES[k]), float(values[k])) for k in at)

    for uuid in ("GPU-a", "GPU-b"):
        for job in ("gpulens", "gpulens-again"):  # one exporter scraped by two jobs: every series twice
            base = {"job": job, "instance": GPULENS, "gpu": uuid[-1], "uuid": uuid}
            write("gpulens_gpu_info", _labels(**base, model=MODEL), np.ones(STEPS))
        sm = rng.uniform(0, 1, (2, STEPS))  # each job's copy differs: the read keeps the higher at each step
        expected[f"{uuid} sm_active"] = sm.max(axis=0)
        pcie = np.cumsum(rng.uniform(0, 1e9, (2, STEPS)), axis=1)
        crc_flit, crc_data, replay = (np.cumsum(rng.integers(0, 3, (2, STEPS)), axis=1) for _ in range(3))
        reasons = rng.random((2, STEPS)) < 0.2
        count = np.cumsum(rng.integers(20, 31, (2, STEPS)), axis=1)
        buckets = {le: np.floor(count * share) for le, share in (("0.01", 0.3), ("0.1", 0.5), ("0.7", 0.8))}
        transitions = np.cumsum(rng.integers(0, 9, (2, STEPS)), axis=1)
        for copy, job in enumerate(("gpulens", "gpulens-again")):
            base = {"job": job, "instance": GPULENS, "gpu": uuid[-1], "uuid": uuid}
            write("gpulens_gpu_sm_active_ratio", _labels(**base), sm[copy])
            write("gpulens_gpu_pcie_transmit_bytes_total", _labels(**base), pcie[copy])
            for kind, counts in (("crc_flit", crc_flit), ("crc_data", crc_data), ("replay", replay)):
                write("gpulens_gpu_nvlink_errors_total", _labels(**base, type=kind), counts[copy])
            write("gpulens_gpu_clock_event_active", _labels(**base, reason="hw_slowdown"), reasons[copy] * 1.0)
            write("gpulens_gpu_clock_event_active", _labels(**base, reason="sw_thermal"), np.zeros(STEPS))
            write("gpulens_gpu_activity_ratio_count", _labels(**base), count[copy])
            for le, counts in {**buckets, "+Inf": count}.items():
                write("gpulens_gpu_activity_ratio_bucket", _labels(**base, le=le), counts[copy])
            write("gpulens_gpu_activity_transitions_total", _labels(**base), transitions[copy])
            write("gpulens_gpu_steady_bursts_total", _labels(**base), np.floor(transitions[copy] / 3))
            pods = (
                [("a-1", np.arange(A_HANDOVER)), ("a-2", np.arange(A_HANDOVER, STEPS))]
                if uuid == "GPU-a"
                else [("b-1", np.arange(B_ENDS))]
            )
            for pod, steps in pods:
                write(
                    "gpulens_gpu_pod_info",
                    _labels(**base, namespace="ml", pod=pod, container="main"),
                    np.ones(STEPS),
                    steps,
                )
        # 0 or the mask's bit of hw_slowdown (1 << 3 of NVML's reasons; sw_thermal never active).
        expected[f"{uuid} clock_event_reasons"] = np.where(reasons.any(axis=0), 232.0, 0.0)
    for uuid in ("GPU-c", "GPU-d"):
        used, free, reserved, total = rng.uniform(1000, 40_000, STEPS), 40_000.0, 500.0, 81_559.0
        util = rng.uniform(0, 100, (2, STEPS))
        expected[f"{uuid} gpu_util"] = util.max(axis=0) * 0.01  # percent, times the factor dcgm_columns() names
        if uuid == "GPU-c":  # the GPU Operator's default set: used and free, and reserved (DCGM 3.3 on)
            expected[f"{uuid} memory_total_bytes"] = (used + free + reserved) * MIB
            pods = [("c-1", np.arange(STEPS))]
        else:  # a counter set with the total
            expected[f"{uuid} memory_total_bytes"] = np.full(STEPS, total * MIB)
            pods = [("d-1", np.arange(D_HANDOVER)), ("d-2", np.arange(D_HANDOVER, STEPS))]
        for copy, job in enumerate(("dcgm", "dcgm-again")):
            for pod, steps in pods:
                labels = _labels(
                    job=job,
                    instance=DCGM,
                    gpu=uuid[-1],
                    UUID=uuid,
                    modelName=MODEL,
                    Hostname="gpu-node-2",
                    namespace="gpu-operator",
                    pod="nvidia-dcgm-exporter-x1",
                    exported_namespace="ml",
                    exported_pod=pod,
                    exported_container="main",
                )
                write("DCGM_FI_DEV_GPU_UTIL", labels, util[copy], steps)
                write("DCGM_FI_DEV_FB_USED", labels, used, steps)
                if uuid == "GPU-c":
                    write("DCGM_FI_DEV_FB_FREE", labels, np.full(STEPS, free), steps)
                    write("DCGM_FI_DEV_FB_RESERVED", labels, np.full(STEPS, reserved), steps)
                else:
                    write("DCGM_FI_DEV_FB_TOTAL", labels, np.full(STEPS, total), steps)
    return families, expected


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    families, expected = history()
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), families_openmetrics(families))
    victoria = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    try:
        victoria.load(families_prometheus_text(families))
        yield {"prometheus": prometheus.url, "victoria-metrics": victoria.url}, expected
    finally:
        prometheus.stop()
        victoria.stop()


def read(url: str, bare_steps: int, monkeypatch, asked: list[str] | None = None) -> pd.DataFrame:
    """The three hours as one read of a report, each query bare where it asks at least `bare_steps`; the
    range queries asked into `asked`."""
    monkeypatch.setattr(series, "BARE_STEPS", bare_steps)
    store = Store(url)
    if asked is not None:
        query_range = store.query_range

        def recorded(expr: str, *args, **kwargs):
            asked.append(expr)
            return query_range(expr, *args, **kwargs)

        monkeypatch.setattr(store, "query_range", recorded)
    reader = SeriesReader(store, STEP)
    end = float(TIMES[-1])
    assert reader.scrape_interval(end, 3600) == STEP  # identities are then read fresh, as a report reads them
    frame = span._read(reader, float(TIMES[0]), end, STEP, span.Progress())
    return frame.sort_values(["gpu", "timestamp"]).reset_index(drop=True)


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
def test_a_read_asked_bare_is_the_read_asked_aggregated_and_the_samples_written(stores, store, monkeypatch):
    urls, expected = stores
    aggregated = read(urls[store], 10**9, monkeypatch)
    asked: list[str] = []
    bare = read(urls[store], 1, monkeypatch, asked)
    # Each series is read once: dcgm-exporter's FB_USED (memory used, a kind of the memory total, the pod
    # identity) in one query, beside the count_over_time that says where the identity is fresh.
    assert len(asked) == len(set(asked))
    used = [expr for expr in asked if "DCGM_FI_DEV_FB_USED" in expr]
    assert used == ['count_over_time({__name__=~"DCGM_FI_DEV_FB_USED"}[45000ms])', '{__name__=~"DCGM_FI_DEV_FB_USED"}']
    # The NVLink error kinds of a column are added up in another order: equal to the last bits of a double.
    errors = ["nvlink_crc_errors_per_second", "nvlink_replay_errors_per_second"]
    pd.testing.assert_frame_equal(bare.drop(columns=errors), aggregated.drop(columns=errors), check_exact=True)
    pd.testing.assert_frame_equal(bare[errors], aggregated[errors], rtol=1e-12)

    def column(gpu: str, name: str) -> np.ndarray:
        rows = bare[bare["gpu"] == gpu]
        assert rows["timestamp"].tolist() == TIMES.tolist()
        return rows[name].to_numpy()

    # VictoriaMetrics keeps 12 significant digits of a value; Prometheus every bit.
    rtol = 1e-11 if store == "victoria-metrics" else 0.0
    for name, values in expected.items():
        gpu, name = name.split()
        np.testing.assert_allclose(column(gpu, name), values, rtol=rtol, atol=0, err_msg=f"{gpu} {name}")
    # The pods, handed over at the step the next one's first sample is; b-1's end 45 s (1.5 scrape intervals)
    # after its last sample: without a staleness marker the store would show it for its 5-minute lookback.
    pods = {gpu: column(gpu, "pod").astype(str) for gpu in ("GPU-a", "GPU-b", "GPU-c", "GPU-d")}
    assert pods["GPU-a"].tolist() == ["a-1"] * A_HANDOVER + ["a-2"] * (STEPS - A_HANDOVER)
    assert pods["GPU-b"].tolist() == ["b-1"] * (B_ENDS + 1) + [""] * (STEPS - B_ENDS - 1)
    assert pods["GPU-c"].tolist() == ["c-1"] * STEPS
    assert pods["GPU-d"].tolist() == ["d-1"] * D_HANDOVER + ["d-2"] * (STEPS - D_HANDOVER)
    # The counters' rates over rate()'s two minutes, as the store computes them: a duplicate scrape's higher one.
    assert (column("GPU-a", "pcie_tx_bytes_per_second")[4:] > 0).all()

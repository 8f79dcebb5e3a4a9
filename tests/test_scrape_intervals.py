"""What 1 s sampling sees, through a real Prometheus scraping every 15, 30 or 60 s.

The demo fleet's first node runs through the real exporter code (simulated source, sampler, collector)
on a virtual clock for 45 minutes; its /metrics are taken every 15, 30 or 60 s, stamped, and loaded into
a real Prometheus with promtool's OpenMetrics backfill (so the test does not wait 45 minutes); the
analyzer then reads Prometheus through PrometheusInput, exactly as in production.
"""

import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpulens.analyzer.inputs.live import PrometheusInput
from gpulens.analyzer.judging.classify import classify
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND
from gpulens.core.trace import SHAPE
from gpulens.exporter.collector import ExporterCollector
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources.simulated import SimulatedAttribution, SimulatedSource
from gpulens.simulator.fleet import DEFAULT_FLEET, fleet_from_file
from tests.helpers import Prometheus, require_binary

pytestmark = pytest.mark.slow

MINUTES = 45


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def record_scrapes(end: float, scrape_interval: float) -> list[tuple[float, str]]:
    """The node's exposition every `scrape_interval` seconds for MINUTES minutes ending at `end`, the
    sampler ticking every second in between."""
    node = fleet_from_file(DEFAULT_FLEET)[0]
    clock = Clock(end - MINUTES * 60)
    sampler = Sampler(SimulatedSource(node, clock=clock), 1.0, clock=clock, attribution=SimulatedAttribution(node))
    collector = ExporterCollector(sampler, "test", "simulated", clock=clock)
    scrapes = []
    for second in range(MINUTES * 60 + 1):
        sampler.tick()
        if second % scrape_interval == 0:
            scrapes.append((clock.now, collector.render_text().decode()))
        clock.now += 1.0
    return scrapes


def to_openmetrics(scrapes: list[tuple[float, str]]) -> str:
    """One OpenMetrics file of all the scrapes, each sample stamped with its scrape's time: every family
    once, each series' samples in time order, as promtool's backfill requires."""
    families: dict[str, object] = {}
    for timestamp, text in scrapes:
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(family.name, family)
            stamped = [Sample(s.name, s.labels, s.value, timestamp) for s in family.samples]
            if merged is family:
                family.samples = stamped
            else:
                merged.samples.extend(stamped)  # type: ignore[attr-defined]

    def series(sample: Sample) -> tuple:
        return tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))

    for family in families.values():
        family.samples = sorted(family.samples, key=lambda s: (series(s), s.timestamp))  # type: ignore[attr-defined]

    class Merged:
        def collect(self):
            return families.values()

    return openmetrics_latest(Merged()).decode()  # type: ignore[arg-type]


ACTIVITY = "gpulens_gpu_activity_ratio"


def _share(bound: float, window: str) -> str:
    """PromQL for the share of the activity samples at or below `bound` over `window`."""
    count = f"increase({ACTIVITY}_count[{window}])"
    return f'increase({ACTIVITY}_bucket{{le="{bound:g}"}}[{window}]) / ignoring(le) {count}'


@pytest.mark.parametrize("scrape_interval", [15, 30, 60])
def test_data_starvation_is_seen_through_prometheus_at_any_scrape_interval(tmp_path: Path, scrape_interval: int):
    promtool = require_binary("promtool")
    import time

    # Two minutes ago, on the minute: the analyzer reads the store's step grid, and the recording ends on it.
    end = float((int(time.time()) - 120) // 60 * 60)
    scrapes = record_scrapes(end, scrape_interval)
    source = tmp_path / "scrapes.om"
    source.write_text(to_openmetrics(scrapes))
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp_path / "tsdb")],
        check=True,
        capture_output=True,
    )
    prometheus = Prometheus(tmp_path, [], scrape_interval=f"{scrape_interval}s")
    try:
        reader = PrometheusInput(
            prometheus.url, window=MINUTES * 60 - 60, step=scrape_interval, clock=lambda: end, selector=""
        )
        frame = reader.window_frame()
        # The activity shape's ratios as Prometheus divides them itself: the reader divides the buckets'
        # increases by the count's after the read, and must land on the same values.
        window = reader.reader.rate_window()
        for column, expr in {
            "activity_samples": f"rate({ACTIVITY}_count[{window}]) * {scrape_interval}",
            "activity_idle_ratio": _share(IDLE_BOUND, window),
            "activity_low_ratio": _share(LOW_BOUND, window),
            "activity_high_ratio": f"1 - ({_share(HIGH_BOUND, window)})",
        }.items():
            expected = {
                (s["metric"]["uuid"], float(t)): float(v)
                for s in prometheus.query_range(
                    f"max by (instance, uuid) ({expr})", end - reader.window, end, scrape_interval
                )
                for t, v in s["values"]
            }
            rows = zip(frame["gpu"].astype(str), frame["timestamp"], strict=True)
            got = dict(zip(rows, frame[column], strict=True))
            # Within float rounding: Prometheus scales rate() and increase() by one factor in another order.
            assert {k: got[k] for k in expected} == pytest.approx(expected, rel=1e-12, nan_ok=True)
    finally:
        prometheus.stop()
    frame["node"] = "sim-h100-a"  # no pod-resources labels need joining: the exporter labels pods itself
    assert frame.activity_samples.notna().sum() > 0
    verdicts = {v.pod: v for v in classify(frame) if v.pod}
    starving = verdicts["bert-finetune-0"]
    assert starving.bottleneck == "data_starvation", starving.evidence
    assert float(starving.evidence["steady_burst_fraction"].split("%")[0]) >= 90
    assert starving.sample_seconds == scrape_interval
    # The driver's samples, 1/6 s apart, through rows a whole scrape apart (rate() extrapolates a little).
    spacing = float(starving.evidence["driver_samples"].split(", one every ")[1].split()[0])
    assert spacing == pytest.approx(1 / 6, rel=0.05)
    assert verdicts["resnet-ddp-0"].bottleneck == "healthy"
    assert verdicts["stencil-solver-0"].bottleneck == "memory_bandwidth"
    assert verdicts["notebook-alice-0"].bottleneck == "idle"
    assert verdicts["embedder-0"].bottleneck == "wrong_gpu_type"
    # The same Prometheus data without the exporter's activity shape: an average every scrape, which
    # cannot tell a starving training job from a serving replica with few requests.
    [without] = [v for v in classify(frame.drop(columns=SHAPE)) if v.pod == "bert-finetune-0"]
    assert without.bottleneck == "overprovisioned_serving"

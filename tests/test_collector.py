"""The collector's fast renderers write exactly what prometheus_client's encoders would, in both formats
Prometheus negotiates, and every scrape of one sample shares one rendering."""

import gzip

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from gpulens.core import metrics as m
from gpulens.core.exposition import wants_openmetrics
from gpulens.exporter.collector import ExporterCollector
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources import simulated
from gpulens.exporter.sources.base import DeviceSample, NodeSample, ProcessSample, Source
from gpulens.simulator import fleet


class Frozen:
    def __init__(self):
        self.now = 5000.0

    def __call__(self):
        return self.now


def test_fast_text_is_byte_identical_to_generate_latest_for_every_demo_node():
    for node in fleet.fleet_from_file(fleet.DEFAULT_FLEET):
        clock = Frozen()
        sampler = Sampler(simulated.SimulatedSource(node, clock=clock), interval=1.0, clock=clock)
        sampler.tick()
        clock.now += 1.0
        sampler.tick()
        collector = ExporterCollector(sampler, "1.2.3", "simulated", clock=clock)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        assert collector.render_text() == generate_latest(registry)
        om = collector.render_text(openmetrics=True)
        assert om == openmetrics.generate_latest(registry)
        families = {f.name: f for f in parse_openmetrics(om.decode())}  # the strict parser takes it whole
        assert families["gpulens_gpu_busy_seconds"].type == "counter"
        assert families["gpulens_gpu_activity_ratio"].type == "histogram"


class OddNames(Source):
    """A node whose process names need escaping in the exposition."""

    name = "odd"

    def sample(self):
        d = DeviceSample(gpu="0", uuid="GPU-1", model='Weird "GPU"\\n')
        d.set(m.TEMPERATURE, 50)
        d.processes.append(
            ProcessSample(pid=7, command='say "hi"\\there\nnext', memory_used_bytes=1.5e9, utilization=float("nan"))
        )
        return NodeSample([d], driver_version="1", nvml_version="2")


def test_fast_text_escapes_like_prometheus_client():
    clock = Frozen()
    sampler = Sampler(OddNames(), clock=clock)
    sampler.tick()
    collector = ExporterCollector(sampler, "v", "odd", clock=clock)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = collector.render_text()
    assert text == generate_latest(registry)
    assert collector.render_text(openmetrics=True) == openmetrics.generate_latest(registry)
    assert b'command="say \\"hi\\"\\\\there\\nnext"' in text
    assert (
        b'gpulens_process_utilization_ratio{container="",gpu="0",namespace="",pid="7",pod="",uuid="GPU-1"} NaN' in text
    )


class Broken(Source):
    name = "broken"

    def sample(self):
        d = DeviceSample(gpu="0", uuid="GPU-1")
        d.values[m.TEMPERATURE] = 50.0  # a source bug (no label map) must not 500 the scrape
        return NodeSample([d])


def test_a_failing_section_leaves_the_rest_of_the_scrape(caplog):
    clock = Frozen()
    sampler = Sampler(Broken(), clock=clock)
    sampler.tick()
    text = ExporterCollector(sampler, "v", "broken", clock=clock).render_text().decode()
    assert 'gpulens_exporter_collector_success{collector="broken"} 1.0' in text
    assert "gpulens_process_info" not in text
    assert "rendering _devices failed" in caplog.text


class FailsAfterFirst(Source):
    """A source that answers once, then fails every time (the driver went away)."""

    name = "flaky"

    def __init__(self):
        self.calls = 0

    def sample(self):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("driver went away")
        d = DeviceSample(gpu="0", uuid="GPU-1")
        d.set(m.UTILIZATION, 0.5)
        return NodeSample([d])


def test_a_failing_source_serves_the_last_good_sample_and_says_so(caplog):
    clock = Frozen()
    sampler = Sampler(FailsAfterFirst(), interval=1.0, clock=clock)
    sampler.tick()
    for _ in range(3):
        clock.now += 1.0
        sampler.tick()
    text = ExporterCollector(sampler, "v", "flaky", clock=clock).render_text().decode()
    assert 'gpulens_exporter_collector_success{collector="flaky"} 0.0' in text
    assert 'gpulens_exporter_collector_failures_total{collector="flaky"} 3.0' in text
    assert 'gpulens_gpu_utilization_ratio{gpu="0",uuid="GPU-1"} 0.5' in text
    assert "gpulens_exporter_sample_age_seconds 3.0" in text
    assert caplog.text.count("flaky source failed: driver went away") == 1


def test_every_scrape_of_one_sample_shares_one_rendering_no_older_than_a_second():
    clock = Frozen()
    sampler = Sampler(OddNames(), clock=clock)
    sampler.tick()
    collector = ExporterCollector(sampler, "v", "odd", clock=clock)
    renders = []
    gather = collector._gather
    collector.exposition.gather = lambda: renders.append(clock.now) or gather()
    first = collector.exposition.body(openmetrics=True, gzipped=True)
    assert collector.exposition.body(openmetrics=True, gzipped=True) is first
    assert gzip.decompress(first) == collector.exposition.body(openmetrics=True, gzipped=False)
    assert gzip.decompress(first) == collector.render_text(openmetrics=True)
    assert collector.exposition.body(openmetrics=False, gzipped=False) == collector.render_text()
    assert renders == [5000.0, 5000.0]  # once per format, the gzipped body from the plain one
    clock.now += 0.5
    assert collector.exposition.body(openmetrics=True, gzipped=True) is first  # same sample, same second
    clock.now += 0.5  # a second on, the same sample: rendered again, its age moved on
    assert b"gpulens_exporter_sample_age_seconds 1.0" in collector.exposition.body(openmetrics=False, gzipped=False)
    clock.now += 0.1
    sampler.tick()  # a new sample: rendered again at once
    assert b"gpulens_exporter_sample_age_seconds 0.0" in collector.exposition.body(openmetrics=False, gzipped=False)
    assert renders == [5000.0, 5000.0, 5001.0, 5001.1]


def test_openmetrics_is_served_when_the_scraper_names_a_version_gpulens_writes():
    prometheus = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    assert [
        wants_openmetrics(accept)
        for accept in (
            prometheus,
            "application/openmetrics-text",
            "application/openmetrics-text; version=0.0.1",
            "application/openmetrics-text;version=2.0.0,text/plain;version=0.0.4;q=0.5",
            "text/plain;version=0.0.4",
            "*/*",
            "",
        )
    ] == [True, True, True, False, False, False, False]


@pytest.mark.slow
def test_the_series_prefix_cache_lets_ended_processes_go():
    """Processes come and go on a node for months: the formatted series of those that ended are let go,
    so the cache follows the node's series, and every scrape still writes what prometheus_client writes."""
    from gpulens.core import exposition
    from gpulens.core.activity import BUCKETS, ShapeCounts
    from gpulens.core.exposition import Families

    counts = ShapeCounts((1,) + (0,) * (len(BUCKETS) - 1), 1, 0.0, 0, 0)
    for generation in range(40):  # 40 generations of 300 processes: 12,000 series ever, 300 at a time
        families = Families()
        for p in range(300):
            labels = ("0", "GPU-1", str(generation * 1000 + p), "ns", f"pod-{generation}-{p}", "main")
            families.add(m.PROCESS_MEMORY_USED, labels, float(p))
            families.add_histogram(m.POD_ACTIVITY, labels[:2] + labels[3:], counts)
        text = families.text()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(type("Rows", (), {"collect": lambda self, f=families: f.metric_families()})())
        assert text.encode() == generate_latest(registry)
    assert len(exposition._series_prefixes) <= 2 * 300 + exposition._PREFIX_SLACK
    assert len(exposition._histogram_prefixes) <= 2 * 300 + exposition._PREFIX_SLACK
    # The last generation's stay formatted for the next scrape.
    assert all(
        (m.PROCESS_MEMORY_USED, ("0", "GPU-1", str(39_000 + p), "ns", f"pod-39-{p}", "main"))
        in exposition._series_prefixes
        for p in range(300)
    )

"""The metric table is public API: check its names against Prometheus conventions."""

import dataclasses
import re
import subprocess

import pytest
import requests

from gpulens import reference
from gpulens.core import metrics as m
from gpulens.core.thresholds import Thresholds
from tests.helpers import REPO, require_binary, start_exporter

LABEL = re.compile(r"^[a-z][a-z0-9_]*$")


def test_names_follow_prometheus_conventions():
    problems = []
    for spec in m.ALL:
        name = spec.name
        if not name.startswith("gpulens_") or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            problems.append(f"{name}: needs the gpulens_ prefix and snake_case")
        if name.endswith("_total") != (spec.type == "counter"):
            problems.append(f"{name}: _total is for counters and only counters")
        stem = name[: -len("_total")] if spec.type == "counter" else name
        if spec.unit and not stem.endswith("_" + spec.unit):
            problems.append(f"{name}: unit {spec.unit} must be the name's suffix")
        if spec.unit and spec.unit not in m.BASE_UNITS:
            problems.append(f"{name}: {spec.unit} is not a base unit")
        for bad in ("percent", "percentage", "mib", "mb", "milliwatts", "mhz", "celcius", "_ms", "kib"):
            if bad in name:
                problems.append(f"{name}: {bad} is not a base unit")
        if name.endswith("_info") and spec.type != "gauge":
            problems.append(f"{name}: info metrics are gauges of value 1")
        for label in spec.labels:
            if not LABEL.match(label):
                problems.append(f"{name}: label {label} is not lowercase snake_case")
        # The analyzer's `node` is where a pod runs (it serves the whole fleet), not its own host.
        exempt = spec is m.DRIVER_INFO or (spec.group == "analyzer" and "hostname" not in spec.labels)
        if not exempt and {"driver_version", "hostname", "host", "node"} & set(spec.labels):
            problems.append(f"{name}: host and driver belong in target labels and gpulens_driver_info")
        if not spec.help.strip() or not spec.source.strip():
            problems.append(f"{name}: help and source must be filled in")
    assert problems == []
    assert len({s.name for s in m.ALL}) == len(m.ALL), "metric names must be unique"


def test_ratios_are_declared_as_ratios():
    ratio_names = sorted(s.name for s in m.ALL if s.name.endswith("_ratio"))
    assert ratio_names == sorted(s.name for s in m.ALL if s.unit == "ratio")
    assert "gpulens_gpu_sm_active_ratio" in ratio_names


def test_flag_reference_is_generated_from_the_command_line(monkeypatch):
    """docs/flags.md is the command line's own: every flag of every command, and the environment variable of
    exactly the flags that read one (the claim `gpulens COMMAND --help` makes, tested in test_flags.py)."""
    import os

    from gpulens import flag_reference
    from gpulens.cli import build_parser

    for name in [n for n in os.environ if n.startswith("GPULENS_")]:
        monkeypatch.delenv(name)  # a variable would change the defaults shown
    committed = (REPO / "docs" / "flags.md").read_text()
    assert committed == flag_reference.render(), (
        "docs/flags.md is stale: run python -m gpulens.flag_reference docs/flags.md"
    )
    exporter = build_parser("exporter")._subparsers._group_actions[0].choices["exporter"]
    for action in exporter._actions:
        for flag in action.option_strings:
            if flag not in ("-h", "--help"):
                assert f"`{flag}`" in committed
    assert "| `--source` | `GPULENS_SOURCE` | nvml |" in committed
    assert "| `--prometheus` | - | - |" in committed  # report's flags read no variable, and it says so


def test_metric_reference_is_generated_from_the_table():
    committed = (REPO / "docs" / "metrics.md").read_text()
    assert committed == reference.render(), (
        "docs/metrics.md is stale: run gpulens metrics-reference --out docs/metrics.md"
    )
    for spec in m.ALL:
        assert f"`{spec.name}`" in committed


@pytest.mark.slow
def test_promtool_finds_nothing_wrong_in_a_real_scrape():
    promtool = require_binary("promtool")
    exporter, url = start_exporter(["--source", "simulated", "--sampler.interval", "0.2"])
    try:
        body = requests.get(url + "/metrics", timeout=5).text
        openmetrics = requests.get(
            url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=5
        ).text
    finally:
        exporter.stop()
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    # No series twice, in either format (prometheus_client's parsers read them as Prometheus does).
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    for parse, text in ((parse_text, body), (parse_openmetrics, openmetrics)):
        series = [(s.name, tuple(sorted(s.labels.items()))) for f in parse(text) for s in f.samples]
        assert len(series) > 100 and len(set(series)) == len(series)
    # The scrape really covers the table: every family the simulator can produce is there.
    for name in (
        "gpulens_gpu_sm_active_ratio",
        "gpulens_gpu_busy_seconds_total",
        "gpulens_gpu_idle_seconds_total",
        "gpulens_gpu_clock_event_seconds_total",
        "gpulens_process_busy_seconds_total",
        "gpulens_gpu_topology_info",
        "gpulens_exporter_sample_age_seconds",
    ):
        assert f"\n{name}" in body, name


def test_every_threshold_is_in_docs_signals_with_its_source():
    """docs/signals.md's table is generated from core/thresholds.py, and every threshold names where it
    comes from: the vendor, another tool, a common rule, a request, or our own proposal."""
    committed = (REPO / "docs" / "signals.md").read_text()
    assert committed == reference.with_thresholds(committed), (
        "docs/signals.md is stale: run gpulens metrics-reference --signals docs/signals.md"
    )
    rows = reference.render_thresholds().splitlines()[4:-2]
    assert len(rows) == len(dataclasses.fields(Thresholds))
    sources = r"\((NVIDIA|tools?|proposal|common rule|issue \d+|kubernetes-mixin|DCGM)\b"
    unsourced = [row.split("|")[2] for row in rows if not re.search(sources, row.split("|")[4])]
    assert unsourced == []

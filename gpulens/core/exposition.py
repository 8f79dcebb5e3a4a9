"""The Prometheus exposition of gpulens' metric table: rows gathered per scrape, rendered fast.

Everything gpulens serves on /metrics goes through Families: the exporter's collector and the
analyzer's service add (spec, label values, value) rows and get either prometheus_client metric
families or the formats Prometheus negotiates (text 0.0.4, OpenMetrics 1.0.0) straight from the rows,
byte for byte what prometheus_client's encoders write, at a fraction of the cost. Exposition keeps the
rendered (and gzipped) bodies, so that every scraper of the same data shares one rendering.
"""

from __future__ import annotations

import functools
import gzip
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from gpulens.core import metrics as m
from gpulens.core.activity import BUCKETS, ShapeCounts

#: The `le` label values of the activity histograms, as prometheus_client writes them.
_LE = tuple(floatToGoString(b) for b in BUCKETS)


class Families:
    """Rows gathered for one scrape, by metric spec, rendered in the order of the metric table."""

    def __init__(self):
        self._rows: dict[m.MetricSpec, list[tuple[tuple[str, ...], float]]] = {}
        self._histograms: dict[m.MetricSpec, list[tuple[tuple[str, ...], ShapeCounts]]] = {}

    def add(self, spec: m.MetricSpec, label_values: tuple[str, ...], value: float) -> None:
        self._rows.setdefault(spec, []).append((label_values, value))

    def add_histogram(self, spec: m.MetricSpec, label_values: tuple[str, ...], counts: ShapeCounts) -> None:
        """An activity histogram (buckets core.activity.BUCKETS) with the counts of one device or pod."""
        self._histograms.setdefault(spec, []).append((label_values, counts))

    def metric_families(self) -> Iterator[Metric]:
        for spec in m.ALL:
            if spec.type == "histogram":
                histograms = self._histograms.get(spec)
                if histograms:
                    histogram = HistogramMetricFamily(spec.family_name, spec.help, labels=spec.labels)
                    for label_values, counts in histograms:
                        buckets = list(zip(_LE, counts.cumulative(), strict=True))
                        histogram.add_metric(label_values, buckets, counts.sum)
                    yield histogram
                continue
            rows = self._rows.get(spec)
            if rows:
                cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
                family = cls(spec.family_name, spec.help, labels=spec.labels)
                for label_values, value in rows:
                    family.add_metric(label_values, value)
                yield family

    def text(self, openmetrics: bool = False, end: bool = True, sweep: bool = True) -> str:
        """The Prometheus text format 0.0.4, or OpenMetrics 1.0.0, byte for byte what prometheus_client's
        generate_latest() (or its openmetrics twin) writes for metric_families() (a test holds it to
        that), at a fraction of the cost: label names are validated once by the metric table's tests,
        not per sample. The two formats differ only in the HELP and TYPE lines and the closing # EOF
        (left out where `end` is False: a body that other families follow, Exposition's live ones). `sweep`
        False keeps the series prefixes of other renderings (a few live families rendered between them)."""
        if not self._rows and not self._histograms:  # a live part without rows: at every scrape of an exporter
            return _EOF.decode() if openmetrics and end else ""
        out = []
        for spec in m.ALL:
            if spec.type == "histogram":
                if spec in self._histograms:
                    out.append(_header(spec, openmetrics))
                    for label_values, counts in self._histograms[spec]:
                        _histogram_text(spec, label_values, counts, out)
                continue
            rows = self._rows.get(spec)
            if not rows:
                continue
            out.append(_header(spec, openmetrics))
            for label_values, value in rows:
                prefix = _series_prefixes.get((spec, label_values))
                if prefix is None:
                    prefix = _series_prefix(spec, label_values)
                out.append(prefix + floatToGoString(value) + "\n")
        if openmetrics and end:
            out.append("# EOF\n")
        if sweep:
            self._sweep_prefixes()
        return "".join(out)

    def _sweep_prefixes(self) -> None:
        """Keep only this scrape's series in the prefix caches once they hold more than twice as many (plus
        _PREFIX_SLACK): series of ended processes and pods go, so memory follows the node's series, not
        every series it ever had, and each sweep is paid for by as many new series as it keeps."""
        global _series_prefixes, _histogram_prefixes
        _series_prefixes = _swept(_series_prefixes, self._rows)
        _histogram_prefixes = _swept(_histogram_prefixes, self._histograms)


def _swept(cache: dict, rendered: dict[m.MetricSpec, list]) -> dict:
    """`cache` as is, or with only the keys of the rows `rendered` once it holds more than twice as many."""
    if len(cache) <= 2 * sum(map(len, rendered.values())) + _PREFIX_SLACK:
        return cache
    keys = ((spec, label_values) for spec, rows in rendered.items() for label_values, _ in rows)
    return {key: cache[key] for key in keys if key in cache}


#: The formats served on /metrics, by what a scraper's Accept header names.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def negotiate(accept: str, accept_encoding: str) -> tuple[bool, bool]:
    """(openmetrics, gzipped): what /metrics answers a scraper that sends these Accept and
    Accept-Encoding headers."""
    return wants_openmetrics(accept), "gzip" in accept_encoding


def wants_openmetrics(accept: str) -> bool:
    """True when the Accept header names OpenMetrics 1.0 (Prometheus lists it first, then 0.0.1, then
    text 0.0.4), as prometheus_client's choose_encoder decides; anything else gets text 0.0.4."""
    for media in accept.split(","):
        kind, *params = (p.strip() for p in media.split(";"))
        if kind == "application/openmetrics-text":
            version = next((p.partition("=")[2] for p in params if p.startswith("version=")), "")
            if version in ("", "0.0.1", "1.0.0"):
                return True
    return False


class Exposition:
    """The /metrics bodies of one data source, rendered once for each format and encoding and shared by
    every scrape until the data changes (`version()` returns another object: a new sample, a new
    analysis) or `max_age_seconds` pass, so that values computed at render time (a sample's age) are
    never older than that. A hundred scrapers of the same sample cost one rendering, not a hundred.

    `live()`, where given, gathers the few families whose values move between versions (how old the
    verdicts are, the server's own counters): they are rendered at every scrape and follow the shared
    body, so that a body of hundreds of thousands of series (the analyzer's, at 10,000 pods) is rendered
    once a version however often it is scraped. Gzipped, the live part is a gzip member of its own after
    the shared body's (RFC 1952 2.2: a gzip file is a series of members; Go's reader, Prometheus', and
    urllib3's read them all)."""

    def __init__(
        self,
        gather: Callable[[], Families],
        version: Callable[[], object],
        max_age_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        live: Callable[[], Families] | None = None,
    ):
        self.gather = gather
        self.version = version
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self.live = live
        self._lock = threading.Lock()  # one rendering at a time; the scrapes arriving meanwhile share it
        self._key: object = None
        self._rendered_at = float("-inf")
        self._bodies: dict[tuple[bool, bool], bytes] = {}

    def body(self, openmetrics: bool, gzipped: bool) -> bytes:
        """The body in OpenMetrics 1.0.0 or text 0.0.4, gzipped (level 1: a scrape's CPU matters more
        than its bytes on a node's own network) or not."""
        with self._lock:
            shared = self._shared(openmetrics, gzipped)
        if self.live is None:
            return shared
        live = self.live().text(openmetrics, sweep=False).encode()  # outside the lock: scrapes at once run apart
        if not live:  # text 0.0.4 without a live family: the shared body as it is, not a copy
            return shared
        if gzipped:
            live = _GZIPPED_EOF if live == _EOF else gzip.compress(live, 1)
        return shared + live

    def _shared(self, openmetrics: bool, gzipped: bool) -> bytes:
        """The body rendered once a version (its lock held): all of it, or all but the live families."""
        key, now = self.version(), self.clock()
        if key is not self._key or now - self._rendered_at >= self.max_age_seconds:
            self._key, self._rendered_at, self._bodies = key, now, {}
        body = self._bodies.get((openmetrics, gzipped))
        if body is None:
            plain = self._bodies.get((openmetrics, False))
            if plain is None:
                text = self.gather().text(openmetrics, end=self.live is None)
                plain = self._bodies[(openmetrics, False)] = text.encode()
            body = self._bodies[(openmetrics, gzipped)] = gzip.compress(plain, 1) if gzipped else plain
        return body


#: OpenMetrics' last line, alone a live part where no live family has a row (most scrapes of an exporter), and
#: gzipped once (mtime 0: the same bytes each time).
_EOF = b"# EOF\n"
_GZIPPED_EOF = gzip.compress(_EOF, 1, mtime=0)


def _histogram_text(spec: m.MetricSpec, label_values: tuple[str, ...], counts: ShapeCounts, out: list[str]) -> None:
    """The _bucket, _count and _sum lines of one histogram series, as prometheus_client orders them."""
    prefixes = _histogram_prefixes.get((spec, label_values))
    if prefixes is None:
        names = (*spec.labels, "le")
        order = sorted(range(len(names)), key=lambda i: names[i])
        buckets = []
        for le in _LE:
            values = (*label_values, le)
            labels = ",".join(f'{names[i]}="{_escape(values[i])}"' for i in order)
            buckets.append(f"{spec.name}_bucket{{{labels}}} ")
        _, sorted_names, label_order, _ = _text_layout(spec)
        plain = ",".join(f'{sorted_names[i]}="{_escape(label_values[j])}"' for i, j in enumerate(label_order))
        braces = f"{{{plain}}}" if plain else ""
        prefixes = (tuple(buckets), f"{spec.name}_count{braces} ", f"{spec.name}_sum{braces} ")
        _histogram_prefixes[(spec, label_values)] = prefixes
    bucket_prefixes, count_prefix, sum_prefix = prefixes
    for prefix, value in zip(bucket_prefixes, counts.cumulative(), strict=True):
        out.append(prefix + floatToGoString(value) + "\n")
    out.append(count_prefix + floatToGoString(counts.count) + "\n")
    out.append(sum_prefix + floatToGoString(counts.sum) + "\n")


_histogram_prefixes: dict[tuple[m.MetricSpec, tuple[str, ...]], tuple[tuple[str, ...], str, str]] = {}

# Formatted `name{labels} ` per series. The same series come back scrape after scrape, so formatting
# them once is most of the render cost saved; Families._sweep_prefixes lets the series that ended go.
_series_prefixes: dict[tuple[m.MetricSpec, tuple[str, ...]], str] = {}
#: Series the prefix caches may hold beyond twice a scrape's before they are swept.
_PREFIX_SLACK = 1024


def _series_prefix(spec: m.MetricSpec, label_values: tuple[str, ...]) -> str:
    _, names, order, _ = _text_layout(spec)
    if names:
        labels = ",".join(f'{names[i]}="{_escape(label_values[j])}"' for i, j in enumerate(order))
        prefix = f"{spec.name}{{{labels}}} "
    else:
        prefix = f"{spec.name} "
    _series_prefixes[(spec, label_values)] = prefix
    return prefix


def _header(spec: m.MetricSpec, openmetrics: bool) -> str:
    layout = _text_layout(spec)
    return layout[3] if openmetrics else layout[0]


@functools.cache
def _text_layout(spec: m.MetricSpec) -> tuple[str, tuple[str, ...], tuple[int, ...], str]:
    """HELP/TYPE lines in text 0.0.4, the label order (sorted by name, as prometheus_client writes them),
    and the HELP/TYPE lines in OpenMetrics: named by the family (a counter without its _total), the help
    with its quotes escaped too."""
    help_text = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    kind = spec.type if spec.type in ("counter", "histogram") else "gauge"
    header = f"# HELP {spec.name} {help_text}\n# TYPE {spec.name} {kind}\n"
    om_help = help_text.replace('"', r"\"")
    om_header = f"# HELP {spec.family_name} {om_help}\n# TYPE {spec.family_name} {kind}\n"
    order = tuple(sorted(range(len(spec.labels)), key=lambda i: spec.labels[i]))
    return header, tuple(spec.labels[i] for i in order), order, om_header


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value

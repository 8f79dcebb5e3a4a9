"""`gpulens report --format html`: one self-contained page (inline CSS and SVG, no script, nothing
fetched), readable offline and attachable to a ticket: the fleet's waste by class and by namespace, a
table of every pod's headline verdict, and a timeline per pod (activity, memory, class bands) for the
pods that wasted the most.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from gpulens.analyzer import frame as fr
from gpulens.analyzer.classify import Verdict
from gpulens.analyzer.features import UnitKeys
from gpulens.analyzer.history import sample_interval
from gpulens.analyzer.summary import waste_by
from gpulens.core.bottlenecks import BOTTLENECKS, PROBLEMS

#: One colour per class (core/bottlenecks.py).
COLOURS = {b.name: b.colour for b in BOTTLENECKS}


#: Timelines drawn, most waste first; the table lists every pod.
MAX_TIMELINES = 40
#: Points per timeline: bins of the span, each the mean of its samples.
POINTS = 360

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;width:100%;margin:8px 0}td,th{border-bottom:1px solid #ddd;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.n,th.n{text-align:right;white-space:nowrap}
.bar{display:inline-block;height:10px;vertical-align:middle}.chip{display:inline-block;width:10px;height:10px;
margin-right:4px;vertical-align:middle}.small{color:#666;font-size:12px}.pod{margin:18px 0}
.summary span{display:inline-block;margin-right:28px}.summary b{font-size:20px;display:block}
"""


def render(verdicts: list[Verdict], samples: pd.DataFrame, title: str = "gpulens: why are the GPUs idle?") -> str:
    """The report for `verdicts` (most waste first), with timelines drawn from `samples` (unit_samples()
    of a trace, or TimelineBins.samples() of a report read in pieces)."""
    verdicts = sorted(verdicts, key=lambda v: -v.wasted_gpu_seconds)
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>",
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _summary(verdicts),
        _legend(),
        "<h2>Waste by class</h2>",
        _waste_table(verdicts, "class", "class"),
        "<h2>Waste by namespace</h2>",
        _waste_table(verdicts, "namespace", "namespace"),
        "<h2>Waste by workload</h2>",
        _waste_table(verdicts, "owner", "workload (namespace/kind/name)"),
        *(["<h2>Waste by team</h2>", _waste_table(verdicts, "team", "team")] if any(v.team for v in verdicts) else []),
        "<h2>Pods</h2>",
        _pod_table(verdicts),
        f"<h2>Timelines: {_drawn_heading(min(MAX_TIMELINES, len(verdicts)))}</h2>",
        "<p class=small>Bands: the class of each episode. Black line: activity (SM activity, or utilization "
        "where profiling is absent), 0 to 1. Blue dashed line: memory used, 0 to the GPU's capacity.</p>",
    ]
    series = _series(samples, verdicts[:MAX_TIMELINES])
    for v in verdicts[:MAX_TIMELINES]:
        parts.append(_timeline(v, series.get(v.unit)))
    parts.append("</body></html>\n")
    return "".join(parts)


def _e(text: object) -> str:
    return html.escape(str(text))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _drawn_heading(count: int) -> str:
    return "the pod" if count == 1 else f"the {count} pods that wasted the most"


def drawn_units(verdicts: list[Verdict]) -> list[str]:
    """The units whose timelines the report draws: the MAX_TIMELINES that wasted the most."""
    return [v.unit for v in sorted(verdicts, key=lambda v: -v.wasted_gpu_seconds)[:MAX_TIMELINES]]


def _summary(verdicts: list[Verdict]) -> str:
    """The headline: the pods (the GPUs, where the data names no pods), those with a problem in the span, the
    GPUs no pod holds by kind, and the GPU-hours sampled and wasted: the sums of the waste tables below."""
    pods = [v for v in verdicts if v.pod]
    judged, noun = (pods, "pod") if pods else (verdicts, "GPU")
    unheld = Counter(v.bottleneck for v in verdicts if not v.pod) if pods else Counter()
    by_class = waste_by(verdicts, "class")
    hours = sum(v.window_seconds * v.coverage * len(v.gpus) for v in verdicts) / 3600
    wasted = sum(s.wasted_gpu_hours for s in by_class)
    cost = sum(s.wasted_cost for s in by_class)
    if not hours:
        return "<p>No samples.</p>"
    # A problem for part of the span is a problem: the waste beside this count is its time.
    problems = sum(1 for v in judged if any(c in PROBLEMS for c in v.by_class) or v.bottleneck in PROBLEMS)
    # The bold number above each label is the count; the label does not repeat it.
    cells = [
        (f"{len(judged)}", noun if len(judged) == 1 else f"{noun}s"),
        (f"{problems}", "with a problem in the span"),
    ]
    cells += [
        (f"{n}", f"{'GPU' if n == 1 else 'GPUs'} {UNHELD_LABELS.get(name, name)}") for name, n in sorted(unheld.items())
    ]
    cells += [
        (f"{hours:,.1f}", "GPU-hours sampled"),
        (f"{wasted:,.1f}", f"GPU-hours wasted ({wasted / hours:.0%})"),
        (f"${cost:,.2f}", "wasted"),
    ]
    return "<p class=summary>" + "".join(f"<span><b>{_e(n)}</b>{_e(label)}</span>" for n, label in cells) + "</p>"


#: The kinds of GPU no pod holds, as the headline counts them.
UNHELD_LABELS = {"unallocated": "no pod holds (unallocated)", "held_without_pod": "used by no pod (held without a pod)"}


def _legend() -> str:
    return (
        "<p>" + " ".join(f"<span class=chip style='background:{c}'></span>{_e(n)}" for n, c in COLOURS.items()) + "</p>"
    )


def _waste_table(verdicts: list[Verdict], dimension: str, heading: str) -> str:
    """The verdicts' waste summed by `dimension` (summary.DIMENSIONS), a row per group with waste."""
    sums = [s for s in waste_by(verdicts, dimension) if s.wasted_gpu_hours > 0]
    top = max((s.wasted_gpu_hours for s in sums), default=0.0) or 1.0
    rows = "".join(
        f"<tr><td>{_e(s.key)}</td><td class=n>{s.wasted_gpu_hours:,.2f}</td><td class=n>${s.wasted_cost:,.2f}</td>"
        f"<td><span class=bar style='width:{100 * s.wasted_gpu_hours / top:.0f}%;"
        f"background:{COLOURS.get(s.key, '#555')}'></span></td></tr>"
        for s in sums
    )
    head = f"<tr><th>{_e(heading)}</th><th class=n>GPU-h wasted</th><th class=n>cost</th><th class=w></th></tr>"
    return f"<table>{head}{rows or '<tr><td colspan=4>No waste.</td></tr>'}</table>"


def _pod_table(verdicts: list[Verdict]) -> str:
    rows = []
    for v in verdicts:
        shares = ", ".join(f"{name} {part.share:.0%}" for name, part in v.by_class.items())
        rows.append(
            f"<tr><td>{_e(v.unit)}<div class=small>{_e(v.node)} {_e(v.gpu_model)}</div></td>"
            f"<td><span class=chip style='background:{COLOURS[v.bottleneck]}'></span>{_e(v.bottleneck)}"
            f"<div class=small>confidence {v.confidence:.2f}</div></td>"
            f"<td>{_e(shares)}</td><td class=n>{v.wasted_gpu_seconds / 3600:,.2f}</td>"
            f"<td class=n>${v.wasted_cost:,.2f}</td><td class=small>{_e(v.recommendation)}</td></tr>"
        )
    return (
        "<table><tr><th>pod</th><th>headline</th><th>time by class</th><th class=n>GPU-h wasted</th>"
        f"<th class=n>cost</th><th>what to do</th></tr>{''.join(rows)}</table>"
    )


def unit_samples(
    trace: pd.DataFrame,
    units: Iterable[str] | None = None,
    keys: UnitKeys | None = None,
    where: np.ndarray | None = None,
) -> pd.DataFrame:
    """What the timelines draw, one row per sample of `units` (None: all) among the rows `where` holds
    (None: all): its unit (as verdicts name it), unix seconds, activity (0-1) and memory used as a share of
    capacity. `keys`: UnitKeys.of(trace), where the caller has it."""
    if trace.empty:
        return pd.DataFrame({"unit": [], "ts": [], "activity": [], "memory": []})
    keys = keys or UnitKeys.of(trace)
    names = keys.names(trace)
    rows = np.isin(names, list(units))[keys.unit] if units is not None else np.ones(len(trace), dtype=bool)
    if where is not None:
        rows &= where
    drawn = trace[rows]
    return pd.DataFrame(
        {
            "unit": names[keys.unit[rows]],
            "ts": drawn["timestamp"].to_numpy(),
            "activity": fr.activity(drawn).to_numpy(),
            "memory": (drawn["memory_used_bytes"] / drawn["memory_total_bytes"]).to_numpy(),
        }
    )


class TimelineBins:
    """Each unit's timeline samples averaged into POINTS bins of a span (none shorter than the sampling
    step), added a piece at a time: what a report read from a store draws, in memory that follows the
    units (11 KiB each), not the span. Each piece is summed in one pass over its samples, whatever the
    number of units in it."""

    def __init__(self, start: float, end: float, step: float):
        self.start = start
        self.width = max(step, (end - start) / POINTS)  # seconds a bin covers
        self.bins = min(POINTS, int((end - start) // self.width) + 1)
        #: unit -> its row of `sums`.
        self.rows: dict[str, int] = {}
        #: Per unit row and bin: sums of activity and memory, and their counts.
        self.sums = np.zeros((0, 4, self.bins))

    def add(self, samples: pd.DataFrame) -> None:
        if samples.empty:
            return
        codes, names = pd.factorize(samples["unit"])
        rows = np.array([self.rows.setdefault(str(name), len(self.rows)) for name in names])
        if len(self.rows) > len(self.sums):
            grown = np.zeros((max(len(self.rows), 2 * len(self.sums)), 4, self.bins))
            grown[: len(self.sums)] = self.sums
            self.sums = grown
        bins = np.clip(((samples["ts"].to_numpy() - self.start) // self.width).astype(np.int64), 0, self.bins - 1)
        cells = rows[codes] * self.bins + bins
        size = len(self.sums) * self.bins
        for k, column in enumerate(("activity", "memory")):
            values = samples[column].to_numpy()
            seen = ~np.isnan(values)
            self.sums[:, k] += np.bincount(cells[seen], weights=values[seen], minlength=size).reshape(-1, self.bins)
            self.sums[:, k + 2] += np.bincount(cells[seen], minlength=size).reshape(-1, self.bins)

    def samples(self, units: Iterable[str]) -> pd.DataFrame:
        """unit_samples() of `units`: one row per bin that had samples, at the bin's middle."""
        parts = []
        for unit in units:
            row = self.rows.get(unit)
            if row is None:
                continue
            sums = self.sums[row]
            with np.errstate(invalid="ignore", divide="ignore"):
                activity, memory = sums[0] / sums[2], sums[1] / sums[3]
            held = (sums[2] > 0) | (sums[3] > 0)
            middles = self.start + (np.flatnonzero(held) + 0.5) * self.width
            parts.append(
                pd.DataFrame({"unit": unit, "ts": middles, "activity": activity[held], "memory": memory[held]})
            )
        return pd.concat(parts, ignore_index=True) if parts else unit_samples(pd.DataFrame())


def trace_timelines(trace: pd.DataFrame, verdicts: list[Verdict]) -> pd.DataFrame:
    """What the HTML report of a trace draws: the drawn units' samples in TimelineBins over the trace's
    span, binned as a report read from a store bins them, so that the two draw the same lines."""
    drawn = drawn_units(verdicts)
    if trace.empty:
        return unit_samples(trace)
    ts = trace["timestamp"]
    bins = TimelineBins(float(ts.min()), float(ts.max()), sample_interval(trace, UnitKeys.of(trace)))
    bins.add(unit_samples(trace, drawn))
    return bins.samples(drawn)


def _series(samples: pd.DataFrame, verdicts: list[Verdict]) -> dict[str, pd.DataFrame]:
    """Per unit drawn: mean activity and memory fraction in POINTS bins over its span."""
    wanted = {v.unit: v for v in verdicts}
    samples = samples[samples["unit"].isin(list(wanted))]
    out = {}
    for name, part in samples.groupby("unit", sort=False):
        v = wanted[str(name)]
        start, span = v.episodes[0].start if v.episodes else part["ts"].min(), max(v.window_seconds, 1.0)
        bins = np.clip(((part["ts"] - start) / span * POINTS).astype(int), 0, POINTS - 1)
        out[str(name)] = part.groupby(bins)[["activity", "memory"]].mean()
    return out


def _timeline(v: Verdict, series: pd.DataFrame | None, width: int = 1000, height: int = 110) -> str:
    start = v.episodes[0].start if v.episodes else 0.0
    span = max(v.window_seconds, 1.0)

    def x(seconds: float) -> float:
        return (seconds - start) / span * width

    bands = "".join(
        f"<rect class=band data-class='{e.bottleneck}' x='{x(e.start):.1f}' y='0' "
        f"width='{max(x(e.end) - x(e.start), 0.5):.1f}' height='{height}' fill='{COLOURS[e.bottleneck]}' "
        f"fill-opacity='0.35'><title>{_e(e.bottleneck)} {_e(_time(e.start))} to {_e(_time(e.end))}, "
        f"confidence {e.confidence:.2f}</title></rect>"
        for e in v.episodes
    )
    lines = ""
    if series is not None and len(series):
        bins = series.index.to_numpy()
        xs = (bins + 0.5) / POINTS * width
        for column, style in (("activity", "stroke='#111'"), ("memory", "stroke='#1f4e9c' stroke-dasharray='4 3'")):
            values = series[column].to_numpy()
            # Gaps are gaps: a line runs through consecutive bins with samples only.
            for run in _runs(bins, values):
                points = " ".join(f"{xs[i]:.1f},{height - values[i] * height:.1f}" for i in run)
                lines += f"<polyline class={column} fill='none' stroke-width='1.2' {style} points='{points}'/>"
    ticks = "".join(
        f"<text x='{x(tick):.1f}' y='{height + 14}' font-size='11' fill='#666'>{_e(_time(tick))}</text>"
        for tick in np.linspace(start, start + span, 5)[:-1]
    )
    return (
        f"<div class=pod><b>{_e(v.unit)}</b> <span class=small>{_e(v.bottleneck)}, "
        f"{v.wasted_gpu_seconds / 3600:,.2f} GPU-h wasted</span><br>"
        f"<svg viewBox='0 0 {width} {height + 18}' width='100%' role=img aria-label='timeline of {_e(v.unit)}'>"
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='#fafafa' stroke='#ccc'/>"
        f"{bands}{lines}{ticks}</svg></div>"
    )


def _runs(bins: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """The positions of `values` in runs without a gap: a gap is more than twice the usual spacing of the
    bins that have a value (data sampled coarser than a bin fills every other one, and is not a gap)."""
    present = np.flatnonzero(~np.isnan(values))
    if not len(present):
        return []
    spacing = np.diff(bins[present])
    usual = float(np.median(spacing)) if len(spacing) else 1.0
    return np.split(present, np.flatnonzero(spacing > 2 * max(usual, 1.0)) + 1)


def _time(unix: float) -> str:
    return pd.Timestamp(unix, unit="s", tz="UTC").strftime("%m-%d %H:%M")

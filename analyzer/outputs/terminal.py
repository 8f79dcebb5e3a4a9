"""What `gpulens report` prints for a person: the pods, the plan and the waste by workload and team, as tables
laid out by rich to the width it is given (the terminal's, or COLUMNS when piped, 120 by default).

Every number keeps its width whatever the terminal (a column of figures is as wide as its widest cell, never
squeezed to nothing by a long text beside it); text takes what is left, shared by ratio; piped output is laid
out as a terminal of that width would be. The pods' evidence is one line an item, cut at the column's edge (a
table of a fleet stays a line or a few a pod; every word is in --format json and html); the plan's changes
wrap, whole. Under WIDE_COLUMNS the evidence and the fix share a column.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from gpulens.analyzer.inputs import readers
from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration, gpu_count, item_in_units
from gpulens.analyzer.judging.scheduling import REASON_TEXT, Scheduling, quota_advice, spent
from gpulens.analyzer.outputs.actions import Plan
from gpulens.analyzer.outputs.outcomes import Outcome
from gpulens.analyzer.outputs.report import fleet_line
from gpulens.analyzer.outputs.showback import Charge, showback_by
from gpulens.analyzer.outputs.summary import waste_by
from gpulens.core.times import rfc3339

#: The width of a table written to a pipe or a file where COLUMNS does not say: a wide terminal's.
PIPED_COLUMNS = 120
#: The narrowest layout: 80 columns, a terminal's default.
NARROWEST = 80
#: From this width the pods and the plan are tables where their text columns are readable; under it, or where
#: they would not be, a block each (their text wraps under them).
WIDE_COLUMNS = 120
#: The narrowest a table's text column (why, what to do, the change) may be: narrower, a reason is cut to a
#: word ("stages_take_tur…", "Communica"), and the blocks say it whole.
READABLE_TEXT = 30
#: The widest the pods' column gets in a table (names longer wrap).
POD_COLUMN = 36
#: The waits the cluster's section lists, longest first: a month of a busy cluster names hundreds.
MAX_WAITS = 20


def columns_of(environ: dict[str, str] | None = None) -> int:
    """The width of a table written to a pipe or file: COLUMNS where it is a width (NARROWEST to 1000), else
    PIPED_COLUMNS."""
    import os

    text = (os.environ if environ is None else environ).get("COLUMNS", "")
    return max(int(text), NARROWEST) if text.isdigit() and int(text) <= 1000 else PIPED_COLUMNS


def report_text(
    verdicts: list[Verdict],
    plan: Plan,
    width: int,
    colour: bool = False,
    scheduling: Scheduling | None = None,
    changes: list[Outcome] | None = None,
    bills: list[Charge] | None = None,
    checks: list[str] | None = None,
) -> str:
    """The pods (most waste first), the cluster's share where kube-state-metrics was read, the changes the
    workloads went through and what became of each, the plan, the fleet after it, the waste by owner and
    team, and what each team's GPUs cost (by namespace where no team label was read), laid out for `width`
    columns (at least NARROWEST); `colour` for a terminal that shows it."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(width, NARROWEST),
        force_terminal=colour,
        color_system="auto" if colour else None,
        highlight=False,
        soft_wrap=False,
    )
    width = console.width
    console.print(_pods(verdicts, width), "")
    if scheduling is not None:
        console.print(_cluster(scheduling, width), "")
    if changes:
        console.print(_changes(changes, width), "")
    if plan.actions:
        console.print(_plan(plan, width), "")
        console.print(fleet_line(plan), "")
    for dimension in ("owner", "team"):
        if dimension == "team" and all(not v.team for v in verdicts):
            continue  # no team label read: one row of "(no team)" says nothing
        console.print(_waste(verdicts, dimension, width))
    if bills:
        console.print(_showback(bills, "team" if any(v.team for v in verdicts) else "namespace", width))
        for line in checks or []:
            console.print(line, markup=False)
    return buffer.getvalue()


#: The efficiency funnel's columns: each a share of the time held, where its field was read ("-" where not).
FUNNEL_HEADERS = {"busy": "busy", "sm_active": "SM", "flop": "OFU"}


def _showback(bills: list[Charge], dimension: str, width: int) -> Table:
    """Showback by `dimension`: the device-hours each group held, what they cost, its efficiency funnel (the
    share of them a kernel ran, the SMs were active, and the peak tensor FLOPs delivered) and what was wasted
    (docs/showback.md)."""
    sums = showback_by(bills, dimension)
    cells = {
        "held h": [f"{s.gpu_hours:,.1f}" for s in sums],
        "cost $": [f"{s.cost:,.2f}" for s in sums],
        **{
            header: ["-" if s.funnel()[name] is None else f"{s.funnel()[name]:.0%}" for s in sums]
            for name, header in FUNNEL_HEADERS.items()
        },
        "wasted h": [f"{s.wasted_gpu_hours:,.2f}" for s in sums],
        "wasted $": [f"{s.wasted_cost:,.2f}" for s in sums],
    }
    first, last = min(c.day for c in bills), max(c.day for c in bills)
    span = first if first == last else f"{first} to {last}"
    title = (
        f"What each {dimension}'s GPUs cost, {span} (UTC): GPU-hours held, their cost, the share of them busy, SM "
        "active and of peak FLOPs (OFU), and the GPU-hours and $ wasted"
    )
    return _sums(title, dimension, [s.key for s in sums], cells, width)


#: What a table with a SIMPLE_HEAD box costs beside its columns: an edge and a space each side of each column.
def _overhead(columns: int) -> int:
    return 3 * columns + 1


def _shares(width: int, fixed: list[int], ratios: list[int]) -> list[int]:
    """The widths of the text columns of a table `width` wide whose other columns take `fixed`: what is left,
    shared by `ratios` (0 where nothing is: the caller writes blocks where any is under READABLE_TEXT)."""
    free = width - sum(fixed) - _overhead(len(fixed) + len(ratios))
    return [max(0, free * r // sum(ratios)) for r in ratios]


def _figures(cells: list[str], header: str) -> int:
    """A column of figures' width: its widest cell or header (figures are never cut)."""
    return max(map(len, [header, *cells]))


def _pods(verdicts: list[Verdict], width: int) -> RenderableType:
    """Wide: a table, one row a unit (its evidence one line an item, cut at the column's edge). Narrow: a block
    a unit, its figures on its first line, its evidence and fix below, each line cut at the edge."""
    title = Text(
        "Why each pod's GPU is underused, over the span (most waste first; GPU-hours and $ wasted; in full: "
        "--format json or html)"
    )
    rows = [_PodRow.of(v) for v in verdicts]
    headers = ["class", "conf", "GPU-h", "cost $"]
    cells = [
        [r.bottleneck for r in rows],
        [r.confidence for r in rows],
        [r.hours for r in rows],
        [r.cost for r in rows],
    ]
    fixed = [_figures(column, header) for column, header in zip(cells, headers, strict=True)]
    pod = min(max((len(line) for r in rows for line in [r.name, *r.about]), default=len("pod or GPU")), POD_COLUMN)
    why, fix = _shares(width, [pod, *fixed], [2, 1])
    if width < WIDE_COLUMNS or min(why, fix) < READABLE_TEXT:
        blocks: list[RenderableType] = [title]
        for r in rows:
            blocks.append(Text(""))
            blocks += _headline(r.name, f"{r.bottleneck} {r.confidence}  {r.hours} GPU-h wasted, ${r.cost}", width)
            for line in [*r.about, *r.why, f"to do: {r.fix}"]:
                blocks.append(Text("  " + line, no_wrap=True, overflow="ellipsis"))
        return Group(*blocks)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_lines=True, title_justify="left")
    table.add_column("pod or GPU", width=pod, overflow="fold")
    for header, w in zip(headers, fixed, strict=True):
        table.add_column(header, width=w, no_wrap=True, justify="left" if header == "class" else "right")
    table.add_column("why", width=why, no_wrap=True, overflow="ellipsis")
    table.add_column("what to do", width=fix, overflow="fold")
    for r in rows:
        table.add_row(
            "\n".join([r.name, *r.about]), r.bottleneck, r.confidence, r.hours, r.cost, "\n".join(r.why), r.fix
        )
    return table


@dataclass(frozen=True)
class _PodRow:
    """A verdict as the tables write it: its unit, what else is known of it, class, confidence, GPU-hours and
    money wasted, its evidence (a line an item, in units) and the first sentence of its fix."""

    name: str
    about: list[str]
    bottleneck: str
    confidence: str
    hours: str
    cost: str
    why: list[str]
    fix: str

    @classmethod
    def of(cls, v: Verdict) -> _PodRow:
        shares = [f"{part.share:.0%} {c}" for c, part in v.by_class.items()] if len(v.by_class) > 1 else []
        return cls(
            v.unit,
            _pod_lines(v)[1:] + [f"+ {s}" for s in v.secondary] + ([f"time: {', '.join(shares)}"] if shares else []),
            v.bottleneck,
            f"{v.confidence:.2f}",
            f"{v.wasted_gpu_seconds / 3600:,.2f}",
            f"{v.wasted_cost:,.2f}",
            [item_in_units(k, val) for k, val in v.evidence.items()],
            v.recommendation.split(". ")[0].split(": ")[0],
        )


def _pod_lines(v: Verdict) -> list[str]:
    """The unit, its owner and kind where known, its node, and how much of the span its samples cover."""
    lines = [v.unit]
    if v.owner_kind and v.owner_kind != "Pod":
        lines.append(f"{v.owner_kind} {v.owner}")
    if v.workload_kind != "unknown":
        lines.append(v.workload_kind + (f" ({v.engine})" if v.engine else ""))
    if v.node:
        lines.append(f"on {v.node}")
    if v.coverage < 0.99:  # gaps in the data: say how much of the span the verdict rests on
        lines.append(f"{v.coverage:.0%} of {duration(v.window_seconds)} sampled")
    return lines


def _headline(name: str, figures: str, width: int) -> list[RenderableType]:
    """A narrow block's first line: the name and its figures where both fit, else the name, then its figures
    on a line of their own, so that no figure is parted from its label by a wrap."""
    if len(name) + 2 + len(figures) <= width:
        return [Text.assemble((name, "bold"), "  " + figures)]
    return [Text(name, style="bold", overflow="fold"), Text("  " + figures)]


def _counted(count: int, noun: str) -> str:
    """A count and its noun, singular for one ("1 node", "2 GPUs")."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _plan(plan: Plan, width: int) -> RenderableType:
    """Wide: a table, one row an action, its change wrapped. Narrow: a block an action, its figures on its
    first line and its change wrapped under it."""
    total = plan.total
    why = f" ({plan.unprojected()})" if not plan.projected else ""
    title = Text(
        f"What to change: {plan.held()}, saving "
        f"{plan.saving(total.saving_usd_per_30d, total.saving_usd_span)}{why} (in full: --format json or html)"
    )
    headers = ["action", "GPUs", "saves / 30 d $" if plan.projected else "saved in span $", "confidence"]
    cells = [
        [a.action for a in plan.actions],
        [a.gpus_change() for a in plan.actions],
        [f"{a.saving_usd_per_30d:,.0f}" if plan.projected else f"{a.saving_usd_span:,.2f}" for a in plan.actions],
        [f"{a.confidence:.2f}" for a in plan.actions],
    ]
    fixed = [_figures(column, header) for column, header in zip(cells, headers, strict=True)]
    workload = min(max(len(a.owner) for a in plan.actions), POD_COLUMN)
    [change] = _shares(width, [workload, *fixed], [1])
    if width < WIDE_COLUMNS or change < READABLE_TEXT:
        blocks: list[RenderableType] = [title]
        for a in plan.actions:
            blocks.append(Text(""))
            figures = (
                f"{a.action}: GPUs {a.gpus_change()}, "
                f"saves {plan.saving(a.saving_usd_per_30d, a.saving_usd_span)}, confidence {a.confidence:.2f}"
            )
            blocks += _headline(a.owner, figures, width)
            # Wrapped here, not by rich, whose padding would end every line in spaces up to the width.
            blocks.append(Text(textwrap.fill(a.change(), width, initial_indent="  ", subsequent_indent="  ")))
            if a.done:
                blocks.append(
                    Text(textwrap.fill(f"done: {a.done}", width, initial_indent="  ", subsequent_indent="    "))
                )
        return Group(*blocks)
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("workload", width=workload, overflow="fold")
    for header, w in zip(headers, fixed, strict=True):
        table.add_column(header, width=w, no_wrap=True, justify="left" if header == "action" else "right")
    table.add_column("change", width=change, overflow="fold")
    for k, a in enumerate(plan.actions):
        table.add_row(a.owner, *(column[k] for column in cells), a.change() + (f" (done: {a.done})" if a.done else ""))
    return table


def _changes(outcomes: list[Outcome], width: int) -> RenderableType:
    """A block a change, regressions first: the workload, what changed and when, its word and confidence; its
    saving and figures before -> after; its reason, wrapped."""
    order = {"regressed": 0, "held": 1, "too_early": 2}
    regressed = sum(o.word == "regressed" for o in outcomes)
    blocks: list[RenderableType] = [
        Text(
            f"What changed: {_counted(len(outcomes), 'change')}, {regressed} regressed (before -> after over equal "
            "windows; in full: --format json or html)"
        )
    ]
    for o in sorted(outcomes, key=lambda o: (order[o.word], o.change.start)):
        c = o.change
        blocks.append(Text(""))
        figures = (
            f"{c.what} {c.values()} at {rfc3339(c.start)}: {o.word.replace('_', ' ')}, confidence {o.confidence:.2f}"
        )
        blocks += _headline(c.workload, figures, width)
        if o.before is not None and o.after is not None:
            lines = [
                o.saving_words()
                + (
                    f"; the plan proposed ${o.proposed.saving_usd_per_30d:,.0f} / 30 d ({o.proposed.action})"
                    if o.proposed is not None
                    else ""
                ),
                f"GPUs {o.before.gpus_held:.2f} -> {o.after.gpus_held:.2f}, ${o.before.cost_usd_per_day:,.2f} -> "
                f"${o.after.cost_usd_per_day:,.2f} a day, over {duration(o.window_seconds)} each",
            ]
            blocks += [
                Text(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ")) for line in lines
            ]
        blocks.append(Text(textwrap.fill(o.reason, width, initial_indent="  ", subsequent_indent="    ")))
    return Group(*blocks)


def _waste(verdicts: list[Verdict], dimension: str, width: int) -> Table:
    sums = waste_by(verdicts, dimension)
    cells = {
        "pods": [str(s.pods) for s in sums],
        "GPU-h sampled": [f"{s.gpu_hours:,.1f}" for s in sums],
        "GPU-h wasted": [f"{s.wasted_gpu_hours:,.2f}" for s in sums],
        "cost $": [f"{s.wasted_cost:,.2f}" for s in sums],
    }
    return _sums(f"Waste by {dimension}", dimension, [s.key for s in sums], cells, width)


def _sums(title: str, dimension: str, keys: list[str], cells: dict[str, list[str]], width: int) -> Table:
    """A table of sums by `dimension`: a row a key, its figures' columns right-aligned and never cut."""
    fixed = [_figures(column, header) for header, column in cells.items()]
    widest = max([len(dimension), *map(len, keys)])
    [name] = _shares(width, fixed, [1])
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column(dimension, width=min(widest, max(name, 10)), overflow="fold")
    for header, w in zip(cells, fixed, strict=True):
        table.add_column(header, width=w, no_wrap=True, justify="right")
    for k, key in enumerate(keys):
        table.add_row(key, *(column[k] for column in cells.values()))
    return table


def _cluster(s: Scheduling, width: int) -> RenderableType:
    """The cluster's share: per pool, its free GPU-hours, those stranded while pods waited and those nobody
    waited for; the pods that waited and why; pods on a pool not meant for them; namespaces with no GPU quota;
    what kube-state-metrics did not say. A table a part from WIDE_COLUMNS, else a block a row."""
    title = (
        f"The cluster's share: GPUs free while pods waited for them (kube-state-metrics, every "
        f"{duration(s.step)}; in full: --format json or html)"
    )
    parts: list[RenderableType] = [Text(textwrap.fill(title, width))]
    headers = ["nodes", "GPUs", "free GPU-h", "stranded GPU-h", "stranded $", "nobody waited GPU-h"]
    rows = [
        [
            str(p.nodes),
            str(p.gpus),
            f"{p.free_gpu_seconds / 3600:,.1f}",
            f"{p.stranded_gpu_seconds / 3600:,.1f}",
            f"{p.stranded_cost:,.2f}",
            f"{p.unwanted_gpu_seconds / 3600:,.1f}",
        ]
        for p in s.pools
    ]
    if width >= WIDE_COLUMNS:
        fixed = [_figures([r[k] for r in rows], h) for k, h in enumerate(headers)]
        table = Table(box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column(
            "pool / GPU model", width=min(max((len(p.name) for p in s.pools), default=16), POD_COLUMN), overflow="fold"
        )
        for header, w in zip(headers, fixed, strict=True):
            table.add_column(header, width=w, no_wrap=True, justify="right")
        for p, row in zip(s.pools, rows, strict=True):
            table.add_row(p.name, *row)
        parts.append(table)
    else:
        for p, row in zip(s.pools, rows, strict=True):
            parts += _headline(p.name, f"{_counted(p.nodes, 'node')}, {_counted(p.gpus, 'GPU')}", width)
            parts.append(Text(f"  free {row[2]} GPU-h: stranded {row[3]} (${row[4]}), nobody waited {row[5]}"))
    lines: list[str] = []
    if s.pending:
        lines.append("Pods that waited for GPUs, longest first:")
    for waited in s.pending[:MAX_WAITS]:
        until = "still waiting" if waited.scheduled_at is None else "then scheduled"
        asked = f"{gpu_count(waited.gpus)} GPU{'' if waited.gpus == 1 else 's'}"
        lines.append(
            f"- {waited.namespace}/{waited.pod} asked {asked}, waited {duration(waited.waited_seconds)} ({until}): "
            f"{waited.reason}, {REASON_TEXT[waited.reason]}; {waited.evidence}"
        )
    if len(s.pending) > MAX_WAITS:
        lines.append(f"- and {len(s.pending) - MAX_WAITS:,} more that waited less (every one: --format json or csv)")
    for m in s.misplaced:
        lines.append(
            f"- {m.namespace}/{m.pod} ({m.kind}) ran on pool {m.pool} for {duration(m.seconds)}; pool {m.meant_pool}, "
            f"meant for it, had room for {duration(m.room_seconds)}"
        )
    for q in s.quota_gaps:
        others = (
            f"; other namespaces' pods waited {duration(q.others_waited_seconds)} while it held over "
            f"{q.dominant_share:.0%}"
            if q.others_waited_seconds
            else ""
        )
        lines.append(
            f"- {q.namespace} has no GPU quota: it held up to {q.peak_gpus:g} GPUs ({q.peak_share:.1%} of the "
            f"cluster's), {spent(q.gpu_seconds)} in all{others}. To do: {quota_advice(q)}"
        )
    lines += [f"- not known: {note}" for note in s.missing]
    parts += [Text(textwrap.fill(line, width, subsequent_indent="  ")) for line in lines]
    return Group(*parts)


def read_files_with_progress(
    files: list[str | Path], scrape_interval: float, gpu_model: str, scrape_start: float | None
) -> pd.DataFrame:
    """readers.read_files() of `files`, with a progress bar on an interactive terminal (files of millions of
    rows take a while); silently otherwise."""
    try:
        small = len(files) == 1 and os.path.getsize(files[0]) < 50_000_000
    except OSError:  # the reader says what is wrong with the file, in its own words
        small = True
    if small or not sys.stderr.isatty():
        return readers.read_files(files, scrape_interval, gpu_model, scrape_start)
    # Scrapes are one series over all their files, in order: read together, after the other files.
    scrapes: list[str | Path] = [path for path in files if readers.detect(Path(path)) == "dcgm-exporter"]
    frames = []
    with Progress(transient=True) as progress:
        task = progress.add_task("reading", total=len(files))
        for path in files:
            if path not in scrapes:
                frames.append((str(path), readers.read_files([path])))
                progress.advance(task)
        if scrapes:
            frames.append((str(scrapes[0]), readers.read_files(scrapes, scrape_interval, "", scrape_start)))
            progress.advance(task, len(scrapes))
    return readers.combine(frames, gpu_model)

"""`gpulens report --format html`: one self-contained page (inline CSS and SVG, no script, nothing
fetched), readable offline and attachable to a ticket: the fleet's waste by class and by namespace, a
table of every pod's headline verdict, and a timeline per pod (activity, memory, class bands) for the
pods that wasted the most.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pandas as pd

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.history import sample_interval
from gpulens.analyzer.judging.scheduling import REASON_TEXT, Scheduling, quota_advice, spent
from gpulens.analyzer.outputs.actions import Plan
from gpulens.analyzer.outputs.outcomes import Outcome
from gpulens.analyzer.outputs.showback import Charge, ShowbackSum, showback_by
from gpulens.analyzer.outputs.summary import waste_by
from gpulens.analyzer.outputs.timelines import POINTS, TIMELINE_COLUMNS, TimelineBins, unit_samples
from gpulens.core.bottlenecks import BOTTLENECKS, HELD_WITHOUT_POD, PROBLEMS, UNALLOCATED
from gpulens.core.catalog import model_info
from gpulens.core.times import for_people, rfc3339

#: One colour per class (core/bottlenecks.py).
COLOURS = {b.name: b.colour for b in BOTTLENECKS}


#: Timelines drawn, most waste first; the table lists every pod.
MAX_TIMELINES = 40

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;padding:0 16px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}.scroll{overflow-x:auto}p,li{overflow-wrap:break-word}
table{border-collapse:collapse;width:100%;margin:8px 0}td,th{border-bottom:1px solid #ddd;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.n,th.n{text-align:right;white-space:nowrap}
th.w{width:35%}.bar{display:inline-block;height:10px;vertical-align:middle;max-width:100%}
.chip{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.small{color:#666;font-size:12px}.pod{margin:18px 0}.summary span{display:inline-block;margin:0 28px 8px 0}
.summary b{font-size:20px;display:block}.plot svg{display:block;width:100%;height:110px}
.axis{position:relative;height:16px;font-size:11px;color:#666}.tick{position:absolute;white-space:nowrap;
transform:translateX(-50%)}.tick.start{transform:none}.tick.end{transform:translateX(-100%)}
.key{font-weight:bold}.key.mem{color:#1f4e9c}.key.pow{color:#b15928}.legend span{white-space:nowrap;margin-right:10px}
@media (max-width:640px){body{margin:8px auto;padding:0 8px}.tick.wide-only{display:none}
.summary span{margin-right:16px}table.pods thead{display:none}
table.pods tr{display:block;border-bottom:1px solid #ccc;padding:6px 0}
table.pods td{display:block;border:0;padding:2px 0;text-align:left}
table.pods td[data-label]::before{content:attr(data-label) ": ";color:#666}}
"""
TITLE = "gpulens: why are the GPUs idle?"
TIMELINES_NOTE = (
    "<p class=small>Bands: the class of each episode. Lines, each from 0 (bottom) to 100% (top) of its own "
    "scale: activity, memory used of the GPU's capacity, and power drawn of its model's limit; a gap in the "
    "data is a gap in the lines.</p>"
)


def render(
    verdicts: list[Verdict],
    samples: pd.DataFrame,
    plan: Plan | None = None,
    title: str = TITLE,
    scheduling: Scheduling | None = None,
    changes: list[Outcome] | None = None,
    bills: list[Charge] | None = None,
    checks: list[str] | None = None,
) -> str:
    """The report for `verdicts` (most waste first), opening with the `plan`, then what the GPUs cost (showback's
    `bills`), the cluster's share and the changes its workloads went through where kube-state-metrics was read,
    with timelines drawn from `samples` (unit_samples() of a trace, or TimelineBins.samples() of a report read in
    pieces)."""
    verdicts = by_waste(verdicts)
    drawn = verdicts[:MAX_TIMELINES]
    return page(
        title,
        f"<div id=summary>{fleet_summary(verdicts)}</div>",
        *([plan_section(plan)] if plan is not None else []),
        *([f"<div id=showback>{showback_section(bills, verdicts, checks or [])}</div>"] if bills else []),
        *([f"<div id=cluster>{cluster_section(scheduling)}</div>"] if scheduling is not None else []),
        *([f"<div id=changes>{changes_section(changes)}</div>"] if changes else []),
        f"<div id=waste>{waste_tables(verdicts)}</div>",
        "<h2>Pods</h2>",
        pod_table("".join(pod_row(v) for v in verdicts)),
        f"<h2>Timelines: {_drawn_heading(len(drawn))}</h2>",
        TIMELINES_NOTE,
        f"<div id=timelines>{timelines(drawn, samples)}</div>",
    )


def plan_section(plan: Plan) -> str:
    """What to change: the plan's actions, most saving first, with their totals, and what it left alone."""
    total = plan.total
    if not plan.actions:
        return "<h2>What to change</h2><p>Nothing: no workload has a change to propose.</p>"
    saves = "saves / 30 d" if plan.projected else "saved in the span"
    saved = plan.saving(total.saving_usd_per_30d, total.saving_usd_span)
    teams = ", ".join(
        f"{_e(s.key)} {plan.saving(s.saving_usd_per_30d, s.saving_usd_span)}"
        for s in plan.by_team
        if s.key != "(no team)" or len(plan.by_team) > 1
    )
    rows = "".join(
        f"<tr><td>{_e(a.owner)}<div class=small>{_e(a.team or '')}</div></td>"
        f"<td><b>{_e(a.action)}</b>: {_e(a.change())}"
        f"{f'<div><b>done</b>: {_e(a.done)}</div>' if a.done else ''}<div class=small>"
        f"{_e('; '.join(f'{k}: {v}' for k, v in {**a.evidence, **a.assumptions}.items()))}</div></td>"
        f"<td class=n data-label='GPUs'>{_e(a.gpus_change('→'))}</td>"
        f"<td class=n data-label='{saves}'>"
        f"${a.saving_usd_per_30d if plan.projected else a.saving_usd_span:,.{0 if plan.projected else 2}f}</td>"
        f"<td class=n data-label='confidence'>{a.confidence:.2f}</td></tr>"
        for a in plan.actions
    )
    skipped = "".join(f"<li>{_e(n.owner)}: {_e(n.reason)}</li>" for n in plan.not_planned)
    return (
        "<h2>What to change</h2>"
        f"<p><b>{total.actions}</b> change{'s' if total.actions != 1 else ''}: {_e(plan.held('→'))}, saving "
        f"<b>{saved}</b> "
        f"{f'(${total.saving_usd_span:,.2f} over the span)' if plan.projected else f'({_e(plan.unprojected())})'}"
        f"{f'; by team: {teams}' if teams else ''}.</p>"
        f"<p>{_e(fleet_line(plan))}</p>"
        "<div class=scroll><table class=pods><thead><tr><th>workload</th><th>change</th><th class=n>GPUs</th>"
        f"<th class=n>{saves}</th><th class=n>confidence</th></tr></thead><tbody>{rows}</tbody></table></div>"
        + (f"<p class=small>Not planned:</p><ul class=small>{skipped}</ul>" if skipped else "")
    )


#: The efficiency funnel's columns (showback.FUNNEL), as the showback table heads them.
FUNNEL_LABELS = ("busy", "SM active", "OFU")


def showback_section(bills: list[Charge], verdicts: list[Verdict], checks: tuple[str, ...] | list[str] = ()) -> str:
    """What the GPUs cost: by team (by namespace where no team label was read), the device-hours each held, what
    they cost, its efficiency funnel (the share of them a kernel ran, the SMs were active, the peak tensor FLOPs
    delivered; a bar: cost, its busy part filled), and the waste; then the span, and what the figures assume
    (docs/showback.md)."""
    dimension = "team" if any(v.team for v in verdicts) else "namespace"
    sums = showback_by(bills, dimension)
    top = max((s.cost for s in sums), default=0.0) or 1.0

    def row(s: ShowbackSum) -> str:
        funnel = s.funnel()
        shares = "".join(
            f"<td class=n data-label='{label}'>{'-' if share is None else f'{share:.0%}'}</td>"
            for label, share in zip(FUNNEL_LABELS, funnel.values(), strict=True)
        )
        busy = funnel["busy"] if funnel["busy"] is not None else s.used_share or 0.0
        return (
            f"<tr><td>{_e(s.key)}</td><td class=n data-label='GPU-h held'>{s.gpu_hours:,.1f}</td>"
            f"<td class=n data-label='cost'>${s.cost:,.2f}</td>{shares}"
            f"<td class=n data-label='GPU-h wasted'>{s.wasted_gpu_hours:,.2f}</td>"
            f"<td class=n data-label='wasted'>${s.wasted_cost:,.2f}</td>"
            f"<td class=w><span class=bar style='width:{100 * s.cost / top:.0f}%;background:linear-gradient(90deg,"
            f"#2a7 {100 * busy:.0f}%,#bbb 0)'></span></td></tr>"
        )

    first, last = min(c.day for c in bills), max(c.day for c in bills)
    priced = sorted({(c.gpu_model, c.price_per_hour) for c in bills})
    prices = "; ".join(f"{model} ${price:,.2f}/h" for model, price in priced)
    total = sum(s.cost for s in sums)
    heads = "".join(f"<th class=n>{label}</th>" for label in FUNNEL_LABELS)
    return (
        f"<h2>What the GPUs cost, by {dimension}</h2>"
        f"<p><b>${total:,.2f}</b> for {sum(s.gpu_hours for s in sums):,.1f} GPU-hours held, {_e(first)} to "
        f"{_e(last)} (UTC days). In full, a row a workload, model and day: --format csv --by charge, or FOCUS: "
        "--format focus.</p>"
        f"<div class=scroll><table><tr><th>{dimension}</th><th class=n>GPU-h held</th><th class=n>cost</th>{heads}"
        "<th class=n>GPU-h wasted</th><th class=n>wasted</th><th class=w></th></tr>"
        f"{''.join(row(s) for s in sums)}</table></div>"
        "<p class=small>Held: the time its pods' GPUs were sampled (a MIG instance's hour at its share of its GPU's "
        "price). Of that time, where its field was read (- where not): busy, a kernel ran (utilization); SM active, "
        "the SMs worked (profiling fields); OFU, the peak tensor FLOPs delivered (tensor activity x SM clock over "
        f"its maximum: Pedersen et al., arXiv 2605.20799). Prices: {_e(prices)}.</p>"
        + "".join(f"<p class=small>{_e(line)}</p>" for line in checks)
    )


def cluster_section(s: Scheduling) -> str:
    """The cluster's share: per pool its free, stranded and unwanted GPU-hours, a chart of its free GPUs
    against the GPUs pods waited for, the pods that waited and why, pods off their pool, namespaces without
    a GPU quota, and what kube-state-metrics did not say."""
    rows = "".join(
        f"<tr><td>{_e(p.name)}</td><td class=n data-label='nodes'>{p.nodes}</td>"
        f"<td class=n data-label='GPUs'>{p.gpus}</td>"
        f"<td class=n data-label='free GPU-h'>{p.free_gpu_seconds / 3600:,.1f}</td>"
        f"<td class=n data-label='stranded GPU-h'>{p.stranded_gpu_seconds / 3600:,.1f}</td>"
        f"<td class=n data-label='stranded $'>${p.stranded_cost:,.2f}</td>"
        f"<td class=n data-label='nobody waited GPU-h'>{p.unwanted_gpu_seconds / 3600:,.1f}</td></tr>"
        for p in s.pools
    )
    charts = "".join(_pool_chart(s, p.name, p.gpus) for p in s.pools)
    waits = "".join(
        f"<tr><td>{_e(w.namespace)}/{_e(w.pod)}<div class=small>{_e(w.owner)} {_e(w.kind)}</div></td>"
        f"<td class=n data-label='GPUs'>{w.gpus:g}</td>"
        f"<td class=n data-label='waited'>{_e(duration(w.waited_seconds))}</td>"
        f"<td data-label='why'><b>{_e(w.reason)}</b>: {_e(REASON_TEXT[w.reason])}"
        f"<div class=small>{_e(w.evidence)}; judged against {_e(w.judged_against)}; "
        f"{'still waiting' if w.scheduled_at is None else 'scheduled ' + _e(for_people(w.scheduled_at))}"
        "</div></td></tr>"
        for w in s.pending
    )
    notes = [
        f"{m.namespace}/{m.pod} ({m.kind}) ran on pool {m.pool} for {duration(m.seconds)}; pool {m.meant_pool}, "
        f"meant for it, had room for {duration(m.room_seconds)}"
        for m in s.misplaced
    ]
    notes += [
        f"{q.namespace} has no GPU quota: it held up to {q.peak_gpus:g} GPUs ({q.peak_share:.1%} of the cluster's), "
        f"{spent(q.gpu_seconds)} in all. {quota_advice(q)}"
        for q in s.quota_gaps
    ]
    notes += [f"Not known: {note}" for note in s.missing]
    return (
        "<h2>The cluster's share: GPUs free while pods waited</h2>"
        f"<p class=small>From kube-state-metrics every {_e(duration(s.step))}: stranded GPUs were free while a pod "
        "that could use them waited for more than any node had free; nobody waited for the rest.</p>"
        "<div class=scroll><table class=pods><thead><tr><th>pool / GPU model</th><th class=n>nodes</th>"
        "<th class=n>GPUs</th><th class=n>free GPU-h</th><th class=n>stranded GPU-h</th><th class=n>stranded $</th>"
        f"<th class=n>nobody waited GPU-h</th></tr></thead><tbody>{rows}</tbody></table></div>{charts}"
        + (
            "<h3>Pods that waited for GPUs</h3><div class=scroll><table class=pods><thead><tr><th>pod</th>"
            "<th class=n>GPUs</th><th class=n>waited</th><th>why</th></tr></thead>"
            f"<tbody>{waits}</tbody></table></div>"
            if waits
            else "<p>No GPU pod waited long enough to name.</p>"
        )
        + (f"<ul>{''.join(f'<li>{_e(n)}</li>' for n in notes)}</ul>" if notes else "")
    )


def changes_section(outcomes: list[Outcome]) -> str:
    """What changed: a row a change, regressions first, with its word, saving and figures before -> after, and a
    chart of the two windows on one axis."""
    order = {"regressed": 0, "held": 1, "too_early": 2}
    rows = []
    for o in sorted(outcomes, key=lambda o: (order[o.word], o.change.start)):
        c = o.change
        figures = ""
        if o.before is not None and o.after is not None:
            proposed = (
                f"; the plan proposed ${o.proposed.saving_usd_per_30d:,.0f} / 30 d ({_e(o.proposed.action)})"
                if o.proposed is not None
                else ""
            )
            figures = (
                f"<div>{_e(o.saving_words())}{proposed}</div>"
                f"<div class=small>{_e('; '.join(f'{k}: {v}' for k, v in o.evidence.items()))}</div>"
                f"<div class=small>{_e(o.saving_basis)}</div>{_change_chart(o)}"
            )
        rows.append(
            f"<tr class='{o.word}'><td>{_e(c.workload)}<div class=small>{_e(o.team)} {_e(o.workload_kind)}</div></td>"
            f"<td>{_e(c.what)} {_e(c.values().replace('->', '→'))}<div class=small>{_e(rfc3339(c.start))}</div></td>"
            f"<td><b>{_e(o.word.replace('_', ' '))}</b> ({o.confidence:.2f}): {_e(o.reason)}{figures}</td></tr>"
        )
    regressed = sum(o.word == "regressed" for o in outcomes)
    return (
        "<h2>What changed</h2>"
        f"<p><b>{len(outcomes)}</b> change{'s' if len(outcomes) != 1 else ''} the workloads went through, "
        f"<b>{regressed}</b> regressed: each judged over two windows of equal length, before and after, that "
        "leave its transition out (docs/changes.md).</p>"
        "<div class=scroll><table class=pods><thead><tr><th>workload</th><th>change</th><th>what became of it"
        f"</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _change_chart(o: Outcome) -> str:
    """The two windows on one axis (hours from each window's start): GPUs held before (grey) and after (blue),
    dashed where it is the work they did, on a scale from 0 to the most held."""
    assert o.before is not None and o.after is not None
    points = [p for f in (o.before, o.after) for p in f.profile]
    if not points:
        return ""
    top = max(max(p[1] for p in points), 1e-9)

    def line(profile: tuple[tuple[float, float, float], ...], k: int, colour: str, what: str) -> str:
        drawn = " ".join(f"{p[0] / o.window_seconds * WIDTH:.1f},{HEIGHT - p[k] / top * HEIGHT:.1f}" for p in profile)
        dash = " stroke-dasharray='4 3'" if k == 2 else ""
        return (
            f"<polyline class='{what}' fill='none' stroke='{colour}' stroke-width='1.5'{dash} "
            f"vector-effect='non-scaling-stroke' points='{drawn}'/>"
        )

    lines = "".join(
        line(f.profile, k, colour, f"{side}-{what}")
        for side, f, colour in (("before", o.before, "#999"), ("after", o.after, "#2166ac"))
        for k, what in ((1, "held"), (2, "work"))
    )
    return (
        f"<div class=plot><svg viewBox='0 0 {WIDTH} {HEIGHT}' preserveAspectRatio='none' role=img "
        f"aria-label='GPUs held and work before and after the change of {_e(o.change.workload)}'>"
        f"<rect x='0' y='0' width='{WIDTH}' height='{HEIGHT}' fill='#fafafa' stroke='#ccc' "
        f"vector-effect='non-scaling-stroke'/>{lines}</svg></div><div class=small>GPUs held before (grey) and "
        f"after (blue), solid; their work, dashed; 0 to {top:.2f} GPUs over the {duration(o.window_seconds)} of "
        "each window</div>"
    )


def _pool_chart(s: Scheduling, name: str, gpus: int) -> str:
    """A pool's free GPUs (green) and the GPUs pods waiting for it asked (red) over the span, each bin's mean,
    on a scale from 0 to the pool's GPUs (or the most asked, if more)."""
    free, asked = s.timelines.get(name, (np.zeros(0), np.zeros(0)))
    if not len(free):
        return ""
    top = max(float(gpus), float(asked.max(initial=0.0)), 1.0)
    xs = (np.arange(len(free)) + 0.5) / len(free) * WIDTH

    def line(values: np.ndarray, colour: str, what: str) -> str:
        points = " ".join(f"{x:.1f},{HEIGHT - v / top * HEIGHT:.1f}" for x, v in zip(xs, values, strict=True))
        return (
            f"<polyline class='{what}' fill='none' stroke='{colour}' stroke-width='1.5' "
            f"vector-effect='non-scaling-stroke' points='{points}'/>"
        )

    end = s.start + s.span_seconds
    axis = "".join(
        f"<span class='tick' style='left:{(tick - s.start) / s.span_seconds:.2%}'>{_e(label)}</span>"
        for tick, label in _ticks(s.start, end)[1:-1]
    )
    return (
        f"<div class=pod><b>{_e(name)}</b> <span class=small>free GPUs (green) and GPUs asked by pods waiting "
        f"for it (red), 0 to {top:g}</span><div class=plot><svg viewBox='0 0 {WIDTH} {HEIGHT}' "
        f"preserveAspectRatio='none' role=img aria-label='free and asked GPUs of {_e(name)}'>"
        f"<rect x='0' y='0' width='{WIDTH}' height='{HEIGHT}' fill='#fafafa' stroke='#ccc' "
        f"vector-effect='non-scaling-stroke'/>{line(free, '#1a9850', 'free')}{line(asked, '#d73027', 'asked')}"
        f"</svg><div class=axis>{axis}</div></div></div>"
    )


def fleet_line(plan: Plan) -> str:
    """The fleet after the plan, in one sentence: the GPUs and whole nodes freed once packed, per model."""
    parts = []
    for p in plan.fleet:
        if p.gpus_freed > 0:
            nodes = f" ({p.nodes_freed} whole node{'s' if p.nodes_freed != 1 else ''})" if p.nodes_freed else ""
            parts.append(f"{p.gpus_freed} of {p.gpus_present} {p.gpu_model}{nodes}")
        elif p.gpus_freed < 0:
            parts.append(f"{-p.gpus_freed} {p.gpu_model} to add")
    if not parts:
        return "Packed onto the GPUs present, the plan frees no whole GPU."
    saving = sum(p.saving_usd_per_30d for p in plan.fleet)
    slack = sum(p.gpus_needed - p.lower_bound for p in plan.fleet)
    money = f": ${saving:,.0f} per 30 days" if plan.projected else ""
    return (
        f"Packed onto the GPUs present (first-fit decreasing, {slack} GPU{'s' if slack != 1 else ''} above the "
        f"lower bound), it frees {'; '.join(parts)}{money}."
    )


def page(title: str, *parts: str, head: str = "") -> str:
    """A whole page: its title, the style and class legend, and `parts`."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{STYLE}</style>{head}</head><body>"
        f"<h1>{_e(title)}</h1>{_legend()}{''.join(parts)}</body></html>\n"
    )


def by_waste(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """Most waste first; ties by name, so that a page's order is stable from one refresh to the next."""
    return sorted(verdicts, key=lambda v: (-v.wasted_gpu_seconds, v.unit))


def waste_tables(verdicts: list[Verdict]) -> str:
    """The waste by class, namespace, workload and team (where teams are known)."""
    parts = [
        "<h2>Waste by class</h2>",
        _waste_table(verdicts, "class", "class"),
        "<h2>Waste by namespace</h2>",
        _waste_table(verdicts, "namespace", "namespace"),
        "<h2>Waste by workload</h2>",
        _waste_table(verdicts, "owner", "workload (namespace/kind/name)"),
    ]
    if any(v.team for v in verdicts):
        parts += ["<h2>Waste by team</h2>", _waste_table(verdicts, "team", "team")]
    return "".join(parts)


def timelines(drawn: list[Verdict], samples: pd.DataFrame) -> str:
    """The timelines of `drawn`, from `samples`."""
    series = _series(samples, drawn)
    return "".join(_timeline(v, series.get(v.unit)) for v in drawn)


def _e(text: object) -> str:
    return html.escape(str(text))


def _drawn_heading(count: int) -> str:
    return "the pod" if count == 1 else f"the {count} pods that wasted the most"


def drawn_units(verdicts: list[Verdict]) -> list[str]:
    """The units whose timelines the report draws: the MAX_TIMELINES that wasted the most."""
    return [v.unit for v in by_waste(verdicts)[:MAX_TIMELINES]]


def fleet_summary(verdicts: list[Verdict]) -> str:
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
UNHELD_LABELS = {
    UNALLOCATED: "no pod holds (unallocated)",
    HELD_WITHOUT_POD: "used outside any pod (held without a pod)",
}


def _legend() -> str:
    chips = (f"<span><span class=chip style='background:{c}'></span>{_e(n)}</span>" for n, c in COLOURS.items())
    return f"<p class=legend>{''.join(chips)}</p>"


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
    return f"<div class=scroll><table>{head}{rows or '<tr><td colspan=4>No waste.</td></tr>'}</table></div>"


def pod_table(rows: str) -> str:
    """The table of pods (and GPUs no pod holds) around `rows` (pod_row()s); on a narrow screen each row
    stacks into a card, its figures labelled, rather than squeezing the fix into a column a word wide."""
    return (
        "<div class=scroll><table class=pods id=units><thead><tr><th>pod or GPU</th><th>headline</th>"
        "<th>time by class</th><th class=n>GPU-h wasted</th><th class=n>cost</th><th>what to do</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def pod_row(v: Verdict, now: Verdict | None = None) -> str:
    """One unit's row: its headline over the span (and, live, its class `now`), time by class, waste, fix."""
    shares = ", ".join(f"{name} {part.share:.0%}" for name, part in v.by_class.items())
    current = f"<div class=small>now: {_e(now.bottleneck)}</div>" if now is not None else ""
    kind = "" if v.workload_kind == "unknown" else f"{v.workload_kind}{f' ({v.engine})' if v.engine else ''}, "
    return (
        f"<tr data-unit='{_e(v.unit)}'><td>{_e(v.unit)}<div class=small>{_e(kind)}{_e(v.node)} {_e(v.gpu_model)}</div>"
        "</td>"
        f"<td><span class=chip style='background:{COLOURS[v.bottleneck]}'></span>{_e(v.bottleneck)}"
        f"<div class=small>confidence {v.confidence:.2f}</div>{current}</td>"
        f"<td data-label='time by class'>{_e(shares)}</td>"
        f"<td class=n data-label='GPU-h wasted'>{v.wasted_gpu_seconds / 3600:,.2f}</td>"
        f"<td class=n data-label='cost'>${v.wasted_cost:,.2f}</td><td class=small>{_e(v.recommendation)}</td></tr>"
    )


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
    """Per unit drawn: the means of TIMELINE_COLUMNS in POINTS bins over its span."""
    wanted = {v.unit: v for v in verdicts}
    samples = samples[samples["unit"].isin(list(wanted))]
    out = {}
    for name, part in samples.groupby("unit", sort=False):
        v = wanted[str(name)]
        start, span = v.episodes[0].start if v.episodes else part["ts"].min(), max(v.window_seconds, 1.0)
        bins = np.clip(((part["ts"] - start) / span * POINTS).astype(int), 0, POINTS - 1)
        out[str(name)] = part.groupby(bins)[list(TIMELINE_COLUMNS)].mean()
    return out


#: How each line is drawn: its stroke, and what its top (1.0) means for the legend.
_LINES = {
    "activity": "stroke='#111'",
    "memory": "stroke='#1f4e9c' stroke-dasharray='5 3'",
    "power": "stroke='#b15928' stroke-dasharray='1 2'",
}
#: The drawing's own units: x from 0 to WIDTH over the span, y from 0 (top, 100%) to HEIGHT (bottom, 0).
WIDTH, HEIGHT = 1000, 100


def _timeline(v: Verdict, series: pd.DataFrame | None) -> str:
    """One unit's timeline: its episodes as class bands and its signals as lines on one 0-100% scale, the
    SVG stretched to the page's width with its time axis labelled in HTML beneath, so that text keeps its
    size on any screen."""
    start = v.episodes[0].start if v.episodes else 0.0
    span = max(v.window_seconds, 1.0)

    def x(seconds: float) -> float:
        return (seconds - start) / span * WIDTH

    bands = "".join(
        f"<rect class=band data-class='{e.bottleneck}' x='{x(e.start):.2f}' y='0' "
        f"width='{max(x(e.end) - x(e.start), 0.2):.2f}' height='{HEIGHT}' fill='{COLOURS[e.bottleneck]}' "
        f"fill-opacity='0.35'><title>{_e(e.bottleneck)} {_e(for_people(e.start))} to {_e(for_people(e.end))}, "
        f"confidence {e.confidence:.2f}</title></rect>"
        for e in v.episodes
    )
    lines, legend = "", []
    if series is not None and len(series):
        bins = series.index.to_numpy()
        xs = (bins + 0.5) / POINTS * WIDTH
        for column, style in _LINES.items():
            values = np.clip(series[column].to_numpy(dtype=float), 0.0, 1.0)
            runs = _runs(bins, values)  # gaps are gaps: a line runs through consecutive bins with samples only
            for run in runs:
                points = " ".join(f"{xs[i]:.1f},{HEIGHT - values[i] * HEIGHT:.1f}" for i in run)
                lines += (
                    f"<polyline class={column} fill='none' stroke-width='1.5' vector-effect='non-scaling-stroke' "
                    f"{style} points='{points}'/>"
                )
            if runs:
                legend.append(_legend_entry(column, v, series))
    grid = "".join(
        f"<line x1='0' x2='{WIDTH}' y1='{HEIGHT * (1 - level)}' y2='{HEIGHT * (1 - level)}' stroke='#ccc' "
        "stroke-dasharray='2 4' vector-effect='non-scaling-stroke'/>"
        for level in (0.25, 0.5, 0.75)
    )
    ticks = _ticks(start, start + span)
    # On a phone (a plot of 340 px or more) only every stride-th tick is labelled: labels (~6.2 px a
    # character at 11 px) keep 1.5 times the longest one apart, so that a label kept inside the plot at its
    # edge does not meet its neighbour.
    longest = max((len(label) for _, label in ticks), default=0)
    stride = max(1, math.ceil(len(ticks) * 1.5 * 6.2 * longest / 340))
    axis = "".join(
        f"<span class='{_tick_class(k, x(tick) / WIDTH, stride)}' style='left:{x(tick) / WIDTH:.2%}'>{_e(label)}</span>"
        for k, (tick, label) in enumerate(ticks)
    )
    marks = "".join(
        f"<line x1='{x(tick):.2f}' x2='{x(tick):.2f}' y1='{HEIGHT - 4}' y2='{HEIGHT}' stroke='#888' "
        "vector-effect='non-scaling-stroke'/>"
        for tick, _ in ticks
    )
    return (
        f"<div class=pod><b>{_e(v.unit)}</b> <span class=small>{_e(v.bottleneck)}, "
        f"{v.wasted_gpu_seconds / 3600:,.2f} GPU-h wasted; {_e(v.node)} {_e(v.gpu_model)}</span>"
        f"<div class=plot><svg viewBox='0 0 {WIDTH} {HEIGHT}' preserveAspectRatio='none' role=img "
        f"aria-label='timeline of {_e(v.unit)}'>"
        f"<rect x='0' y='0' width='{WIDTH}' height='{HEIGHT}' fill='#fafafa' stroke='#ccc' "
        f"vector-effect='non-scaling-stroke'/>{bands}{grid}{lines}{marks}</svg>"
        f"<div class=axis>{axis}</div></div>"
        f"<div class=small>{'; '.join(legend) or 'no samples drawn'}. Time in UTC.</div></div>"
    )


def _tick_class(k: int, at: float, stride: int) -> str:
    """A tick label's classes: centred on its tick, but kept inside the plot at either edge; on a narrow
    screen, only every `stride`-th shown."""
    edge = " start" if at < 0.06 else " end" if at > 0.94 else ""
    return f"tick{edge}{' wide-only' if k % stride else ''}"


def _legend_entry(column: str, v: Verdict, series: pd.DataFrame) -> str:
    """What a line's 0-100% scale is, in the unit's own terms: memory of its capacity in GiB, power of its
    model's limit in watts."""
    if column == "activity":
        return "<span class=key>&#9473;</span> activity (SM, else engine or utilization) 0-100%"
    if column == "memory":
        capacity = float(np.nanmax(series["capacity"].to_numpy(dtype=float)))
        return f"<span class='key mem'>&#9476;</span> memory used, 0-{capacity / 1024**3:,.0f} GiB"
    return f"<span class='key pow'>&#8943;</span> power, 0-{model_info(v.gpu_model).power_limit_watts:,.0f} W"


def _runs(bins: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """The positions of `values` in runs without a gap: a gap is more than twice the usual spacing of the
    bins that have a value (data sampled coarser than a bin fills every other one, and is not a gap)."""
    present = np.flatnonzero(~np.isnan(values))
    if not len(present):
        return []
    spacing = np.diff(bins[present])
    usual = float(np.median(spacing)) if len(spacing) else 1.0
    return np.split(present, np.flatnonzero(spacing > 2 * max(usual, 1.0)) + 1)


#: Tick steps a time axis chooses from, in seconds: round numbers of seconds, minutes, hours and days.
TICK_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    2 * 86400,
    7 * 86400,
    14 * 86400,
    28 * 86400,
)
#: At most this many ticks on an axis (every other one is hidden on a narrow screen).
MAX_TICKS = 7


def _ticks(start: float, end: float) -> list[tuple[float, str]]:
    """Ticks at round times inside [start, end] (UTC), at the smallest step from TICK_STEPS that gives at
    most MAX_TICKS, each labelled with what changes at that step: seconds under a minute, hours and minutes
    under a day, the date where the day changes (and on the first tick), the date alone from a day up."""
    step = next((s for s in TICK_STEPS if (end - start) / s <= MAX_TICKS), TICK_STEPS[-1])
    first = math.ceil(start / step) * step
    out, previous_day = [], None
    for tick in np.arange(first, end + 1e-9, step):
        moment = pd.Timestamp(float(tick), unit="s", tz="UTC")
        day = moment.strftime("%m-%d")
        clock = moment.strftime("%H:%M:%S" if step < 60 else "%H:%M")
        label = day if step >= 86400 else clock if day == previous_day else f"{day} {clock}"
        out.append((float(tick), label))
        previous_day = day
    return out

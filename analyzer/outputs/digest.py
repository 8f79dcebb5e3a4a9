"""The digest: for each team, what its GPUs cost, wasted and delivered this period against the last, the workloads
that moved most and why, the changes it made and what became of them, and the plan's top actions; written as
Markdown and HTML, and as the messages Slack and Microsoft Teams incoming webhooks take (docs/showback.md, "The
weekly digest").

A digest is made of one report over both periods: the showback charges (a workload's devices a UTC day) are
split between the periods by their day, so each period's figures are the sum of its days' charges; the
changes are those first seen in this period, judged with the room the previous one gives them before; the plan
is made of the whole span's verdicts (two periods of samples size a workload more surely than one).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.outputs.actions import Action, Plan
from gpulens.analyzer.outputs.outcomes import Outcome
from gpulens.analyzer.outputs.report import STYLE
from gpulens.analyzer.outputs.showback import Charge, ShowbackSum, checks, showback_by
from gpulens.analyzer.outputs.summary import group_of
from gpulens.core.bottlenecks import RECOMMENDATIONS
from gpulens.core.times import rfc3339

#: The sections of the analyzer's page (livepage.py) a digest links to, by what the link says.
PAGE_SECTIONS = {"what changed": "changes", "waste by team and workload": "waste", "every pod and GPU": "units"}
#: Words for the funnel's fields (showback.FUNNEL), in its order.
FUNNEL_WORDS = {"busy": "busy (a kernel ran)", "sm_active": "SMs active", "flop": "tensor FLOPs of peak (OFU)"}


@dataclass(frozen=True)
class Periods:
    """This period and the one before it, [start, end) each, in unix seconds; each is whole UTC days."""

    start: float
    middle: float
    end: float

    def of_day(self, day: str) -> str:
        """The period a charge's UTC day ("2026-12-01") falls in: "this", "last", or "" outside both (a store's
        range query answers the span's end too, with the last sample before it: the next day's first step)."""
        if not rfc3339(self.start)[:10] <= day < rfc3339(self.end)[:10]:
            return ""
        return "this" if day >= rfc3339(self.middle)[:10] else "last"

    def words(self) -> str:
        last = rfc3339(self.end - 86400)[:10]
        return f"{rfc3339(self.middle)[:10]} to {last} (UTC), against the {duration(self.middle - self.start)} before"


@dataclass(frozen=True)
class Mover:
    """A workload whose cost moved between the periods, and what its pods were this period: the class that
    wasted the most of its time (healthy where none wasted), how many of its pods it held, and its fix."""

    workload: str
    cost_before: float
    cost_now: float
    gpu_hours_before: float
    gpu_hours_now: float
    wasted_cost_before: float
    wasted_cost_now: float
    #: "" where the workload held no GPU this period (it ended or moved out).
    bottleneck: str
    pods_of_it: int
    pods: int
    recommendation: str

    @property
    def change(self) -> float:
        return self.cost_now - self.cost_before

    @property
    def moved(self) -> float:
        """How far it moved: its cost's change, or its waste's where that moved more (the same GPUs, idle now)."""
        return max(abs(self.change), abs(self.wasted_cost_now - self.wasted_cost_before))


@dataclass(frozen=True)
class TeamDigest:
    """One team's digest (the team as the analyzer reads it: --team-label; "(no team)" for pods without one,
    "(no pod)" for the GPUs no pod held)."""

    team: str
    periods: Periods
    #: The team's charges summed over this period and the last (empty where it held no GPU in one).
    now: ShowbackSum
    before: ShowbackSum
    movers: list[Mover]
    changes: list[Outcome]
    actions: list[Action]
    #: The plan's saving phrase for an action (Plan.saving), per 30 days where the span projects one.
    savings: list[str]
    #: The analyzer's page ("" where none was given).
    link: str
    #: This period's charges checked against kube-state-metrics' requests and OpenCost's prices (showback.checks).
    checks: list[str] = field(default_factory=list)

    @property
    def subject(self) -> str:
        delta = self.now.cost - self.before.cost
        return (
            f"gpulens: {self.team}'s GPUs cost ${self.now.cost:,.0f} ({_signed(delta)} on the period before), "
            f"${self.now.wasted_cost:,.0f} wasted"
        )

    def links(self) -> dict[str, str]:
        base = self.link.split("#", 1)[0]
        return {words: f"{base}#{anchor}" for words, anchor in PAGE_SECTIONS.items()} if base else {}

    def rows(self) -> list[tuple[str, str, str]]:
        """The figures' table: (what, this period, the last)."""
        out = [
            ("GPU-hours held", f"{self.now.gpu_hours:,.1f}", f"{self.before.gpu_hours:,.1f}"),
            ("cost", f"${self.now.cost:,.2f}", f"${self.before.cost:,.2f}"),
            ("wasted", f"${self.now.wasted_cost:,.2f}", f"${self.before.wasted_cost:,.2f}"),
            ("GPU-hours wasted", f"{self.now.wasted_gpu_hours:,.1f}", f"{self.before.wasted_gpu_hours:,.1f}"),
        ]
        now, before = self.now.funnel(), self.before.funnel()
        for name, words in FUNNEL_WORDS.items():
            out.append((words, _share(now[name]), _share(before[name])))
        return out

    def mover_lines(self) -> list[str]:
        out = []
        for m in self.movers:
            cost = f"${m.cost_before:,.2f} -> ${m.cost_now:,.2f} ({_signed(m.change)})"
            hours = f"{m.gpu_hours_before:,.1f} -> {m.gpu_hours_now:,.1f} GPU-h"
            if not m.bottleneck:
                out.append(f"{m.workload}: {cost}, {hours}: it held no GPU this period")
                continue
            said = f"{m.bottleneck} ({m.pods_of_it} of {m.pods} pod{'s' if m.pods != 1 else ''})"
            wasted = f"wasted ${m.wasted_cost_before:,.2f} -> ${m.wasted_cost_now:,.2f}"
            out.append(f"{m.workload}: {cost}, {hours}; {said}, {wasted}: {m.recommendation}")
        return out

    def change_lines(self) -> list[str]:
        return [
            f"{o.change.workload}: {o.change.what} {o.change.values()} at {rfc3339(o.change.start)}: {o.word}, "
            f"{o.saving_words()}. {o.reason}"
            for o in self.changes
        ]

    def action_lines(self) -> list[str]:
        return [f"{a.owner}: {a.change()} ({a.gpus_change()} GPUs): {saving}" for a, saving in self._actions()]

    def _actions(self) -> Iterable[tuple[Action, str]]:
        return zip(self.actions, self.savings, strict=True)

    def markdown(self) -> str:
        """The digest as Markdown (CommonMark with GitHub's tables)."""
        parts = [f"# {self.team}: GPUs this period", "", self.periods.words(), ""]
        parts += ["| | this period | the period before |", "|---|--:|--:|"]
        parts += [f"| {_md(what)} | {now} | {before} |" for what, now, before in self.rows()]
        for title, lines, none in self._sections():
            parts += ["", f"## {title}", ""]
            parts += [f"- {_md(line)}" for line in lines] or [none]
        if self.links():
            parts += ["", "## On the analyzer's page", ""]
            parts += [f"- [{words}]({url})" for words, url in self.links().items()]
        return "\n".join(parts) + "\n"

    def html(self) -> str:
        """The digest as a page of its own (what an e-mail's HTML part holds)."""
        e = html.escape
        table = "".join(
            f"<tr><td>{e(what)}</td><td class=n>{e(now)}</td><td class=n>{e(before)}</td></tr>"
            for what, now, before in self.rows()
        )
        parts = [
            f"<h1>{e(self.team)}: GPUs this period</h1><p>{e(self.periods.words())}</p>",
            "<table id=figures><tr><th></th><th class=n>this period</th><th class=n>the period before</th></tr>"
            f"{table}</table>",
        ]
        for title, lines, none in self._sections():
            items = "".join(f"<li>{e(line)}</li>" for line in lines)
            parts.append(f"<h2>{e(title)}</h2>" + (f"<ul>{items}</ul>" if lines else f"<p>{e(none)}</p>"))
        if self.links():
            items = "".join(f"<li><a href='{e(url)}'>{e(words)}</a></li>" for words, url in self.links().items())
            parts.append(f"<h2>On the analyzer's page</h2><ul>{items}</ul>")
        return (
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>{e(self.subject)}</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
        )

    def _sections(self) -> list[tuple[str, list[str], str]]:
        """(title, lines, what to say where there are none)."""
        return [
            ("What moved, and why", self.mover_lines(), "No workload's cost moved."),
            ("What changed", self.change_lines(), "No change to its workloads was seen this period."),
            ("What to change", self.action_lines(), "The plan has nothing for its workloads."),
            ("What the figures were checked against", self.checks, "Nothing was read to check them against."),
        ]

    def slack(self) -> dict:
        """A Slack incoming webhook's message: Block Kit sections in Slack's mrkdwn, the text as its fallback."""
        figures = "\n".join(f"{what}: *{now}* (before: {before})" for what, now, before in self.rows())
        blocks: list[dict] = [
            {"type": "header", "text": {"type": "plain_text", "text": f"{self.team}: GPUs this period"[:150]}},
            _slack_section(f"{self.periods.words()}\n{figures}"),
        ]
        for title, lines, none in self._sections():
            blocks.append(_slack_section(f"*{title}*\n" + ("\n".join(f"• {line}" for line in lines) or none)))
        if self.links():
            blocks.append(_slack_section(" | ".join(f"<{url}|{words}>" for words, url in self.links().items())))
        return {"text": self.subject, "blocks": blocks}

    def msteams(self) -> dict:
        """A Microsoft Teams incoming webhook's message (a Workflows webhook takes the same): an Adaptive Card
        1.4 as the attachment, as Microsoft's "Send Adaptive Cards using an Incoming Webhook" shows it."""
        body: list[dict] = [
            {"type": "TextBlock", "text": f"{self.team}: GPUs this period", "size": "Large", "weight": "Bolder"},
            {"type": "TextBlock", "text": self.periods.words(), "wrap": True, "isSubtle": True},
            {
                "type": "FactSet",
                "facts": [{"title": what, "value": f"{now} (before: {before})"} for what, now, before in self.rows()],
            },
        ]
        for title, lines, none in self._sections():
            body.append({"type": "TextBlock", "text": title, "weight": "Bolder", "wrap": True})
            body += [{"type": "TextBlock", "text": f"- {line}", "wrap": True} for line in lines] or [
                {"type": "TextBlock", "text": none, "wrap": True}
            ]
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": body,
            "actions": [{"type": "Action.OpenUrl", "title": words, "url": url} for words, url in self.links().items()],
        }
        attachment = {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        return {"type": "message", "attachments": [attachment]}


#: Slack's most characters in a section's text (Block Kit reference: section, text).
SLACK_SECTION_CHARS = 3000


def _slack_section(text: str) -> dict:
    if len(text) > SLACK_SECTION_CHARS:
        text = text[: SLACK_SECTION_CHARS - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _signed(dollars: float) -> str:
    return f"{'+' if dollars >= 0 else '-'}${abs(dollars):,.2f}"


def _share(value: float | None) -> str:
    return "not read" if value is None else f"{value:.1%}"


def _md(text: str) -> str:
    """Text in a Markdown line or table cell: its markup characters escaped."""
    for char in "\\|*_[]<>`":
        text = text.replace(char, "\\" + char)
    return text


def digests(
    verdicts: list[Verdict],
    plan: Plan,
    changes: list[Outcome] | None,
    bills: list[Charge],
    periods: Periods,
    link: str = "",
    top: int = 3,
) -> list[TeamDigest]:
    """Each team's digest over `periods`, from one report over both: costliest team first. `top` movers and
    actions each."""
    this = [c for c in bills if periods.of_day(c.day) == "this"]
    last = [c for c in bills if periods.of_day(c.day) == "last"]
    now_by_team = {s.key: s for s in showback_by(this, "team")}
    before_by_team = {s.key: s for s in showback_by(last, "team")}
    verdicts_of: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        verdicts_of[v.workload].append(v)
    # A workload's team as its charges name it (summary.group_of): its actions and changes go to the same team.
    team_of = {workload: group_of("team")(held[0]) for workload, held in verdicts_of.items()}
    out = []
    for team in sorted(now_by_team.keys() | before_by_team.keys()):
        now = {s.key: s for s in showback_by((c for c in this if c.team == team), "owner")}
        before = {s.key: s for s in showback_by((c for c in last if c.team == team), "owner")}
        movers = [
            _mover(workload, before.get(workload), now.get(workload), verdicts_of[workload], periods)
            for workload in now.keys() | before.keys()
        ]
        movers = sorted((m for m in movers if m.moved >= 0.005), key=lambda m: (-m.moved, m.workload))
        team_changes = [
            o
            for o in changes or []
            if team_of.get(o.change.workload) == team and periods.middle <= o.change.start < periods.end
        ]
        actions = sorted(
            (a for a in plan.actions if team_of.get(a.owner) == team), key=lambda a: (-a.saving_usd_span, a.owner)
        )[:top]
        out.append(
            TeamDigest(
                team,
                periods,
                now_by_team.get(team, ShowbackSum(team)),
                before_by_team.get(team, ShowbackSum(team)),
                movers[:top],
                team_changes,
                actions,
                [plan.saving(a.saving_usd_per_30d, a.saving_usd_span) for a in actions],
                link,
                checks([c for c in this if c.team == team]),
            )
        )
    return sorted(out, key=lambda d: (-d.now.cost, d.team))


def _mover(
    workload: str,
    before: ShowbackSum | None,
    now: ShowbackSum | None,
    verdicts: list[Verdict],
    periods: Periods,
) -> Mover:
    """The workload's figures in both periods, and its pods' class this period: of its episodes' time in the
    period, the class that wasted the most (the one held longest where none wasted)."""
    wasted: dict[str, float] = defaultdict(float)
    held: dict[str, float] = defaultdict(float)
    of_class: dict[str, set[str]] = defaultdict(set)
    pods = set()
    for v in verdicts:
        for e in v.episodes:
            inside = min(e.end, periods.end) - max(e.start, periods.middle)
            if inside <= 0:
                continue
            pods.add(v.unit)
            of_class[e.bottleneck].add(v.unit)
            held[e.bottleneck] += inside
            wasted[e.bottleneck] += e.wasted_gpu_seconds * inside / max(e.end - e.start, 1e-9)
    bottleneck, recommendation = "", ""
    if held:
        bottleneck = max(held, key=lambda name: (wasted[name], held[name], name))
        headline = next((v for v in verdicts if v.bottleneck == bottleneck), None)
        recommendation = headline.recommendation if headline is not None else RECOMMENDATIONS[bottleneck]
    return Mover(
        workload,
        before.cost if before else 0.0,
        now.cost if now else 0.0,
        before.gpu_hours if before else 0.0,
        now.gpu_hours if now else 0.0,
        before.wasted_cost if before else 0.0,
        now.wasted_cost if now else 0.0,
        bottleneck,
        len(of_class[bottleneck]) if bottleneck else 0,
        len(pods),
        recommendation,
    )

"""The analyzer's own page at /: the HTML report of its history (what each pod is now and was over the
history it keeps, the timelines of those that waste the most, the waste by class, namespace, workload and
team), patched in place after every cycle. The page asks /api/v1/page?since=<cycle> for what changed since
the cycle it shows: the summary and tables, and only the rows that changed, never the whole fleet again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.outputs import report
from gpulens.core.config import finite_json
from gpulens.core.times import for_people

if TYPE_CHECKING:
    from gpulens.analyzer.runs.service import AnalyzerService

#: Rows the page lists, most waste first: a table a browser lays out at once at any fleet size (every
#: verdict is in /api/v1/verdicts).
MAX_ROWS = 500
#: Timelines the page draws, most waste first.
DRAWN = 10
#: Cycles a page may fall behind and still be sent only what changed; further behind, it gets every row.
KEEP_CYCLES = 100

#: Polls /api/v1/page every cycle and patches the page: the sections' HTML replaced, rows replaced, added,
#: removed and put in order by their data-unit. Relative URLs, so that the page works behind a proxy's path
#: (kubectl proxy, an ingress prefix); same-origin requests carry the page's credentials.
_SCRIPT = """
(() => {
  const table = document.querySelector('#units tbody');
  const rows = new Map([...table.rows].map(r => [r.dataset.unit, r]));
  const parse = html => { const t = document.createElement('tbody'); t.innerHTML = html; return t.firstElementChild; };
  async function refresh() {
    try {
      const answer = await fetch('api/v1/page?since=' + document.body.dataset.cycle, {cache: 'no-store'});
      if (!answer.ok) throw new Error(answer.status + ' ' + answer.statusText);
      const d = await answer.json();
      document.getElementById('error').textContent = '';
      if (d.cycle === Number(document.body.dataset.cycle)) return;
      for (const [id, html] of Object.entries(d.sections)) document.getElementById(id).innerHTML = html;
      if (d.full) { table.replaceChildren(); rows.clear(); }
      for (const [unit, html] of Object.entries(d.rows)) {
        const row = parse(html), old = rows.get(unit);
        if (old) old.replaceWith(row); else table.append(row);
        rows.set(unit, row);
      }
      for (const unit of d.removed) { rows.get(unit)?.remove(); rows.delete(unit); }
      for (const unit of d.order) { const row = rows.get(unit); if (row) table.append(row); }
      document.body.dataset.cycle = d.cycle;
    } catch (e) {
      document.getElementById('error').textContent = 'Not refreshed: ' + e.message + '; trying again.';
    }
  }
  setInterval(refresh, REFRESH_MS);
})();
"""


@dataclass
class Snapshot:
    """The page's parts after one cycle, and which rows changed in which cycle."""

    cycle: int = -1
    sections: dict[str, str] = field(default_factory=dict)
    #: unit -> its row (report.pod_row), for the MAX_ROWS listed; their order, most waste first.
    rows: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    #: unit -> the cycle its row last changed (or appeared); and the cycle it left the list.
    changed: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    #: The oldest cycle a page may show and be sent only what changed; an older page gets every row.
    since: int = 0


class LivePage:
    """GET / and GET /api/v1/page for an AnalyzerService."""

    def __init__(self, service: AnalyzerService, refresh_seconds: float | None = None):
        self.service = service
        #: How often the page asks for changes: every cycle by default.
        self.refresh_seconds = refresh_seconds or service.interval
        self._snapshot = Snapshot()
        self._lock = threading.Lock()

    def page(self, query: Mapping[str, str] | None = None) -> tuple[int, str, bytes]:
        snap = self._current()
        body = report.page(
            "gpulens analyzer: why are the GPUs idle?",
            f"<p class=small id=status>{snap.sections['status']}</p>",
            "<p class=small id=error role=status></p>",
            f"<div id=summary>{snap.sections['summary']}</div>",
            f"<div id=cluster>{snap.sections['cluster']}</div>",
            f"<div id=changes>{snap.sections['changes']}</div>",
            f"<div id=waste>{snap.sections['waste']}</div>",
            f"<h2>Pods and GPUs</h2><div class=small id=listed>{snap.sections['listed']}</div>",
            report.pod_table("".join(snap.rows[unit] for unit in snap.order)),
            f"<h2>Timelines: the {DRAWN} that wasted the most</h2>",
            report.TIMELINES_NOTE,
            f"<div id=timelines>{snap.sections['timelines']}</div>",
            "<script>" + _SCRIPT.replace("REFRESH_MS", str(round(self.refresh_seconds * 1000))) + "</script>",
        )
        body = body.replace("<body>", f"<body data-cycle={snap.cycle}>", 1)
        return 200, "text/html; charset=utf-8", body.encode()

    def changes(self, query: Mapping[str, str]) -> tuple[int, str, bytes]:
        """What changed since the cycle `since` the page shows: nothing but the cycle if none passed; else
        the sections, the rows that changed and those that left, and the order. Every row when the page is
        older than the snapshot can tell (or `since` is missing)."""
        try:
            since = int(query.get("since", "-1"))
        except ValueError:
            return 400, "text/plain; charset=utf-8", b"since: give the cycle the page shows (an integer)\n"
        snap = self._current()
        if since == snap.cycle:
            return 200, "application/json", finite_json({"cycle": snap.cycle}).encode()
        full = since < snap.since or since > snap.cycle
        body = {
            "cycle": snap.cycle,
            "full": full,
            "sections": snap.sections,
            "rows": {u: html for u, html in snap.rows.items() if full or snap.changed[u] > since},
            "removed": [] if full else [u for u, cycle in snap.removed.items() if cycle > since],
            "order": snap.order,
        }
        return 200, "application/json", finite_json(body).encode()

    def _current(self) -> Snapshot:
        """The snapshot of the newest cycle, made once a cycle by the first request that needs it."""
        with self._lock:
            if self._snapshot.cycle != self.service.cycles:
                self._snapshot = self._next(self._snapshot)
            return self._snapshot

    def _next(self, previous: Snapshot) -> Snapshot:
        service = self.service
        view = service.over_history()
        cycle, state, plan = view.cycle, view.state, view.plan
        over_history = report.by_waste(list(view.verdicts.values()))
        drawn = over_history[:DRAWN]
        with service.lock:  # the next cycle may be adding to them
            samples = service.use.bins.samples([v.unit for v in drawn])
        now: dict[str, Verdict] = {v.unit: v for v in state.verdicts}
        listed = over_history[:MAX_ROWS]
        rows = {v.unit: report.pod_row(v, now.get(v.unit)) for v in listed}
        changed = {u: previous.changed[u] if previous.rows.get(u) == html else cycle for u, html in rows.items()}
        removed = {u: c for u, c in previous.removed.items() if c > cycle - KEEP_CYCLES and u not in rows}
        removed |= {u: cycle for u in previous.rows if u not in rows}
        when = for_people(state.produced_at) if state.produced_at is not None else "none yet"
        stale = " Stale: the input is failing, these are the last verdicts." if service.stale() else ""
        sections = {
            "status": (
                f"Verdicts of {when} (cycle {cycle}), judged every {service.interval:g} s over the last "
                f"{duration(service.history_seconds)} kept; this page refreshes itself.{stale}"
            ),
            "summary": report.fleet_summary(over_history) + report.plan_section(plan),
            "cluster": (
                report.cluster_section(state.scheduling)
                if state.scheduling is not None
                else "<h2>The cluster's share: GPUs free while pods waited</h2><p class=small>None to show: no pod "
                "asked for a GPU in the window, or kube-state-metrics is not read (it is read from the Prometheus "
                "an analyzer reads, --input.prometheus).</p>"
            ),
            "changes": (
                report.changes_section(view.changes)
                if view.changes
                else "<h2>What changed</h2><p class=small>None to show: no GPU workload changed in the history "
                "kept, or kube-state-metrics is not read (it is read from the Prometheus an analyzer reads, "
                "--input.prometheus). Each change and what became of it: docs/changes.md.</p>"
            ),
            "waste": report.waste_tables(over_history),
            "listed": (
                f"The {len(listed)} that wasted the most of {len(over_history)}; every verdict is in "
                "<a href='api/v1/verdicts'>api/v1/verdicts</a>."
                if len(over_history) > len(listed)
                else "Headline over the history kept; now: the class of the newest window."
            ),
            "timelines": report.timelines(drawn, samples),
        }
        # Pages show only the cycles of snapshots served, so the changes since any of them are known, as far
        # back as the rows that left are remembered.
        first = previous.since if previous.cycle >= 0 else cycle
        return Snapshot(cycle, sections, rows, list(rows), changed, removed, max(first, cycle - KEEP_CYCLES))

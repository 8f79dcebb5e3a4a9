"""The demo's live view in a terminal: where everything listens, then what each pod is found to be.

Drawn from what the analyzer's API and the alert receiver say, to fit the terminal it is given: the
addresses stay on the first lines whatever the size (they scroll away nowhere: the view has the screen),
every name is whole (pods by their name where the terminal is narrow, never cut to "nlp/be..."), and where
the rows do not fit, the pods are listed by class, one line a class, the full table a terminal size away.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

#: Terminals at least this wide get the wide table: namespaces, nodes, GPUs and the alerts by name.
WIDE_COLUMNS = 120
#: Lines the view keeps for itself around the table's rows (beside the addresses' lines): its title, the
#: table's header and rule, and the line under it.
CHROME_LINES = 4


@dataclass(frozen=True)
class Row:
    """One unit of the fleet as the view shows it: its name (namespace/pod, or node and GPU for a GPU no
    pod holds), its pod's name ("" for a GPU no pod holds), its node and GPUs, its class and confidence
    (0-1), its activity (0-1, None where unknown), the money it wastes an hour, the alerts firing for it."""

    name: str
    pod: str
    node: str
    gpus: int
    bottleneck: str
    confidence: float
    activity: float | None
    wasted_per_hour: float
    alerts: tuple[str, ...]


def rows_of(verdicts: Sequence[Mapping], firing: Mapping[str, list[str]]) -> list[Row]:
    """The analyzer's verdicts (its /api/v1/verdicts) as rows, in a fixed order (pods by name, then the GPUs
    no pod holds): rows that swap places every refresh make the view flicker. The GPUs no pod holds are one
    row a node and class ("sim-h100-g 7 GPUs"): a node's free GPUs say one thing, and a row each would push the
    pods off the screen. `firing`: alert names by subject (namespace/pod, or node/GPU)."""
    pods: list[Row] = []
    unheld: dict[tuple[str, str], list[Row]] = {}
    for v in verdicts:
        pod = v.get("pod", "")
        gpu = v["gpus"][0] if v.get("gpus") else ""
        window = v.get("window_seconds") or 0.0
        row = Row(
            f"{v['namespace']}/{pod}" if pod else f"{v['node']} {gpu[:12]}",
            pod,
            v["node"],
            len(v.get("gpus", [])),
            v["bottleneck"],
            v["confidence"],
            v.get("mean_activity"),
            v["wasted_cost"] * 3600 / window if window else 0.0,
            tuple(sorted(firing.get(v.get("unit", ""), []))),
        )
        if pod:
            pods.append(row)
        else:
            unheld.setdefault((row.node, row.bottleneck), []).append(row)
    grouped = [_one_row(rows) for rows in unheld.values()]
    return sorted(pods, key=lambda r: r.name) + sorted(grouped, key=lambda r: r.name)


def _one_row(rows: list[Row]) -> Row:
    """A node's GPUs of one class as one row: their count, their least confidence, their mean activity (None
    where any is unknown), their waste summed, every alert of any."""
    if len(rows) == 1:
        return rows[0]
    gpus = sum(r.gpus for r in rows)
    activities = [r.activity for r in rows]
    return Row(
        f"{rows[0].node} {gpus} GPUs",
        "",
        rows[0].node,
        gpus,
        rows[0].bottleneck,
        min(r.confidence for r in rows),
        None if None in activities else sum(a for a in activities if a is not None) / len(rows),
        sum(r.wasted_per_hour for r in rows),
        tuple(sorted({a for r in rows for a in r.alerts})),
    )


def view(rows: list[Row], endpoints: Mapping[str, str], others: list[str], width: int, height: int) -> Group:
    """The whole view for a terminal of `width` x `height`: the addresses, then the table where its rows
    fit, else the pods by class; `others`: the alerts on GPUs and nodes, under it where there is room."""
    page = endpoints.get("analyzer", "")
    rest = " · ".join(
        f"{name} {url}" for name, url in endpoints.items() if name != "analyzer" and "exporter" not in name
    )
    title = f"  the analyzer's page: {page}  (Ctrl-C stops)"
    header = [Text.assemble(("gpulens demo", "bold"), title), Text(rest, overflow="fold")]
    around = CHROME_LINES + _lines(rest, width) + _lines("gpulens demo" + title, width) - 1
    room = height - around
    if len(rows) <= room:
        body: list = [_table(rows, width >= WIDE_COLUMNS)]
        left = room - len(rows)
        if others and left > 1:
            body += [Text("GPU and node alerts: " + "; ".join(others), overflow="ellipsis", no_wrap=True)]
    else:
        body = [
            _by_class(rows, room + 2, width),
            Text(
                f"{len(rows)} pods and GPUs: the table needs {len(rows) + around} lines, this terminal has {height}.",
                style="dim",
            ),
        ]
    return Group(*header, *body)


def _lines(text: str, width: int) -> int:
    """Lines `text` takes at `width`, wrapped as rich wraps it (at spaces: more lines than its length says)."""
    return max(1, len(Text(text).wrap(_MEASURE, max(width, 1))))


#: A console that only measures (Text.wrap needs one for its tab size and encoding).
_MEASURE = Console(file=io.StringIO(), width=1000)


def _table(rows: list[Row], wide: bool) -> Table:
    """One row a unit. Narrow: pods by their name alone (unique in a fleet more often than not, and whole),
    the alerts counted; wide: namespace/pod, node, GPUs and the alerts by name."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    headers = ["pod or GPU", *(["node", "GPUs"] if wide else []), "class", "conf", "active", "$/h", "alerts"]
    cells = []
    for r in rows:
        activity = "-" if r.activity is None else f"{r.activity:.0%}"
        alerts = ", ".join(r.alerts) if wide else (str(len(r.alerts)) if r.alerts else "")
        row = [r.name if wide else r.pod or r.name, *([r.node, str(r.gpus)] if wide else [])]
        cells.append(row + [r.bottleneck, f"{r.confidence:.0%}", activity, f"{r.wasted_per_hour:.2f}", alerts])
    for k, header in enumerate(headers):
        # Every column as wide as its widest cell, but the alerts': the one that gives way (cut, one line a row).
        widest = max([len(header), *(len(row[k]) for row in cells)])
        last = k == len(headers) - 1
        table.add_column(
            header,
            justify="right" if header in ("GPUs", "conf", "active", "$/h") else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=None if last else widest,
        )
    for row in cells:
        table.add_row(*row)
    return table


def _by_class(rows: list[Row], lines: int, width: int) -> Group:
    """The units by class, one line a class (its count, then as many of its pods by name as fit whole in `width`
    columns, and how many more), the classes that waste the most first, within `lines`."""
    classes: dict[str, list[Row]] = {}
    for r in rows:
        classes.setdefault(r.bottleneck, []).append(r)
    order = sorted(classes, key=lambda c: (-sum(r.wasted_per_hour for r in classes[c]), c))
    shown = []
    for name in order[: max(lines, 1)]:
        head = f"{name} {len(classes[name])}: "
        names = [r.pod or r.name for r in classes[name]]
        line = Text.assemble((head, "bold"), _whole_names(names, width - len(head)))
        line.no_wrap, line.overflow = True, "ellipsis"  # a class's name wider than the terminal is cut
        shown.append(line)
    return Group(*shown)


def _whole_names(names: list[str], width: int) -> str:
    """As many of `names` as fit whole in `width` columns, and how many more ("a, b, +3 more")."""
    for fit in range(len(names), 0, -1):
        shown = ", ".join(names[:fit] + ([f"+{len(names) - fit} more"] if fit < len(names) else []))
        if len(shown) <= width:
            return shown
    return f"+{len(names)} more"

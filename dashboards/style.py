"""gpulens' house style over grafanalib (pinned at 0.7.1, its last release: upstream is frozen).

Everything the dashboards build goes through these few functions, so a grafanalib quirk or a Grafana
schema change is fixed in one place. The style: a Prometheus datasource chosen by a `datasource`
variable, a unit on every panel (the caller must name one), panels laid out left to right in rows of
24 grid units, deterministic JSON (sorted keys) so the committed files diff cleanly.
"""

from __future__ import annotations

import json

import attr
import grafanalib.core as G
from grafanalib._gen import DashboardEncoder

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
#: The dashboard schema the panels are written for: Grafana 11.2's (the compose file's Grafana), so
#: Grafana loads them as they are instead of migrating them on every load.
SCHEMA_VERSION = 39
#: Colour bands of a panel: (colour, from value), the first from minus infinity (None). Only where a
#: threshold means something; other panels get one neutral band instead of Grafana's default green/red
#: at 80, which would colour every number as if 80 meant anything.
Levels = tuple[tuple[str, float | None], ...]
NEUTRAL: Levels = (("text", None),)

# Grafana unit ids (the "Standard options > Unit" list).
RATIO = "percentunit"
BYTES = "bytes"
BYTES_PER_SECOND = "Bps"
HERTZ = "hertz"
WATTS = "watt"
CELSIUS = "celsius"
SECONDS = "s"
HOURS = "h"
DOLLARS = "currencyUSD"
COUNT = "none"
#: Per-second rate of a count of events.
PER_SECOND = "cps"


def target(expr: str, legend: str = "", instant: bool = False, table: bool = False) -> G.Target:
    return G.Target(
        expr=expr,
        legendFormat=legend,
        instant=instant,
        datasource=DATASOURCE,
        format=G.TABLE_TARGET_FORMAT if table else G.TIME_SERIES_TARGET_FORMAT,
    )


def _style(
    targets: list[G.Target], unit: str, width: int, height: int, description: str, levels: Levels = NEUTRAL
) -> dict:
    """Keyword arguments every panel shares: datasource, description, size, the unit, its colour
    bands, and the targets with their refIds (A, B, ...: Grafana needs them unique within a panel)."""
    if not unit:
        raise ValueError("every gpulens panel names its unit")
    defaults: dict = {
        "unit": unit,
        "thresholds": {"mode": "absolute", "steps": [{"color": color, "value": value} for color, value in levels]},
    }
    if levels != NEUTRAL:
        defaults["custom"] = {"thresholdsStyle": {"mode": "dashed"}}  # time series draw them as lines
    return {
        "dataSource": DATASOURCE,
        "description": description,
        "targets": [attr.evolve(t, refId=chr(ord("A") + i)) for i, t in enumerate(targets)],
        "gridPos": G.GridPos(h=height, w=width, x=0, y=0),
        "extraJson": {"fieldConfig": {"defaults": defaults}},
    }


def timeseries(
    title: str,
    description: str,
    targets: list[G.Target],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    stacked: bool = False,
    max_value: float | None = None,
    levels: Levels = NEUTRAL,
) -> G.TimeSeries:
    return G.TimeSeries(
        title=title,
        unit=unit,
        fillOpacity=30 if stacked else 10,
        stacking={"mode": "normal", "group": "A"} if stacked else {},
        legendDisplayMode="table",
        legendCalcs=["mean", "max", "lastNotNull"],
        tooltipMode="multi",
        valueMin=0,
        valueMax=max_value,
        **_style(targets, unit, width, height, description, levels),
    )


def stat(
    title: str,
    description: str,
    targets: list[G.Target],
    unit: str,
    *,
    width: int = 4,
    height: int = 4,
    decimals: int | None = None,
    reduce: str = "lastNotNull",
    levels: Levels = NEUTRAL,
) -> G.Stat:
    return G.Stat(
        title=title,
        format=unit,
        decimals=decimals,
        reduceCalc=reduce,
        graphMode="area",
        **_style(targets, unit, width, height, description, levels),
    )


def bar_gauge(
    title: str,
    description: str,
    targets: list[G.Target],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    max_value: float | None = 1,
    levels: Levels = NEUTRAL,
) -> G.BarGauge:
    """Horizontal bars of each series' last value; max_value None scales to the largest."""
    return G.BarGauge(
        title=title,
        format=unit,
        min=0,
        max=max_value,
        calc="lastNotNull",
        orientation=G.ORIENTATION_HORIZONTAL,
        displayMode=G.GAUGE_DISPLAY_MODE_GRADIENT,
        **_style(targets, unit, width, height, description, levels),
    )


def table(
    title: str,
    description: str,
    targets: list[G.Target],
    unit: str,
    *,
    width: int = 24,
    height: int = 8,
    hide: tuple[str, ...] = (),
    links: dict[str, str] | None = None,
) -> G.Table:
    """A table of instant results, one row per series, labels as columns; `hide` drops columns,
    `links` makes a column's cells link to a URL (Grafana data-link syntax)."""
    excluded = {name: True for name in ("Time", "__name__", "job", "instance", *hide)}
    overrides = [
        {
            "matcher": {"id": "byName", "options": column},
            "properties": [{"id": "links", "value": [{"title": title, "url": url}]}],
        }
        for column, url in (links or {}).items()
    ]
    return G.Table(
        title=title,
        unit=unit,
        overrides=overrides,
        transformations=[{"id": "organize", "options": {"excludeByName": excluded}}],
        **_style(targets, unit, width, height, description),
    )


def state_timeline(
    title: str, description: str, targets: list[G.Target], *, width: int = 24, height: int = 6
) -> G.StateTimeline:
    """Which state held when: each series is a state, 1 while it holds (`== 1` drops the rest)."""
    return G.StateTimeline(
        title=title,
        mergeValues=True,
        showValue="never",
        mappings=[{"type": "value", "options": {"1": {"text": "yes", "index": 0}}}],
        **_style(targets, COUNT, width, height, description),
    )


def histogram(
    title: str, description: str, targets: list[G.Target], unit: str, *, width: int = 12, height: int = 8
) -> G.Histogram:
    return G.Histogram(title=title, **_style(targets, unit, width, height, description))


def row(title: str) -> G.RowPanel:
    return G.RowPanel(title=title, gridPos=G.GridPos(h=1, w=GRID_WIDTH, x=0, y=0))


def layout(panels: list) -> list:
    """Place panels left to right, wrapping at 24 units; a row starts on a line of its own."""
    x = y = line_height = 0
    placed = []
    for panel in panels:
        size = panel.gridPos
        if x + size.w > GRID_WIDTH or isinstance(panel, G.RowPanel):
            x, y, line_height = 0, y + line_height, 0
        placed.append(attr.evolve(panel, gridPos=G.GridPos(h=size.h, w=size.w, x=x, y=y)))
        x += size.w
        line_height = max(line_height, size.h)
        if isinstance(panel, G.RowPanel):
            x, y, line_height = 0, y + size.h, 0
    return placed


def datasource_variable() -> G.Template:
    return G.Template(name="datasource", label="Data source", query="prometheus", type="datasource")


def query_variable(
    name: str, label: str, metric_selector: str, *, multi: bool = True, include_all: bool = True
) -> G.Template:
    """A variable listing the values of `name` in `metric_selector`'s series, refreshed when the time
    range changes (pods come and go)."""
    return G.Template(
        name=name,
        label=label,
        query=f"label_values({metric_selector}, {name})",
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=include_all,
        allValue=".*" if include_all else None,
        refresh=G.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=G.SORT_ALPHA_ASC,
    )


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[G.Template],
    panels: list,
    *,
    time_from: str = "now-24h",
    panel_ids: dict[str, int] | None = None,
) -> G.Dashboard:
    """The dashboard; panels titled in `panel_ids` get those ids (alerts link to them with viewPanel),
    the others the next free ones."""
    ids = panel_ids or {}
    unknown = set(ids) - {panel.title for panel in panels}
    if unknown:
        raise ValueError(f"{uid}: no panel titled {', '.join(sorted(unknown))}")
    panels = [attr.evolve(panel, id=ids[panel.title]) if panel.title in ids else panel for panel in panels]
    return G.Dashboard(
        uid=uid,
        title=title,
        description=description,
        tags=["gpulens"],
        timezone="browser",
        refresh="30s",
        time=G.Time(time_from, "now"),
        schemaVersion=SCHEMA_VERSION,
        sharedCrosshair=True,
        templating=G.Templating(list=[datasource_variable(), *variables]),
        links=[
            G.DashboardLink(
                title="gpulens", type="dashboards", tags=["gpulens"], asDropdown=True, includeVars=True, keepTime=True
            )
        ],
        panels=layout(panels),
    ).auto_panel_ids()


def to_json(dashboard: G.Dashboard) -> str:
    """Deterministic JSON, as grafanalib's own generator writes it."""
    return json.dumps(dashboard.to_json_data(), sort_keys=True, indent=2, cls=DashboardEncoder) + "\n"

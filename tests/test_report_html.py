"""The HTML report as a person reads it, on a wide and a narrow screen: rendered by headless Chromium, its
layout measured in the page (no horizontal scrolling, numbers under their headers, time labels that do not
collide) and its screenshots compared by structure (each timeline is the same picture at either width)."""

import json
import os
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs import report
from gpulens.core.catalog import model_info
from tests import store_history as week
from tests.helpers import gpulens, require_binary

#: A script the test adds to its copy of the page (the report itself has none): the boxes of what it
#: measures, written into the DOM of the frame the page is shown in, which --dump-dom prints.
MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const shown = e => getComputedStyle(e).display != 'none';
const layout = {
  width: innerWidth, scroll: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight,
  plots: [...document.querySelectorAll('.plot')].map(p => ({
    svg: box(p.querySelector('svg')), plot: box(p),
    ticks: [...p.querySelectorAll('.tick')].filter(shown).map(t => (
      {box: box(t), text: t.textContent, size: parseFloat(getComputedStyle(t).fontSize)})),
  })),
  tables: [...document.querySelectorAll('table')].map(t => ({
    pods: t.classList.contains('pods'),
    heads: [...t.querySelectorAll('th.n')].filter(shown).map(box),
    rows: [...t.querySelectorAll('tr')].slice(1).map(r => [...r.querySelectorAll('td')].map(box)),
    numbers: [...t.querySelectorAll('tr')].slice(1).map(r => [...r.querySelectorAll('td.n')].map(box)),
  })),
};
const pre = parent.document.createElement('pre'); pre.id = 'layout'; pre.textContent = JSON.stringify(layout);
parent.document.body.append(pre);
</script>"""
#: A desktop browser and a phone. The page is shown in a frame of that width: a headless Chromium window
#: is 500 px wide at least.
WIDTHS = (1280, 390)
#: Four days of the store fleet's week (notebook-b takes over from notebook-a at 3.5), with a 6-hour gap in
#: the first day (an exporter down).
GAP = (week.START + 12 * 3600, week.START + 18 * 3600)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The report of four days with a gap, written by `gpulens report`, and its trace."""
    trace = week.week_trace()
    ts = trace["timestamp"]
    trace = trace[(ts < week.START + 4 * 86400) & ~((ts > GAP[0]) & (ts < GAP[1]))].reset_index(drop=True)
    folder = tmp_path_factory.mktemp("report")
    fr.write_trace(trace, folder / "days.csv")
    done = gpulens("report", str(folder / "days.csv"), "--format", "html", "--out", str(folder / "report.html"))
    assert done.returncode == 0, done.stderr
    return folder / "report.html", trace


def browse(chromium: str, page, width: int, height: int, folder, *what: str) -> subprocess.CompletedProcess:
    """Chromium showing `page` in a frame `width` x `height` px, doing `what` (--dump-dom, --screenshot)."""
    frame = folder / f"frame-{width}.html"
    frame.write_text(
        f"<!doctype html><body style='margin:0'><iframe src='{page.name}' scrolling=no "
        f"style='border:0;display:block;width:{width}px;height:{height}px'></iframe></body>"
    )
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={folder / 'profile'}"]
    # The frame's page writes its measures into the frame's document: both are file:// pages.
    browser += ["--allow-file-access-from-files", "--force-device-scale-factor=1"]
    browser += [f"--window-size={max(width, 500)},{height}", *what]
    return subprocess.run(
        [*browser, frame.as_uri()], capture_output=True, text=True, timeout=120, env=os.environ, check=True
    )


def layout(chromium: str, path, width: int, folder) -> dict:
    measured = folder / f"measured-{width}.html"
    measured.write_text(path.read_text().replace("</body>", MEASURE + "</body>"))
    dom = browse(chromium, measured, width, 1000, folder, "--dump-dom").stdout
    return json.loads(re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)[1])


def screenshot(chromium: str, path, width: int, height: int, folder) -> np.ndarray:
    shot = folder / f"shot-{width}.png"
    copy = folder / path.name
    copy.write_bytes(path.read_bytes())
    browse(chromium, copy, width, height, folder, f"--screenshot={shot}")
    with Image.open(shot) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int16)


def structure(pixels: np.ndarray, box: list[float]) -> np.ndarray:
    """A plot's pixels scaled to 100 x 20: its bands and lines, whatever width it was drawn at."""
    left, top, right, bottom = (round(v) for v in box)
    crop = Image.fromarray(pixels[top:bottom, left:right].astype(np.uint8))
    return np.asarray(crop.resize((100, 20), Image.Resampling.BOX), dtype=np.int16)


@pytest.mark.slow
def test_the_report_reads_on_a_wide_and_a_narrow_screen(page, tmp_path):
    chromium = require_binary("chromium")
    path, trace = page
    seen = {}
    for width in WIDTHS:
        measured = layout(chromium, path, width, tmp_path)
        assert measured["width"] == width
        # Nothing runs off the side of the page: wide tables scroll in their own box.
        assert measured["scroll"] <= width, (width, measured["scroll"])
        assert len(measured["plots"]) == 5
        for plot in measured["plots"]:
            # Each timeline fills the column, and its time labels keep their size, stay inside it and
            # never overlap.
            (left, _, right, _), svg = plot["plot"], plot["svg"]
            assert svg[0] == left and svg[2] == right and right - left >= 0.9 * (width - 48)
            ticks = plot["ticks"]
            assert len(ticks) >= 2 and all(t["size"] == 11 for t in ticks)
            assert all(left - 0.5 <= t["box"][0] and t["box"][2] <= right + 0.5 for t in ticks)
            assert all(a["box"][2] <= b["box"][0] for a, b in zip(ticks, ticks[1:], strict=False)), (width, ticks)
            assert all(a["text"] != b["text"] for a, b in zip(ticks, ticks[1:], strict=False))
        for table in measured["tables"]:
            if width == WIDTHS[0]:
                # Numbers right-aligned under their right-aligned headers.
                for row in table["numbers"]:
                    assert [round(c[2]) for c in row] == [round(h[2]) for h in table["heads"]]
            elif table["pods"]:
                # On a phone each pod is a card: its cells stacked, one under the other, at one left edge.
                for row in table["rows"]:
                    assert all(a[3] <= b[1] + 0.5 for a, b in zip(row, row[1:], strict=False))
                    assert len({round(c[0]) for c in row}) == 1
        seen[width] = measured, screenshot(chromium, path, width, measured["height"], tmp_path)
    (wide, wide_shot), (narrow, narrow_shot) = seen[WIDTHS[0]], seen[WIDTHS[1]]
    pictures = [
        (structure(wide_shot, a["svg"]), structure(narrow_shot, b["svg"]))
        for a, b in zip(wide["plots"], narrow["plots"], strict=True)
    ]
    for i, (at_wide, at_narrow) in enumerate(pictures):
        same = np.abs(at_wide - at_narrow).mean()
        others = [np.abs(at_wide - other).mean() for j, (_, other) in enumerate(pictures) if j != i]
        # The same timeline at either width, and unlike every other pod's.
        assert same < 6 and same < min(others) / 2, (i, same, others)


@pytest.mark.slow
def test_every_signal_is_drawn_with_its_scale_and_gaps_as_gaps(page):
    path, trace = page
    text = path.read_text()
    timelines = text.split("<div class=pod>")[1:]
    verdicts = {v.unit: v for v in analyze(trace)}
    assert len(timelines) == len(verdicts) == 5
    model = model_info(week.week_trace()["gpu_model"].iloc[0])
    for drawn in timelines:
        unit = re.match(r"<b>([^<]+)</b>", drawn)[1]
        # The gap cuts every line of the units it falls in; notebook-b began after it.
        runs = 1 if unit == "research/notebook-b" else 2
        for line in ("activity", "memory", "power"):
            assert drawn.count(f"<polyline class={line} ") == runs, (unit, line)
        assert f"memory used, 0-{model.memory_total_bytes / 2**30:,.0f} GiB" in drawn
        assert f"power, 0-{model.power_limit_watts:,.0f} W" in drawn
        assert drawn.count("<rect class=band") == len(verdicts[unit].episodes)


def test_the_headline_agrees_with_the_waste_tables(page):
    path, trace = page
    text = path.read_text()
    summary = dict(
        (label, number) for number, label in re.findall(r"<span><b>([^<]+)</b>([^<]+)</span>", text.split("<h2>")[0])
    )
    verdicts = analyze(trace)
    pods = [v for v in verdicts if v.pod]
    assert summary["pods"] == str(len(pods)) == "4"
    assert summary["GPU no pod holds (unallocated)"] == "1"
    class_table = text.split("<h2>Waste by class</h2>")[1].split("<h2>")[0]
    by_class = dict(re.findall(r"<tr><td>(\w+)</td><td class=n>([\d.,]+)</td>", class_table))
    [wasted] = [number for label, number in summary.items() if label.startswith("GPU-hours wasted")]
    assert float(wasted) == pytest.approx(sum(float(hours) for hours in by_class.values()), abs=0.1)
    # Healthy headroom is no waste: its class is not in the table. The serving replica's hours whose quiet
    # shows no request served are unexplained: their waste counts, under a class that names no cause.
    assert set(by_class) == {"idle", "overprovisioned_serving", "unexplained", "unallocated"}


def test_what_the_gpus_cost_is_the_time_their_samples_cover_at_their_price(page):
    """The showback table by namespace (the trace names no team): each namespace's GPU-hours held are its rows x
    the interval (counted here from the trace), at the catalogue's price; the GPU no pod holds is "(no pod)"'s."""
    path, trace = page
    text = path.read_text()
    table = text.split("<div id=showback>")[1].split("<p class=small>")[0]
    shown = {
        key: (float(hours.replace(",", "")), float(cost.replace(",", "")))
        for key, hours, cost in re.findall(
            r"<tr><td>([^<]+)</td><td class=n data-label='GPU-h held'>([\d.,]+)</td>"
            r"<td class=n data-label='cost'>\$([\d.,]+)</td>",
            table,
        )
    }
    interval = float(trace["timestamp"].sort_values().drop_duplicates().diff().median())
    price = model_info(trace["gpu_model"].iloc[0]).price_per_hour
    rows = trace["namespace"].astype(str).replace("", "(no pod)").value_counts()
    expected = {ns: (round(n * interval / 3600, 1), round(n * interval / 3600 * price, 2)) for ns, n in rows.items()}
    assert shown.keys() == expected.keys()
    for key, (hours, cost) in expected.items():
        assert shown[key] == (pytest.approx(hours, abs=0.06), pytest.approx(cost, abs=0.06)), key


@pytest.mark.parametrize(
    ("start", "span", "labels"),
    [
        # Three minutes: round half-minutes in seconds, the date on the first.
        ("00:00:10", 180, ["11-09 00:00:30", "00:01:00", "00:01:30", "00:02:00", "00:02:30", "00:03:00"]),
        # Fourteen hours across midnight: round hours, the date again where the day changes.
        ("14:10:00", 14 * 3600, ["11-09 16:00", "18:00", "20:00", "22:00", "11-10 00:00", "02:00", "04:00"]),
        # Five days: midnights, dates alone.
        ("06:00:00", 5 * 86400, ["11-10", "11-11", "11-12", "11-13", "11-14"]),
    ],
)
def test_time_axes_label_round_times_at_any_span(start, span, labels):
    first = pd.Timestamp(f"2025-11-09T{start}Z").timestamp()
    assert [label for _, label in report._ticks(first, first + span)] == labels

"""A report's share of a fleet in a file, for a report too large for one machine: `gpulens report --prometheus
URL --since ... --until T --shard.count N --shard.index I --out FILE` judges the nodes whose name hashes to I
(window.Shard, Prometheus' hashmod: a pod's GPUs are on one node, so each pod is judged by one shard) and
writes what the report of the whole fleet needs of them; `gpulens report --prometheus URL --since ... --until
T --merge FILE...` merges the N files into the report one run over the fleet writes: the same verdicts, plan
(what each unit used, use.Use), HTML timelines (timelines.TimelineBins) and cluster share (read once, at the
merge, from kube-state-metrics' series).

A shard file is a zip archive: `shard.json` (what wrote it: the store, the span, the shard, the settings
that change a verdict; and the verdicts) and each bin array in numpy's .npy format (read without pickle: a
file from elsewhere runs no code). A merge refuses files of another span, store or settings, and a set that
is not every shard exactly once, naming the file and what differs."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpulens import __version__
from gpulens.analyzer.inputs.window import Shard
from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.outputs.timelines import TimelineBins
from gpulens.analyzer.outputs.use import Use
from gpulens.analyzer.runs.span import Span
from gpulens.core.config import atomic_output

#: What `shard.json` says it is, and the version of its layout (raised when the layout changes).
FORMAT = "gpulens report shard"
VERSION = 1


class ShardFileError(ValueError):
    """A shard file that cannot be merged: its message names the file, what is wrong and the fix."""


@dataclass(frozen=True)
class Origin:
    """What a shard was judged from, which every shard of one report shares: the store (its name, as
    store.Store names it), the span on its step grid, and the settings that change a verdict (JSON-able:
    thresholds, prices, window, selectors, the kinds config's content, the scrape intervals read)."""

    store: str
    span: Span
    settings: Mapping[str, Any]


@dataclass
class Judged:
    """What a run judged of its nodes: the verdicts, what each unit used, and the units' timelines."""

    verdicts: list[Verdict]
    use: Use
    timelines: TimelineBins


def write(path: str, shard: Shard, origin: Origin, judged: Judged) -> None:
    """`judged` of `shard` into a shard file at `path`, atomically (config.atomic_output)."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "gpulens": __version__,
        "shard": [shard.index, shard.count],
        "store": origin.store,
        "span": [origin.span.start, origin.span.end, origin.span.step],
        "settings": origin.settings,
        "verdicts": [v.to_dict() for v in judged.verdicts],
        "use": {"units": list(judged.use.bins.rows), "peak_memory": judged.use.peak_memory},
        "timelines": {"units": list(judged.timelines.rows)},
    }
    with atomic_output(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("shard.json", json.dumps(document))
        for name, bins in (("use", judged.use.bins), ("timelines", judged.timelines)):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, _in_row_order(bins), allow_pickle=False)


def merge(paths: Sequence[str], origin: Origin, use: Use, timelines: TimelineBins | None) -> list[Verdict]:
    """The verdicts of the shard files at `paths`, each unit's use merged into `use` and its timelines into
    `timelines` (None: not drawn). ShardFileError where a file is not a shard file of `origin`, or the files
    are not every shard of one count exactly once."""
    verdicts: list[Verdict] = []
    seen: dict[int, str] = {}
    count = None
    for path in paths:
        with _opened(path) as archive:
            document = _document(path, archive)
            _check_origin(path, document, origin)
            index, of = document["shard"]
            if count is not None and of != count:
                other = seen[min(seen)]
                raise ShardFileError(f"{path} is shard {index} of {of}, {other} one of {count}: merge one set")
            if index in seen:
                raise ShardFileError(f"{path} and {seen[index]} are both shard {index} of {of}: give each shard once")
            count, seen[index] = of, path
            try:
                verdicts += [Verdict.from_dict(v) for v in document["verdicts"]]
                _merge_bins(path, archive, "use", document["use"]["units"], use.bins)
                use.merge_peaks(document["use"]["peak_memory"])
                if timelines is not None:
                    _merge_bins(path, archive, "timelines", document["timelines"]["units"], timelines)
            except ShardFileError:
                raise
            except (TypeError, KeyError, ValueError, AttributeError) as e:
                raise ShardFileError(f"{path}: its contents do not read ({e!r}): {_AGAIN}") from None
    missing = sorted(set(range(count or 0)) - set(seen))
    if missing:
        named = ", ".join(map(str, missing))
        raise ShardFileError(f"shard{'s' if len(missing) > 1 else ''} {named} of {count} not given: merge every shard")
    return verdicts


#: The fix for a file this version cannot read.
_AGAIN = "write the shards again with this version of gpulens"


def _opened(path: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ShardFileError(f"{path}: no such file") from None
    except (OSError, zipfile.BadZipFile) as e:
        raise ShardFileError(
            f"{path} is not a shard file ({e}): give the files `gpulens report --shard.count` wrote"
        ) from None


def _document(path: str, archive: zipfile.ZipFile) -> dict:
    """`shard.json`, checked to be what this version writes."""
    try:
        document = json.loads(archive.read("shard.json"))
    except (KeyError, ValueError, zipfile.BadZipFile, OSError) as e:
        raise ShardFileError(
            f"{path} is not a shard file ({e}): give the files `gpulens report --shard.count` wrote"
        ) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ShardFileError(f"{path} is not a shard file: give the files `gpulens report --shard.count` wrote")
    if document.get("version") != VERSION or document.get("gpulens") != __version__:
        raise ShardFileError(
            f"{path} was written by gpulens {document.get('gpulens')} (layout {document.get('version')}), this is "
            f"{__version__} (layout {VERSION}): {_AGAIN}"
        )
    shard = document.get("shard")
    if not (
        isinstance(shard, list)
        and len(shard) == 2
        and all(isinstance(x, int) for x in shard)
        and 0 <= shard[0] < shard[1]
    ):
        raise ShardFileError(f"{path}: its shard {shard!r} is not an index below a count: {_AGAIN}")
    return document


def _check_origin(path: str, document: dict, origin: Origin) -> None:
    """That the file was judged from the store, span and settings this merge reads."""
    if document.get("store") != origin.store:
        raise ShardFileError(
            f"{path} was read from {document.get('store')}, this merge reads {origin.store}: give the shards and "
            "the merge the same --prometheus"
        )
    span = [origin.span.start, origin.span.end, origin.span.step]
    if document.get("span") != span:
        raise ShardFileError(
            f"{path} covers the span {_span_text(document.get('span'))}, this merge {_span_text(span)}: give the "
            "shards and the merge the same --since and --until (and --query.step)"
        )
    settings = document.get("settings")
    expected = json.loads(json.dumps(origin.settings))  # as a file holds them: tuples as lists
    if not isinstance(settings, dict):
        raise ShardFileError(f"{path}: it names no settings: {_AGAIN}")
    differing = sorted(key for key in settings.keys() | expected.keys() if settings.get(key) != expected.get(key))
    if differing:
        raise ShardFileError(
            f"{path} was judged with other {', '.join(differing)} than this merge: give the shards and the merge "
            "the same flags and files (--thresholds, --prices, --window, --step, the selectors, --team-label, "
            "--analysis.config)"
        )


def _span_text(span: object) -> str:
    from gpulens.core.times import rfc3339

    if isinstance(span, list) and len(span) == 3 and all(isinstance(x, int | float) for x in span):
        return f"{rfc3339(span[0])} to {rfc3339(span[1])} every {span[2]:g} s"
    return repr(span)


def _in_row_order(bins: TimelineBins) -> np.ndarray:
    """The sums of each unit of `bins`, in the order of `bins.rows`."""
    return bins.sums[list(bins.rows.values())]


def _merge_bins(path: str, archive: zipfile.ZipFile, name: str, units: list[str], into: TimelineBins) -> None:
    """The file's bins `name` (its units' sums, in the order of `units`) added to `into`."""
    try:
        with archive.open(f"{name}.npy") as member:
            sums = np.lib.format.read_array(member, allow_pickle=False)
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
        raise ShardFileError(f"{path}: its {name} do not read ({e}): {_AGAIN}") from None
    if sums.shape != (len(units), *into.sums.shape[1:]) or sums.dtype != into.sums.dtype:
        raise ShardFileError(f"{path}: its {name} are {sums.dtype} {sums.shape}, not of this span: {_AGAIN}")
    into.merge_rows(units, sums)

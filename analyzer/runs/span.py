"""`gpulens report --prometheus`: verdicts over a span of days read from a store, in pieces.

A week of a fleet does not fit in memory as one trace (1,000 GPUs at 30 s is 20 million rows), so the span
is read and judged a piece at a time, and each pod's ledger (analyzer/judging/history.py) carries on from piece
to piece: memory grows with the GPUs and pods, not with the span. Each piece counts its own slots and is
read with a window of samples before and after them, so the verdicts are those of judging the span whole
(tests/test_history.py holds them equal).

A piece holds about PIECE_ROWS rows (GPUs x steps): its length is set from the GPUs the store's index names
in the span (/api/v1/series, no sample read), or from those the first piece found where it cannot say. A
fleet so large that even the shortest piece (three windows) of every GPU would hold more is read in groups
of nodes, one after the other, each through the whole span: memory follows PIECE_ROWS, whatever the fleet
and the span (a pod's GPUs are on one node, so no unit is split).
The store's own limits (points per series, samples per query) are the store client's concern
(analyzer/inputs/store.py): it cuts and retries the range queries a piece makes.

The next piece is read while one is judged (_read_ahead): the store evaluates its queries and this process
decodes their answers while the last piece's windows are judged, which took as long again one after the
other.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.inputs.kinds import UNKNOWN, PodKey, WorkloadKind
from gpulens.analyzer.inputs.owners import Owner, OwnerReader
from gpulens.analyzer.inputs.queries import instances_matcher
from gpulens.analyzer.inputs.series import SeriesReader
from gpulens.analyzer.inputs.store import StoreError
from gpulens.analyzer.inputs.window import Exporters, Shard, Window
from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.history import Ledger, judged_whole, ledgers, window_and_slide, with_owners
from gpulens.analyzer.outputs.timelines import TimelineBins, unit_samples
from gpulens.analyzer.outputs.use import Use
from gpulens.core.thresholds import Thresholds

log = logging.getLogger(__name__)

#: Rows (GPUs x steps) a piece holds: about 0.45 GiB of trace frame with every column, and its grid. A piece
#: is judged while the next one is read (_read_ahead), so two are held at once: a day of 1,000 GPUs peaked at
#: 1.8 GiB at this size, 2.1 to 2.4 at 2 million. Larger pieces cost less per step (each piece's queries
#: and the windows judged on both of its sides cost about 2 s at 1,000 GPUs, benchmarks/store_report.py).
PIECE_ROWS = 1_500_000


@dataclass
class Progress:
    """What a read has done so far, for a progress bar: pieces, seconds of the span, bytes and GPUs."""

    pieces_done: int = 0
    #: Seconds to read: the span's, once for each group of nodes it is read in.
    span_seconds: float = 0.0
    #: The groups of nodes the span is read in (one: every GPU at once).
    groups: int = 1
    seconds_done: float = 0.0
    bytes_read: int = 0
    gpus: set[str] = field(default_factory=set)
    #: Rows (GPUs x steps) of the largest piece read: what memory follows, whatever the span.
    largest_piece_rows: int = 0
    #: Values read that no GPU can report (frame.impossible), left out of the verdicts, and the first one.
    impossible_values: int = 0
    first_impossible: str = ""


@dataclass(frozen=True)
class Span:
    """The span a report covers, on the store's step grid: unix seconds, both ends included."""

    start: float
    end: float
    step: float

    @classmethod
    def aligned(cls, start: float, end: float, step: float) -> Span:
        first, last = math.ceil(start / step) * step, math.floor(end / step) * step
        if last <= first:
            raise ValueError(f"the span from {start:.0f} to {end:.0f} holds no step of {step:g} s: widen --since")
        return cls(first, last, step)


def _gather(samples: pd.DataFrame, timelines: TimelineBins | None, use: Use | None) -> None:
    for gatherer in (timelines, use):
        if gatherer is not None:
            gatherer.add(samples)


def report(
    reader: SeriesReader,
    span: Span,
    t: Thresholds,
    prices: dict[str, float] | None = None,
    window: float | None = None,
    slide: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    owners: OwnerReader | None = None,
    timelines: TimelineBins | None = None,
    use: Use | None = None,
    engines: Mapping[PodKey, EngineLoad] | None = None,
    shard: Shard | None = None,
) -> list[Verdict]:
    """Each unit's headline verdict over `span`, read through `reader` piece by piece. window and slide
    are seconds (None: default_window() for the step, as for a file sampled at that interval). With
    `owners`, each verdict names its pod's workload and team, as kube-state-metrics said in the span;
    `timelines` gathers what an HTML report draws, and `use` what each unit used (for the plan), each
    sample once; `engines`, what each serving pod's engine counted over the span (engines.py). With
    `shard`, only the nodes it owns are read (the store's index names them)."""
    _refuse_too_many_pods(reader, span)
    window, slide = window_and_slide(window, slide, lambda: span.step, t)
    progress = Progress(span_seconds=span.end - span.start)
    groups = _groups(reader, span, window, shard)
    if not groups:  # a shard that owns no node of the span
        return []
    if span.end - span.start < window:  # one window: classify() the whole span
        if shard is not None:  # every group of the shard's at once
            reader = reader.scoped(instances_matcher(i for group in groups for i in group.instances))
        frame = _read(reader, span.start, span.end, span.step, progress)
        progress.largest_piece_rows = len(frame)
        _gather(unit_samples(frame), timelines, use)
        _report(progress, on_progress, span.end - span.start)
        said = _owners(owners, frame, span.end, span.end - span.start)
        loads = engines or {}
        verdicts = judged_whole(
            frame, t, prices, lambda unit: _workload(said, unit), lambda unit: loads.get(_pod_key(unit))
        )
        _say_impossible(progress, reader)
        return with_owners(verdicts, said)
    totals: dict[str, Ledger] = {}
    owned: dict[PodKey, Owner] = {}
    progress.groups = len(groups)
    progress.span_seconds *= len(groups)
    for piece in _read_ahead(_pieces(reader, span, groups, window, slide, progress)):
        frame = piece.frame
        progress.largest_piece_rows = max(progress.largest_piece_rows, len(frame))
        keys = UnitKeys.of(frame) if len(frame) else None
        if timelines is not None or use is not None:  # the piece's own samples: those around it are its neighbours'
            counted = frame["timestamp"].between(piece.counted_from, piece.counted_to, inclusive="left").to_numpy()
            _gather(unit_samples(frame, keys=keys, where=counted), timelines, use)
        pieces = ledgers(frame, t, prices, window, slide, span.start, (piece.counted_from, piece.counted_to), keys=keys)
        for unit, ledger in pieces.items():
            if unit in totals:
                totals[unit].merge(ledger)
            else:
                totals[unit] = ledger
        fr.require_few_enough(len(totals))
        owned |= _owners(owners, frame, piece.read_to, piece.read_to - piece.read_from)
        counted_seconds = piece.counted_to - piece.counted_from
        del frame, piece, keys, pieces  # not held while the next piece is read: a piece is gigabytes at scale
        _report(progress, on_progress, counted_seconds)
    _say_impossible(progress, reader)
    verdicts = [
        ledger.verdict(t, _workload(owned, unit), (engines or {}).get(_pod_key(unit)))
        for unit, ledger in totals.items()
    ]
    return with_owners(verdicts, owned)


@dataclass
class _Piece:
    """A piece of the span read: its rows, the slots it counts ([counted_from, counted_to), unix seconds), and
    the steps its rows cover (the window before and after those slots)."""

    frame: pd.DataFrame
    counted_from: float
    counted_to: float
    read_from: float
    read_to: float


def _pieces(
    reader: SeriesReader, span: Span, groups: list[Group], window: float, slide: float, progress: Progress
) -> Generator[_Piece, None, None]:
    """Each group's pieces through the span, in order. The rows of a piece the next one needs too (the window
    before its slots) are carried, not read again."""
    for group in groups:
        scoped = reader.scoped(group.matcher)
        piece = _piece_seconds(_piece_length(group.gpus, span.step, window), slide, window)
        counted_from = span.start
        carried, carried_to = fr.empty(), -math.inf
        while counted_from <= span.end:
            counted_to = min(counted_from + piece, span.end + span.step)
            read_from, read_to = max(span.start, counted_from - window), min(span.end, counted_to + window)
            held = carried[carried["timestamp"].to_numpy() >= read_from]
            new_from = max(read_from, carried_to + span.step)
            frame = fr.concat(
                held, _read(scoped, new_from, read_to, span.step, progress) if new_from <= read_to else fr.empty()
            )
            del carried, held
            yield _Piece(frame, counted_from, counted_to, read_from, read_to)
            carried, carried_to = frame[frame["timestamp"].to_numpy() >= counted_to - window], read_to
            del frame
            if group.gpus is None and progress.gpus:  # a store that could not say: sized from the first
                piece = _piece_seconds(_piece_length(len(progress.gpus), span.step, window), slide, window)
            counted_from = counted_to


def _read_ahead(pieces: Generator[_Piece, None, None]) -> Iterator[_Piece]:
    """`pieces`, the next one read in a thread while the caller judges the last: the store evaluates and this
    process decodes the next piece's answers while it judges (on a day of 1,000 GPUs, 25 s of reading and 15
    s of judging, one after the other before). A piece read fails the caller when it takes it. If the caller
    stops, the read under way ends before the pieces are let go."""
    with ThreadPoolExecutor(1, thread_name_prefix="gpulens-piece") as pool:
        ahead = pool.submit(next, pieces, None)
        try:
            while (piece := ahead.result()) is not None:
                ahead = pool.submit(next, pieces, None)
                yield piece
                del piece  # the caller's only: judged, it goes
        finally:
            wait([ahead])
            pieces.close()


def _pod_key(unit: str) -> PodKey:
    namespace, _, pod = unit.partition("/")
    return namespace, pod


def _workload(owned: dict[PodKey, Owner], unit: str) -> WorkloadKind:
    """What the pod of `unit` ("namespace/pod") is, as its owner's kube-state-metrics series say."""
    owner = owned.get(_pod_key(unit))
    return owner.workload if owner else UNKNOWN


@dataclass(frozen=True)
class Group:
    """Nodes a report reads together: their exporters (`instance`; none: every GPU, unselected), and their
    GPUs (None: the store's index could not say)."""

    instances: frozenset[str]
    gpus: int | None

    @property
    def matcher(self) -> str:
        """A PromQL matcher selecting the group's exporters ("": every GPU)."""
        return instances_matcher(self.instances) if self.instances else ""


def _groups(reader: SeriesReader, span: Span, window: float, shard: Shard | None = None) -> list[Group]:
    """The groups of nodes a span is read in: as few as keep the shortest piece (a window counted, a window
    read on each side) of each within PIECE_ROWS, nodes balanced by GPUs. One group of every GPU where
    that fits, or where the store cannot name its exporters from its index. With `shard`, only its nodes'
    (none: no group), each group selecting them."""
    try:
        exporters = reader.exporters(span.start, span.end)
    except StoreError as e:
        if shard is not None:
            raise StoreError(
                f"{e}; a report split with --processes or --shard shares the nodes out from the store's index "
                "(/api/v1/series): let the reader ask it, or read the span in one process without them"
            ) from None
        log.debug("cannot list the span's exporters in advance: %s", e)
        return [Group(frozenset(), None)]
    if shard is not None:
        exporters = [e for e in exporters if shard.owns(e.node)]
        if not exporters:
            return []
    shortest_piece = (3 * window) / span.step + 1
    gpus = sum(len(e.gpus) for e in exporters)
    count = min(len(exporters), math.ceil(gpus * shortest_piece / PIECE_ROWS))
    if count <= 1:
        return [Group(frozenset(i for e in exporters for i in e.instances) if shard else frozenset(), gpus)]
    # The largest first, each to the group holding the fewest GPUs so far.
    members: list[list[Exporters]] = [[] for _ in range(count)]
    held = [0] * count
    for node in sorted(exporters, key=lambda e: (-len(e.gpus), sorted(e.instances))):
        lightest = held.index(min(held))
        members[lightest].append(node)
        held[lightest] += len(node.gpus)
    log.info(
        "%s: %d GPUs in the span, read in %d groups of nodes (a piece of them all would hold more than %d GPU-steps)",
        reader.store.name,
        gpus,
        count,
        PIECE_ROWS,
    )
    return [
        Group(frozenset(i for node in group for i in node.instances), size)
        for group, size in zip(members, held, strict=True)
    ]


def _piece_length(gpus: int | None, step: float, window: float) -> float:
    """Seconds a piece counts so that it reads at most PIECE_ROWS rows of `gpus` (its steps, a window's on
    each side, both ends read), or the shortest piece when that holds more or `gpus` is not known yet."""
    if not gpus:
        return 0.0
    return (PIECE_ROWS / gpus - 1) * step - 2 * window


def _refuse_too_many_pods(reader: SeriesReader, span: Span) -> None:
    """ValueError before anything is read when the store's index names more pods in the span than a report
    judges: heavy churn (a pod a job) was refused only once the pieces read had judged that many, gigabytes
    later. A store that cannot say is read as usual (the pieces are counted as they come)."""
    try:
        named = reader.pods_named(span.start, span.end)
    except StoreError as e:
        log.debug("cannot count the span's pods in advance: %s", e)
        return
    fr.require_few_enough(named, f"pods named in the span by {reader.store.name}")


def _say_impossible(progress: Progress, reader: SeriesReader) -> None:
    if progress.impossible_values:
        log.warning(
            "%s holds %d values no GPU can report, left out of the verdicts (as if not sampled); the first: %s",
            reader.store.name,
            progress.impossible_values,
            progress.first_impossible,
        )


def _owners(owners: OwnerReader | None, frame: pd.DataFrame, at: float, lookback: float) -> dict[PodKey, Owner]:
    """The owners of the pods in `frame`, as kube-state-metrics said in the `lookback` seconds to `at`."""
    if owners is None or frame.empty:
        return {}
    pods = frame[["namespace", "pod"]].drop_duplicates()
    return owners.read(zip(pods["namespace"].astype(str), pods["pod"].astype(str), strict=True), at, lookback)


def _piece_seconds(seconds: float, slide: float, window: float) -> float:
    """A piece's counted length: a whole number of slides (so pieces meet on slot boundaries), at least
    one window (the reads around a piece are two windows more)."""
    return max(math.floor(seconds / slide), math.ceil(window / slide)) * slide


def _read(reader: SeriesReader, start: float, end: float, step: float, progress: Progress) -> pd.DataFrame:
    """The trace frame of [start, end] (on the grid), counted into `progress`."""
    points = round((end - start) / step) + 1
    held = Window.of(step, points)
    held.move_to(end)
    before = reader.store.read_bytes
    reader.read(held, start, end)
    frame, impossible, first = fr.without_impossible(reader.frame(held, end - start + step))
    progress.impossible_values += sum(impossible.values())
    progress.first_impossible = progress.first_impossible or first
    progress.bytes_read += reader.store.read_bytes - before
    progress.gpus.update(frame["gpu"].unique())
    return frame


def _report(progress: Progress, on_progress: Callable[[Progress], None] | None, seconds: float) -> None:
    progress.pieces_done += 1
    progress.seconds_done = min(progress.span_seconds, progress.seconds_done + seconds)
    if on_progress is not None:
        on_progress(progress)

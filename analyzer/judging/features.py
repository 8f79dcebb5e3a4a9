"""Per-pod features of a trace window, computed for all pods at once.

Each signature is a per-sample boolean whose mean over a pod's samples is its feature: "p95 > 0.7"
is "more than 5% of samples above 0.7", "DRAM-bound" is "the share of samples with DRAM >= 0.5 and
pipes < 0.3". Rows are put in (pod, GPU, time) order once, by integer keys (and not at all when the
trace already is in that order), and every feature is then a reduction over contiguous segments
(numpy reduceat), so 10,000 GPUs over 10 minutes at 1 s take seconds. Sequences (busy/idle switches,
memory drops) are comparisons of neighbouring rows.

A "unit" is a pod (namespace/pod), or a GPU that no pod holds (gpu:<node>/<gpu>); over hours or days
(gpulens.analyzer.judging.history) it is a unit in one analysis window, and all windows are reduced at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.core import trace as tr
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.catalog import model_info
from gpulens.core.thresholds import Thresholds


class _Segments:
    """Reductions over contiguous runs of rows (one run per unit, or per GPU), each one numpy pass.

    NaN is a missing value: max and min skip it (fmax/fmin), and sums and means skip it too, paying
    for the masking pass only where a run mixes missing and present values."""

    def __init__(self, starts: np.ndarray, n: int):
        self.starts = starts
        self.sizes = np.diff(np.append(starts, n))

    def sum(self, x):
        return np.add.reduceat(x, self.starts)

    def count(self, valid):
        # int32 counts: a quarter of the memory traffic of int64, and no run holds 2**31 rows.
        return np.add.reduceat(valid, self.starts, dtype=np.int32)

    def share(self, mask, valid):
        """Fraction of the valid rows where `mask` holds (a signature's feature); NaN with none valid."""
        count = self.count(valid)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, self.count(mask & valid) / count, np.nan)

    def _sum_present(self, x):
        """Sums of the non-NaN values of each run, and their counts."""
        count = self.count(~np.isnan(x))
        total = self.sum(x)
        if np.any((count > 0) & (count < self.sizes)):
            total = self.sum(np.where(np.isnan(x), 0.0, x))
        return total, count

    def mean(self, x):
        """Mean of the non-NaN values; NaN where there are none."""
        if _absent(x):
            return self._nan()
        total, count = self._sum_present(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / count, np.nan)

    def max(self, x):
        return self._nan() if _absent(x) else np.fmax.reduceat(x, self.starts)

    def min(self, x):
        return self._nan() if _absent(x) else np.fmin.reduceat(x, self.starts)

    def std(self, x):
        """Sample standard deviation of the non-NaN values."""
        total, count = self._sum_present(x)
        squares, _ = self._sum_present(x * x)
        with np.errstate(invalid="ignore", divide="ignore"):
            variance = (squares - total * total / count) / (count - 1)
        return np.where(count > 1, np.sqrt(np.maximum(variance, 0.0)), np.nan)

    def _nan(self):
        return np.full(len(self.starts), np.nan)


def _absent(x: np.ndarray) -> bool:
    """Whether `x` is a column the trace does not have (_Rows.column): NaN everywhere, with no memory
    behind it, so its reductions are NaN without a pass over the rows."""
    return len(x) > 0 and x.strides == (0,) and bool(np.isnan(x[0]))


def pod_features(
    trace: pd.DataFrame,
    t: Thresholds,
    window: np.ndarray | None = None,
    keys: UnitKeys | None = None,
    per_sample: PerSample | None = None,
) -> pd.DataFrame:
    """One row per unit with everything the classifier needs. Index: unit.

    `window`, one integer per trace row, splits each unit into one unit per window (column `window`);
    rows with a negative window are left out. `keys`: UnitKeys.of(trace), and `per_sample`: PerSample.of(trace,
    t, keys), when several calls share them."""
    if trace.empty:
        return pd.DataFrame()
    rows = _Rows(trace, window, keys)
    signals = _Signals(rows, t, per_sample)
    features = _features(rows, signals, t)
    starting = signals.start_up_end > rows.units.min(rows.ts)
    if starting.any():
        features = _after_start_up(trace, t, window, rows, np.where(starting, signals.start_up_end, np.nan), features)
    if window is not None:
        features = features[features["window"] >= 0]
    return features


def _features(rows: _Rows, signals: _Signals, t: Thresholds) -> pd.DataFrame:
    """Every unit's features, with its window (where the rows were split into windows)."""
    features = _reduce(rows, signals, t)
    _add_identity(rows, features)
    _add_gpus(rows, signals, t, features)
    _add_timing(features)
    features["start_up_seconds"] = 0.0
    if rows.unit_window is not None:
        features["window"] = rows.unit_window
    return features


def _after_start_up(
    trace: pd.DataFrame,
    t: Thresholds,
    window: np.ndarray | None,
    rows: _Rows,
    start_up_end: np.ndarray,
    features: pd.DataFrame,
) -> pd.DataFrame:
    """`features` with each unit whose process starts with the data read again from its rows from
    `start_up_end` on (unix seconds per unit; NaN for the others): a model load, a warm-up, NCCL set-up and
    compilation are not the steady state and give the job no verdict (too few rows left: insufficient_data)."""
    kept = np.flatnonzero(rows.ts >= rows.per_row(start_up_end))  # NaN compares False: other units' rows go
    positions = np.sort(rows.order_of(kept))
    steady_rows = _Rows(trace.iloc[positions].reset_index(drop=True), None if window is None else window[positions])
    steady = _features(steady_rows, _Signals(steady_rows, t), t)

    # The same units (one a window) in both, keyed alike: where each steady one sits among `features`.
    def names(f: pd.DataFrame) -> pd.Index:
        return pd.MultiIndex.from_arrays([f.index, f["window"] if window is not None else np.zeros(len(f))])

    at = names(features).get_indexer(names(steady))
    steady["start_up_seconds"] = start_up_end[at] - features["start"].to_numpy()[at]
    steady.index = features.index[at]
    others = np.setdiff1d(np.arange(len(features)), at)
    merged = pd.concat([features.iloc[others], steady[features.columns]])
    return merged.iloc[np.argsort(np.r_[others, at], kind="stable")]


@dataclass(frozen=True)
class UnitKeys:
    """Integer codes of each row's unit and GPU (in the trace's row order), and the rows' (unit, GPU,
    time) order (None: already in it). Computed once per trace; every window pass shares them."""

    unit: np.ndarray
    gpu: np.ndarray
    order: np.ndarray | None

    @classmethod
    def of(cls, trace: pd.DataFrame) -> UnitKeys:
        # Rows come in runs of one GPU's samples (a run ends where node, GPU, namespace or pod changes):
        # the keys are worked out once a run, from small integer codes, not once a row from strings.
        codes = [_codes(trace[name]) for name in ("node", "gpu", "namespace", "pod")]
        change = np.zeros(len(trace), dtype=bool)
        change[0] = True
        for code, _ in codes:
            change[1:] |= code[1:] != code[:-1]
        starts = np.flatnonzero(change)
        sizes = np.diff(np.append(starts, len(trace)))
        (node, _), (gpu, gpus), (namespace, _), (pod, pods) = ((c[starts].astype(np.int64), n) for c, n in codes)
        # A GPU is (node, gpu); a unit is (namespace, pod), or its GPU when no pod holds it. Both are
        # numbered in order of first appearance, so units come out in the trace's order.
        gpu_key, _ = pd.factorize(node * (gpus + 1) + gpu)
        no_pod = (trace["pod"].iloc[starts] == "").to_numpy()
        unit_key, _ = pd.factorize(np.where(no_pod, -1 - gpu_key, namespace * (pods + 1) + pod))
        unit, gpu_key = unit_key.astype(np.int64), gpu_key.astype(np.int64)
        # In (unit, GPU, time) order already when each run follows the one before in (unit, GPU) and
        # time never goes back within a run.
        run_key = unit * (len(gpu_key) + 1) + gpu_key
        ts = trace["timestamp"].to_numpy()
        in_order = bool(np.all(run_key[1:] > run_key[:-1]) and np.all(change[1:] | (ts[1:] >= ts[:-1])))
        unit_rows, gpu_rows = np.repeat(unit, sizes), np.repeat(gpu_key, sizes)
        return cls(unit_rows, gpu_rows, None if in_order else _order(unit_rows, gpu_rows, ts))

    def names(self, trace: pd.DataFrame) -> np.ndarray:
        """The name of each unit code (codes are 0..n-1): "namespace/pod" or "gpu:node/gpu"."""
        _, first_rows = np.unique(self.unit, return_index=True)
        return unit_names(trace, first_rows)


def _codes(column: pd.Series) -> tuple[np.ndarray, int]:
    """An integer code for each row's value, and how many codes there can be: a categorical column's own
    codes (free: fr.normalize makes the identity columns categorical), else a factorization."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), len(column.cat.categories)
    codes, uniques = pd.factorize(column)
    return codes, len(uniques)


def _order(unit: np.ndarray, gpu: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The positions of the rows in (unit, GPU, time) order."""
    key = unit * (int(gpu.max()) + 1) + gpu
    if np.all(ts[1:] >= ts[:-1]):  # in time order, as recorders write: one sort by (unit, GPU) keeps it
        return np.argsort(key, kind="stable")
    by_time = np.argsort(ts, kind="stable")
    return by_time[np.argsort(key[by_time], kind="stable")]


class _Rows:
    """The trace's rows in (unit, GPU, time) order, and where each unit's and each GPU's run starts."""

    def __init__(self, trace: pd.DataFrame, window: np.ndarray | None = None, keys: UnitKeys | None = None):
        self.trace = trace
        keys = keys or UnitKeys.of(trace)
        self.order = keys.order
        #: Where the window split sorted the rows again: the positions, in (unit, GPU, time) order, of this
        #: order's rows (None: no sort, the rows are in that order).
        self.resorted: np.ndarray | None = None
        unit, gpu = (a if self.order is None else a[self.order] for a in (keys.unit, keys.gpu))
        if window is not None:
            # One unit per (unit, window). Within a (unit, GPU) run, time and so the window only grow:
            # a stable sort by (unit, window) keeps each GPU's samples in time order. Rows in no window
            # (negative: a window that would end after the data, left out) are a GPU's last, so they rank
            # after its last window: a unit of one GPU stays in order and needs no sort, nor its columns a
            # gather each pass (py-spy: the gathers were 6% of a day's report, fr.concat).
            sorted_window = window if self.order is None else window[self.order]
            after_last = int(window.max()) + 1
            unit = unit * (after_last + 1) + np.where(sorted_window < 0, after_last, sorted_window)
            if np.any(unit[1:] < unit[:-1]):
                by_window = np.argsort(unit, kind="stable")
                unit, gpu, sorted_window = unit[by_window], gpu[by_window], sorted_window[by_window]
                self.order = by_window if self.order is None else self.order[by_window]
                self.resorted = by_window
        ts = trace["timestamp"].to_numpy()
        self.ts = ts if self.order is None else ts[self.order]
        n = len(self.ts)
        self.unit_starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]])
        #: True where a row starts another GPU's run: neighbours across it are not a sequence.
        self.gpu_changes = np.r_[True, (gpu[1:] != gpu[:-1]) | (unit[1:] != unit[:-1])]
        self.gpu_starts = np.flatnonzero(self.gpu_changes)
        self.units, self.gpus = _Segments(self.unit_starts, n), _Segments(self.gpu_starts, n)
        gpu_unit = np.searchsorted(self.unit_starts, self.gpu_starts, side="right") - 1
        self.first_gpu_of_unit = np.searchsorted(gpu_unit, np.arange(len(self.unit_starts)))
        #: Reductions over the GPUs of each unit (of per-GPU values).
        self.unit_gpus = _Segments(self.first_gpu_of_unit, len(self.gpu_starts))
        self.row_unit = np.repeat(np.arange(len(self.unit_starts)), self.units.sizes)
        #: Each unit's window (where the rows were split into windows), else None.
        self.unit_window = None if window is None else sorted_window[self.unit_starts]

    def intervals(self) -> np.ndarray:
        """Seconds between one GPU's consecutive samples, per unit: the median spacing, so that a gap in
        the data (an exporter down, a recording paused, a missed scrape) does not stretch every sample
        over it. NaN for a unit with no GPU sampled twice."""
        # Each row's time since the one before on its GPU; NaN on a GPU's first row.
        spacing = np.empty_like(self.ts)
        spacing[0] = np.nan
        np.subtract(self.ts[1:], self.ts[:-1], out=spacing[1:])
        spacing[self.gpu_changes] = np.nan
        low, high = self.units.min(spacing), self.units.max(spacing)
        irregular = low != high  # NaN (no spacing at all) compares unequal too, and stays NaN below
        if not irregular.any():
            return low
        # Only units sampled at uneven spacing pay for sorting theirs.
        rows = np.flatnonzero(~np.isnan(spacing) & np.repeat(irregular, self.units.sizes))
        medians = _PerUnit(spacing[rows], self.row_unit[rows], len(self.unit_starts)).median()
        return np.where(irregular, medians, low)

    def per_row(self, per_unit: np.ndarray | list[float]) -> np.ndarray:
        """A value per unit, spread over the unit's rows."""
        return np.repeat(np.asarray(per_unit, dtype=np.float64), self.units.sizes)

    def column(self, name: str) -> np.ndarray:
        if name not in self.trace:  # a group the input does not have (trace.LINKS): NaN, without the memory
            return np.broadcast_to(np.nan, len(self.ts))
        return self.gather(self.trace[name].to_numpy())

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Values in the trace's row order, put in this order."""
        return values if self.order is None else values[self.order]

    def order_of(self, positions: np.ndarray) -> np.ndarray:
        """The trace positions of sorted positions."""
        return positions if self.order is None else self.order[positions]

    def rows_of(self, name: str, positions: np.ndarray) -> np.ndarray:
        """A string column at a few sorted positions, without converting the whole column."""
        return self.trace[name].iloc[self.order_of(positions)].to_numpy()


class PerSample:
    """What each sample shows on its own or beside the sample before it on its GPU, as arrays in the rows'
    order: the signals that do not depend on where a window starts or ends. A report's window passes over
    the same rows (history.ledgers) make them once and share them (PerSample.of): only a pass whose windows
    split a multi-GPU unit reorders them (py-spy: making them again each pass was half of a day's features)."""

    def __init__(self, rows: _Rows, t: Thresholds):
        self._activity(rows, t)
        self._hardware(rows, t)
        self._waiting(rows, t)
        self._neighbours(rows, t)

    @classmethod
    def of(cls, trace: pd.DataFrame, t: Thresholds, keys: UnitKeys | None = None) -> PerSample:
        """The trace's samples in (unit, GPU, time) order, as every window pass over it (pod_features' `window`)
        takes them."""
        return cls(_Rows(trace, None, keys), t)

    def _activity(self, rows: _Rows, t: Thresholds) -> None:
        """Activity, and whether each row is busy: from the rows, and where the trace has it from the exporter's
        activity shape (trace.SHAPE) of every driver sample."""
        column = rows.column
        self.sm = column("sm_active")
        self.gr = column("gr_engine_active")
        self.act = rows.gather(fr.activity(rows.trace).to_numpy())
        self.has_activity = ~np.isnan(self.act)
        self.act0 = np.fmax(self.act, 0.0)  # NaN as 0 (activity is never negative)
        self.busy = self.act0 >= t.idle_activity
        # The exporter's activity shape (trace.SHAPE), where the trace has it: counts of driver samples.
        self.shape = fr.has_shape(rows.trace)
        if self.shape:
            # Counts and ratios, never negative: fmax(x, 0) reads NaN as 0.
            self.shape_n = np.fmax(column("activity_samples"), 0.0)
            self.shape_idle, self.shape_low, self.shape_high = (
                np.fmax(column(name), 0.0) * self.shape_n
                for name in ("activity_idle_ratio", "activity_low_ratio", "activity_high_ratio")
            )
            self.shape_transitions = np.fmax(column("activity_transitions"), 0.0)
            self.shape_steady = np.fmax(column("steady_bursts"), 0.0)
            # A row stands for the time since the one before: it is busy if the GPU worked at any moment
            # of it, even when the sample the row shows fell in a gap.
            self.busy |= (self.shape_n > 0) & (self.shape_idle < self.shape_n - 0.5)

    def _hardware(self, rows: _Rows, t: Thresholds) -> None:
        """Memory, the math pipes, DRAM, links, power, CPU and clocks, each as a share of its capacity where the
        GPU's model (one a unit) says it."""
        column = rows.column
        self.mem_used = column("memory_used_bytes")
        capacity, self.capacity_from_catalogue = (rows.gather(a) for a in fr.memory_capacity(rows.trace))
        self.mem_frac = self.mem_used / capacity
        self.pipes = np.fmax(
            np.fmax(column("tensor_active"), column("fp16_active")),
            np.fmax(column("fp32_active"), column("fp64_active")),
        )
        self.dram = column("dram_active")
        # A pod runs on one GPU model: link capacities by unit, spread over its rows.
        unit_models = rows.rows_of("gpu_model", rows.unit_starts)
        info = {name: model_info(name) for name in set(unit_models)}
        pcie_cap = rows.per_row([info[x].pcie_bytes_per_second for x in unit_models])
        nvlink_cap = rows.per_row([info[x].nvlink_bytes_per_second for x in unit_models])
        power_limit = rows.per_row([info[x].power_limit_watts for x in unit_models])
        with np.errstate(invalid="ignore", divide="ignore"):
            pcie_use = np.fmax(column("pcie_tx_bytes_per_second"), column("pcie_rx_bytes_per_second")) / pcie_cap
            nvlink_use = np.where(
                nvlink_cap > 0,
                np.fmax(column("nvlink_tx_bytes_per_second"), column("nvlink_rx_bytes_per_second")) / nvlink_cap,
                np.nan,
            )
            self.cpu = column("cpu_usage_cores") / column("cpu_limit_cores")
            #: One core busy under a limit of more (or none): one host thread, held to a core by the GIL.
            limit = column("cpu_limit_cores")
            self.one_core = (np.abs(column("cpu_usage_cores") - 1.0) <= t.host_thread_cores) & ~(
                limit <= 1.0 + 2 * t.host_thread_cores
            )
            self.cpu_known = ~np.isnan(column("cpu_usage_cores"))
            self.clock = column("sm_clock_hertz") / column("sm_clock_max_hertz")
            # Of the board's limit: what a GPU draws tells work from a kernel spinning while it waits. Not on
            # a MIG instance: its board's power is shared with the other instances.
            self.power = column("power_watts") / power_limit
        unit_gpus = rows.rows_of("gpu", rows.unit_starts)
        mig = rows.per_row([fr.is_mig(model, gpu) for model, gpu in zip(unit_models, unit_gpus, strict=True)])
        self.power = np.where(mig > 0, np.nan, self.power)
        self.link = np.fmax(pcie_use, nvlink_use)
        self.nvlink_use = nvlink_use
        with np.errstate(invalid="ignore", divide="ignore"):
            # Collectives send as much as they receive; an input pipeline mostly receives.
            self.pcie_peer = np.fmin(column("pcie_tx_bytes_per_second"), column("pcie_rx_bytes_per_second")) / pcie_cap
        #: Bytes per second into the GPU over PCIe (DCGM's PCIE_RX, NVML's RX: host-to-device, or from a peer).
        self.host_to_device = column("pcie_rx_bytes_per_second")
        #: Bytes per second out of the GPU over PCIe (TX): gradients sent back to host memory, or to a peer.
        self.device_to_host = column("pcie_tx_bytes_per_second")

    def _waiting(self, rows: _Rows, t: Thresholds) -> None:
        """Waiting (a kernel spinning at low power or with idle SMs), stalled samples (waiting or without a
        kernel), and fetches from host memory."""
        column = rows.column
        # A kernel ran (utilization above starvation_high) while the GPU waited: at a small share of the
        # board's power, or with its SMs idle. NCCL spins a kernel while a rank waits in a collective, and
        # utilization says "busy" (docs/signals.md: busy is not working).
        kernel = np.fmax(column("gpu_util"), self.act)
        self.kernel_busy = kernel_busy = kernel > t.starvation_high
        self.waiting = kernel_busy & ((self.power < t.waiting_power_share) | (self.sm < t.starvation_low))
        self.waiting_known = self.has_activity & (~np.isnan(self.power) | ~np.isnan(self.sm))
        #: Waiting that SM activity shows (a kernel ran with its SMs idle: NCCL's spin), not power alone.
        self.spinning = kernel_busy & (self.sm < t.starvation_low)
        self.busy_power = np.where(kernel_busy, self.power, np.nan)
        #: No kernel at all (utilization under starvation_low): a rank writing a checkpoint, loading data.
        self.no_kernel = kernel < t.starvation_low
        #: Stalled: waiting or without a kernel. Runs of stalled samples on one GPU are its stalls.
        self.stalled = self.waiting | self.no_kernel
        with np.errstate(invalid="ignore"):
            #: Fetching from host memory while the SMs wait: a CPU-offloaded job's parameter fetches. Not while a
            #: kernel spins (waiting): a copy runs no kernel, and a rank spinning in a collective whose peers are
            #: in other pods moves its exchange and its input over PCIe too.
            self.host_fetch = (
                (self.host_to_device >= t.offload_pcie_bytes_per_second)
                & (self.act < t.interconnect_sm)
                & ~self.waiting
            )

    def _neighbours(self, rows: _Rows, t: Thresholds) -> None:
        """Throttling, the hardware's faults and topology, the work in each row, and what changed since the row
        before (busy/idle switches, burst starts, memory drops): a pass's own first row of each GPU has no row
        before it in its window (_Signals._sequences masks them)."""
        column = rows.column
        self.reasons_raw = column("clock_event_reasons")
        self.throttled = (np.fmax(self.reasons_raw, 0.0).astype(np.int64) & t.throttle_reasons_mask) != 0
        state = self.act0 >= BUSY_LEVEL  # the exporter's switch level (core/activity.py)
        self.state_changed = np.r_[False, state[1:] != state[:-1]]
        self.state_rose = np.r_[False, state[1:] & ~state[:-1]]
        with np.errstate(invalid="ignore"):
            self.memory_fell = np.r_[False, (self.mem_frac[1:] - self.mem_frac[:-1]) < -t.memory_drop]
        self.restarts = column("restarts_total")
        self.numa, self.pcie_root, self.nvlink_group = (column(c) for c in ("numa_node", "pcie_root", "nvlink_group"))
        self.links_down = column("nvlink_links_down")
        self.xid = column("hardware_xid")
        self.crc, self.replay, self.recovery = (column(c) for c in tr.NVLINK_ERROR_RATES)
        # Work per row, 0-1 (frame.work): the share of the row's time a kernel ran.
        self.work = rows.gather(fr.work(rows.trace)) if self.shape else self.act


class _Signals(PerSample):
    """What each sample shows, as arrays in the rows' order: the inputs of every signature. `per_sample`: the
    same trace's PerSample.of(), which this pass's rows then reorder rather than make again."""

    def __init__(self, rows: _Rows, t: Thresholds, per_sample: PerSample | None = None):
        if per_sample is None:
            super().__init__(rows, t)
        else:
            self._reordered(per_sample, rows.resorted)
        self._stalls(rows)
        self._sequences(rows)
        self._start_up(rows, t)

    def _reordered(self, per_sample: PerSample, positions: np.ndarray | None) -> None:
        """`per_sample`'s signals, each taken at `positions` (None: as they are)."""
        for name, values in vars(per_sample).items():
            # A column the trace does not have is a broadcast NaN (_Rows.column): it stays one.
            if positions is not None and isinstance(values, np.ndarray) and values.strides != (0,):
                values = values[positions]
            setattr(self, name, values)

    def _stalls(self, rows: _Rows) -> None:
        """Stalls: runs of stalled rows on one GPU, their lengths and the time from one to the next."""
        run_starts = np.flatnonzero(self.stalled & (rows.gpu_changes | ~np.r_[False, self.stalled[:-1]]))
        run_ends = np.flatnonzero(self.stalled & (np.r_[rows.gpu_changes[1:], True] | ~np.r_[self.stalled[1:], False]))
        # A stall has work on both sides: quiet at the start or the end of a GPU's rows is its start-up (a model
        # loading) or its end (work done, a replica between requests), not a pause in work the data saw.
        bounded = ~rows.gpu_changes[run_starts] & ~np.r_[rows.gpu_changes[1:], True][run_ends]
        run_starts, run_ends = run_starts[bounded], run_ends[bounded]
        self.stall_rows = run_ends - run_starts + 1
        self.stall_unit = rows.row_unit[run_starts]
        # Stalls that repeat at a steady period are saves (checkpoints); the time from one to the next.
        same_gpu = np.cumsum(rows.gpu_changes)[run_starts]
        follows = same_gpu[1:] == same_gpu[:-1]
        self.stall_spacing = np.diff(rows.ts[run_starts])[follows]
        self.stall_spacing_unit = self.stall_unit[1:][follows]

    def _sequences(self, rows: _Rows) -> None:
        """Busy/idle switches, memory drops and burst starts between neighbouring rows of one GPU, and the
        pauses while a GPU worked."""
        self.switch = self.state_changed & ~rows.gpu_changes
        self.drop = self.memory_fell & ~rows.gpu_changes
        # Before each busy sample, how long the GPU had been without work since its previous busy
        # sample: the pauses while it worked. The quiet before its first is no pause of work the data saw.
        marker = self.busy | rows.gpu_changes
        last_marker = np.maximum.accumulate(marker * np.arange(len(marker)))
        before = np.r_[0, last_marker[:-1]]
        self.pause = np.where(self.busy & ~rows.gpu_changes & self.busy[before], rows.ts - rows.ts[before], np.nan)
        # Burst starts (activity rising through BUSY_LEVEL), and the time from one to the next on a GPU:
        # training steps repeat at a steady period, requests arrive at random.
        self.rise = self.state_rose & ~rows.gpu_changes
        rises = np.flatnonzero(self.rise)
        gpu_run = np.cumsum(rows.gpu_changes)
        same_gpu = gpu_run[rises[1:]] == gpu_run[rises[:-1]]
        self.burst_spacing = np.diff(rows.ts[rises])[same_gpu]
        self.burst_spacing_unit = rows.row_unit[rises[1:]][same_gpu]

    def _start_up(self, rows: _Rows, t: Thresholds) -> None:
        """A model load: memory that rose from under memory_growth (nothing loaded: the data begins with
        the process) to within memory_growth of the level it then held, reaching it in the first half of the
        unit's rows. It ends (warm-up done) at the first row without work (frame.work) after that, or after
        a warm-up that starts within two rows of it. What follows is the steady state that sparse use,
        serving and a pre-allocator's memory are read from; a unit with no load seen is steady throughout,
        and one that loaded and has not paused since (a training job) has no steady rows (load_end NaN).
        start_up_end: where the data begins with the process, when its start-up ended, the rows before it
        left out of every feature (pod_features); else the unit's first row."""
        U, ts = rows.units, rows.ts
        peak = U.max(self.mem_frac)
        with np.errstate(invalid="ignore"):
            first = self.mem_frac[rows.unit_starts]
            rose = (first < t.memory_growth) & (peak - first >= t.memory_growth)
        if not rose.any():  # no unit began empty (most windows of a running fleet): all steady, no pass more
            self.load_seen, self.load_end = rose, U.min(ts)
            self.steady = self.memory_held = np.ones(len(ts), dtype=bool)
            self.start_up_end = self.load_end
            return
        start, end = U.min(ts), U.max(ts)
        held = U.min(np.where(self.mem_frac >= rows.per_row(peak) - t.memory_growth, ts, np.nan))
        with np.errstate(invalid="ignore"):
            # The process starts with the data: its memory begins to rise in the first quarter of the unit's
            # rows (a notebook left at its CUDA context for long before it loads is no start-up).
            rise = U.min(np.where(self.mem_frac >= rows.per_row(first + t.memory_growth), ts, np.nan))
            starts_with_data = rose & (rise - start <= 0.25 * (end - start))
        with np.errstate(invalid="ignore"):
            # From (nearly) nothing: the data begins with the process. A restart mid-window is no start-up.
            self.load_seen = rose & (held - start <= 0.5 * (end - start))
            # The warm-up (vLLM captures CUDA graphs once its KV cache is allocated) starts by the second
            # row after the memory is held, and the load ends when it pauses: a row with no work in it.
            after = ts >= rows.per_row(held)
            work = self.work >= t.idle_activity
            soon = rows.per_row(held + 2 * rows.intervals())
            warm_up = U.min(np.where(after & work & (ts <= soon), ts, np.nan))
            pause = (ts >= rows.per_row(np.fmax(held, warm_up))) & ~work & self.has_activity
        self.load_end = np.where(self.load_seen, U.min(np.where(pause, ts, np.nan)), start)
        #: Where the process starts with the data, its start-up ends at load_end (the warm-up's pause), or
        #: once its memory is held where work has not paused since (a training job); else at the start.
        self.start_up_end = np.where(
            starts_with_data, np.where(self.load_seen & ~np.isnan(self.load_end), self.load_end, held), start
        )
        with np.errstate(invalid="ignore"):
            self.steady = ts >= rows.per_row(self.load_end)
            #: Rows once the loaded memory is held, activity or not (a replica that serves from its load on).
            self.memory_held = ts >= rows.per_row(np.where(self.load_seen, held, start))


class _PerUnit:
    """Values sorted within each unit, to pick order statistics per unit (NaN for a unit with none)."""

    def __init__(self, values: np.ndarray, unit: np.ndarray, units: int):
        self.values = values[np.lexsort((values, unit))]
        self.counts = np.bincount(unit, minlength=units)
        self.starts = np.r_[0, np.cumsum(self.counts)[:-1]]

    def at(self, rank: np.ndarray) -> np.ndarray:
        """The value of each unit's `rank`-th smallest (0-based)."""
        if not len(self.values):
            return np.full(len(self.counts), np.nan)
        picked = self.values[np.minimum(self.starts + rank, len(self.values) - 1)]
        return np.where(self.counts > 0, picked, np.nan)

    def median(self) -> np.ndarray:
        """As numpy.median: the mean of the two middle values of an even count."""
        return (self.at((self.counts - 1) // 2) + self.at(self.counts // 2)) / 2

    def quantile(self, q: float) -> np.ndarray:
        """Nearest rank, rounding down."""
        return self.at(np.floor(q * (self.counts - 1)).astype(np.int64))


def _reduce(rows: _Rows, s: _Signals, t: Thresholds) -> pd.DataFrame:
    """Each signal reduced over each unit's samples (and, for placement, over its GPUs)."""
    features = _reduce_rows(rows, s, t)
    _add_shape(rows, s, features)
    return features


def _add_shape(rows: _Rows, s: _Signals, features: pd.DataFrame) -> None:
    """Where the trace carries the exporter's activity shape on most of a unit's rows, the shape features
    come from every driver sample rather than from the rows: the share of samples above high and below
    low, the quiet share, busy/idle switches and bursts, and the share of bursts that repeated the
    previous period (`steady_burst_share`; NaN from rows, which give `burst_spread` instead)."""
    features["quiet_share"] = features["idle_share"]
    features["steady_burst_share"] = np.nan
    features["shape_samples"] = 0.0
    features["has_shape"] = False
    if not s.shape:
        return
    U = rows.units
    n = U.sum(s.shape_n)
    shape = (n > 0) & (U.count(s.shape_n > 0) >= 0.5 * features["samples"].to_numpy())
    transitions = U.sum(s.shape_transitions)
    with np.errstate(invalid="ignore", divide="ignore"):
        for column, counts in (("high_share", s.shape_high), ("low_share", s.shape_low), ("quiet_share", s.shape_idle)):
            features[column] = np.where(shape, U.sum(counts) / n, features[column])
        steady = 2 * U.sum(s.shape_steady) / transitions
        features["steady_burst_share"] = np.where(shape & (transitions > 0), steady, np.nan)
    features["switches"] = np.where(shape, transitions, features["switches"])
    features["bursts"] = np.where(shape, np.floor(transitions / 2), features["bursts"])
    after_load = np.floor(U.sum(np.where(s.steady, s.shape_transitions, 0.0)) / 2)
    features["bursts_after_load"] = np.where(shape, after_load, features["bursts_after_load"])
    features["shape_samples"] = np.where(shape, n, 0.0)
    features["has_shape"] = shape


def _reduce_rows(rows: _Rows, s: _Signals, t: Thresholds) -> pd.DataFrame:
    U, ts = rows.units, rows.ts
    last_busy = U.max(np.where(s.busy & s.has_activity, ts, np.nan))
    lb = rows.per_row(last_busy)
    interval = rows.intervals()
    spacing = _PerUnit(s.burst_spacing, s.burst_spacing_unit, len(rows.unit_starts))
    q25, period, q75 = spacing.quantile(0.25), spacing.quantile(0.5), spacing.quantile(0.75)
    gpu_activity = rows.gpus.mean(s.act)
    stall_rows = _PerUnit(s.stall_rows.astype(float), s.stall_unit, len(rows.unit_starts))
    stall_gaps = _PerUnit(s.stall_spacing, s.stall_spacing_unit, len(rows.unit_starts))
    stall_q25, stall_period, stall_q75 = (stall_gaps.quantile(q) for q in (0.25, 0.5, 0.75))
    reasons_known = ~np.isnan(s.reasons_raw)
    bursts, memory_spread = U.count(s.rise).astype(float), U.std(s.mem_frac)
    # Gaps between bursts with no kernel running: a rank spinning in a collective (waiting) moves its exchange
    # and its input over PCIe, and waits on a peer, not on what it fetches.
    gap = s.has_activity & (s.act0 < t.starvation_low) & ~s.waiting
    return pd.DataFrame(
        {
            "samples": U.sizes,
            "interval": interval,
            "start": U.min(ts),
            "end": U.max(ts),
            "activity": U.mean(s.act),
            "sm_active": U.mean(s.sm),
            "has_activity": U.count(s.has_activity) > 0,
            "has_profiling": U.count(~np.isnan(s.sm) | ~np.isnan(s.dram)) > 0,
            # Graphics-engine activity (DCGM's GR_ENGINE_ACTIVE, dcgmi dmon's GRACT, MIG instances).
            "engine_active": U.mean(s.gr),
            "idle_share": U.share(~s.busy, s.has_activity),
            "high_share": U.share(s.act0 > t.starvation_high, s.has_activity),
            "low_share": U.share(s.act0 < t.starvation_low, s.has_activity),
            "switches": U.count(s.switch).astype(float),
            "last_busy": last_busy,
            # Busy share of the last t.recent_samples samples up to the last busy one: sustained work (a
            # job that then stopped) or bursts (a replica between requests, a notebook between cells).
            "busy_before_share": U.share(
                s.busy, s.has_activity & (ts <= lb) & (ts > lb - t.recent_samples * rows.per_row(interval))
            ),
            "longest_pause_seconds": U.max(s.pause),
            "bursts": bursts,
            # After the start-up (_Signals._start_up): when it ended, the bursts and work since, and how
            # flat memory stayed.
            "load_seen": s.load_seen,
            "load_end": s.load_end,
            "bursts_after_load": U.count(s.rise & s.steady).astype(float) if s.load_seen.any() else bursts,
            "work_share": U.mean(np.where(s.steady, s.work, np.nan) if s.load_seen.any() else s.work),
            "memory_spread_after_load": U.std(np.where(s.memory_held, s.mem_frac, np.nan))
            if s.load_seen.any()
            else memory_spread,
            "burst_period_seconds": period,
            "burst_spread": (q75 - q25) / period,
            "memory_peak": U.max(s.mem_frac),
            "memory_low": U.min(s.mem_frac),
            "memory_spread": memory_spread,
            "memory_peak_bytes": U.max(s.mem_used),
            # Rows whose capacity is the catalogue's (frame.memory_capacity): the input has no total.
            "capacity_from_catalogue": U.count(s.capacity_from_catalogue) > 0,
            "model_held_share": U.share(s.mem_used >= t.serving_memory_bytes, ~np.isnan(s.mem_used)),
            "memory_full_share": U.share(s.mem_frac > t.memory_full, ~np.isnan(s.mem_frac)),
            "memory_drops": U.count(s.drop).astype(float),
            "restarts_max": U.max(s.restarts),
            "restarts_min": U.min(s.restarts),
            "dram_active": U.mean(s.dram),
            "dram_bound_share": U.share(
                (s.dram >= t.dram_active) & (s.pipes < t.pipes_idle), ~np.isnan(s.dram) & ~np.isnan(s.pipes)
            ),
            "link_use": U.mean(s.link),
            # Without SM activity a saturated link is the evidence: utilization shows only that kernels ran.
            "link_bound_share": U.share(
                (s.link >= t.link_busy) & (np.isnan(s.sm) | (s.sm < t.interconnect_sm)),
                ~np.isnan(s.link) & s.has_activity,
            ),
            # Of busy time: a clock held down while nothing runs costs nothing, and a starved GPU that
            # is throttled during each of its bursts is throttled.
            "throttled_share": U.share(s.throttled, s.busy & reasons_known),
            # Of all time: how long the bits held, for the duration threshold.
            "throttled_time_share": U.share(s.throttled, reasons_known),
            "clock_share": U.mean(s.clock),
            # Samples where a kernel ran most of the time (utilization or activity above starvation_high).
            "kernel_busy_share": U.share(s.kernel_busy, s.has_activity),
            # Power while a kernel ran: near the limit for work, near idle for waiting.
            "busy_power_share": U.mean(s.busy_power),
            # Share of samples busy at low power (or with SMs idle): waiting, not working.
            "waiting_share": U.share(s.waiting, s.waiting_known),
            "spinning_share": U.share(s.spinning, ~np.isnan(s.sm) & s.has_activity),
            # Stalls (runs of waiting or kernel-less samples on one GPU): how many, their median length in
            # samples, and the median time from one to the next and its spread, (p75 - p25) / median.
            "stalls": np.bincount(s.stall_unit, minlength=len(rows.unit_starts)).astype(float),
            # Stalled samples that still hold a model's memory: a save keeps it; a process that ended does not.
            "stall_held_share": U.share(s.mem_used >= t.serving_memory_bytes, s.stalled & ~np.isnan(s.mem_used)),
            "stall_samples": stall_rows.median(),
            "stall_period_seconds": stall_period,
            "stall_spread": (stall_q75 - stall_q25) / stall_period,
            "cpu_at_limit_share": U.share(s.cpu >= t.cpu_saturated, ~np.isnan(s.cpu)),
            "one_core_share": U.share(s.one_core, s.cpu_known & s.has_activity),
            # While the CPU sat at its limit: how busy the GPU was, and whether it still did after the
            # GPU's last work (a pod busy on its CPU is not idle).
            "activity_at_cpu_limit": U.mean(np.where(s.cpu >= t.cpu_saturated, s.act, np.nan)),
            "cpu_at_limit_after_work": U.share(s.cpu >= t.cpu_saturated, ~np.isnan(s.cpu) & ~(ts <= lb)),
            # The highest hardware XID code reported in the window, and when the last one came.
            "hardware_xid": U.max(s.xid),
            "hardware_xid_last": U.max(np.where(s.xid > 0, ts, np.nan)),
            "numa_nodes": _spread(U, s.numa),
            "pcie_roots": _spread(U, s.pcie_root),
            "nvlink_groups": _spread(U, s.nvlink_group),
            "nvlink_use": U.mean(s.nvlink_use),
            "pcie_peer_use": U.mean(s.pcie_peer),
            "host_to_device_bytes_per_second": U.mean(s.host_to_device),
            # What crosses PCIe while the GPU sits idle between its bursts (activity under starvation_low).
            "host_to_device_in_gaps_bytes_per_second": U.mean(np.where(gap, s.host_to_device, np.nan)),
            "device_to_host_in_gaps_bytes_per_second": U.mean(np.where(gap, s.device_to_host, np.nan)),
            "host_fetch_share": U.share(s.host_fetch, ~np.isnan(s.host_to_device) & s.has_activity),
            "gpus": rows.unit_gpus.sizes,
            "gpu_activity_min": rows.unit_gpus.min(gpu_activity),
            "gpu_activity_max": rows.unit_gpus.max(gpu_activity),
        }
    )


def _spread(U: _Segments, group: np.ndarray) -> np.ndarray:
    """How many of a topology group (socket, root complex, NVLink island) a unit's GPUs are in: 0 when the
    trace does not say, 1, or 2 for two or more."""
    high, low = U.max(group), U.min(group)
    return np.where(np.isnan(high), 0, np.where(high > low, 2, 1))


class PodGpu(NamedTuple):
    """One GPU of a multi-GPU unit over the window: where it sits, how its NVLinks fared and how it worked,
    for evidence that names GPUs. Shares are of its samples; NaN where the trace does not say."""

    gpu: str
    socket: float
    root: float
    nvlink_group: float
    links_down: float  # the most at once
    crc_per_second: float
    replay_per_second: float
    recovery_per_second: float
    #: Mean activity (SM activity, else utilization).
    activity: float
    #: Share of samples without a kernel (utilization under starvation_low).
    no_kernel: float
    #: Share of samples busy at low power or with idle SMs: waiting, not working.
    waiting: float
    #: Mean power while a kernel ran, of the board's limit.
    busy_power: float
    #: Mean SM clock, of its maximum.
    clock: float


def _add_gpus(rows: _Rows, s: _Signals, t: Thresholds, features: pd.DataFrame) -> None:
    """Each GPU of a multi-GPU unit (PodGpu): where it sits, how its NVLinks fared and how it worked."""
    G = rows.gpus
    per_gpu = (
        G.max(s.numa),
        G.max(s.pcie_root),
        G.max(s.nvlink_group),
        G.max(s.links_down),
        G.mean(s.crc),
        G.mean(s.replay),
        G.mean(s.recovery),
        G.mean(s.act),
        G.share(s.no_kernel, s.has_activity),
        G.share(s.waiting, s.waiting_known),
        G.mean(s.busy_power),
        G.mean(s.clock),
    )
    features["stalled_share"] = rows.unit_gpus.max(G.share(s.stalled, s.has_activity))
    starts, ends = rows.first_gpu_of_unit, np.append(rows.first_gpu_of_unit[1:], len(rows.gpu_starts))
    multi = np.flatnonzero(ends - starts > 1)
    pod_gpus: list[tuple[PodGpu, ...]] = [()] * len(starts)
    if len(multi):  # only multi-GPU units pay for the Python records
        picked = np.concatenate([np.arange(starts[u], ends[u]) for u in multi])
        names = rows.rows_of("gpu", rows.gpu_starts[picked])
        gpus = iter(
            PodGpu(*fields) for fields in zip(names.tolist(), *(v[picked].tolist() for v in per_gpu), strict=True)
        )
        for u in multi:
            pod_gpus[u] = tuple(sorted(next(gpus) for _ in range(ends[u] - starts[u])))
    features["pod_gpus"] = pd.Series(pod_gpus, index=features.index, dtype=object)
    _add_stages(rows, s, t, features, starts, ends)


def _add_stages(
    rows: _Rows, s: _Signals, t: Thresholds, features: pd.DataFrame, starts: np.ndarray, ends: np.ndarray
) -> None:
    """What the GPUs of each multi-GPU unit do at the same moments: whether they move together (ranks of one
    job) or take turns (pipeline stages), and how much of their time is a stage's bubble. Only units whose
    GPUs were sampled at the same times (one scrape reads a node's GPUs together) are paired sample by
    sample; others, and one-GPU units, are NaN. Units of one shape (GPUs x samples) are read as one array."""
    names = ("gpu_correlation", "stagger_share", "gapped_gpus", "bubble_share")
    out = {name: np.full(len(starts), np.nan) for name in names}
    sizes = rows.gpus.sizes
    gpus, samples = ends - starts, sizes[starts]
    even = rows.unit_gpus.min(sizes.astype(float)) == rows.unit_gpus.max(sizes.astype(float))
    paired = np.flatnonzero((gpus > 1) & (samples >= 3) & even)
    load = np.where(np.isnan(s.power), s.act, s.power)
    for g, n in {(int(gpus[u]), int(samples[u])) for u in paired}:
        units = paired[(gpus[paired] == g) & (samples[paired] == n)]
        at = rows.gpu_starts[starts[units]][:, None] + np.arange(g * n)  # the units' rows, GPU after GPU
        times = rows.ts[at].reshape(-1, g, n)
        aligned = np.ptp(times, axis=1).max(axis=1) <= 0.5 * np.median(np.diff(times[:, 0], axis=1), axis=1)
        units, at = units[aligned], at[aligned]
        signals = _stage_signals(load[at].reshape(-1, g, n), s.act[at].reshape(-1, g, n), t)
        for name, values in zip(names, signals, strict=True):
            out[name][units] = values
    for name in names:
        features[name] = out[name]


def _stage_signals(
    load: np.ndarray, act: np.ndarray, t: Thresholds
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For units x GPUs x samples taken together: the mean Pearson correlation over each pair of GPUs of their
    load (power share, else activity); of the moments with a GPU in a gap (activity under starvation_low),
    the share with another working (above BUSY_LEVEL: a sample is the last second's average, and a stage's
    turn may fill part of it); how many GPUs are in a gap on pipeline_gap_share of their samples or more; and
    the bubble share, 1 - mean activity / mean activity of samples above starvation_high, else above BUSY_LEVEL
    (a stage computes at its working level and waits the rest; NaN where no sample is above BUSY_LEVEL)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        # A missing sample counts as its GPU's mean: it moves the correlation neither way.
        centred = np.nan_to_num(load - np.nanmean(load, axis=2, keepdims=True))
        unit = centred / np.sqrt((centred**2).sum(axis=2, keepdims=True))
        g = load.shape[1]
        pairs = np.einsum("kgn,khn->kgh", unit, unit)[:, *np.triu_indices(g, 1)]
        finite = np.isfinite(pairs)  # a GPU whose samples never vary correlates with nothing
        correlation = np.where(finite, pairs, 0.0).sum(axis=1) / finite.sum(axis=1)
        correlation[np.isnan(load).all(axis=2).any(axis=1)] = np.nan
        known = ~np.isnan(act)
        gap = known & (act < t.starvation_low)
        any_gap = gap.any(axis=1)
        stagger = (any_gap & (known & (act > BUSY_LEVEL)).any(axis=1)).sum(axis=1) / any_gap.sum(axis=1)
        gapped = (gap.sum(axis=2) / known.sum(axis=2) >= t.pipeline_gap_share).sum(axis=1).astype(float)
        # Stages at work above starvation_high, else above BUSY_LEVEL: stages whose kernels keep their SMs
        # 50-70% busy take turns too (stagger_share's "working" is BUSY_LEVEL), and their bubble is no less.
        high = known & (act > t.starvation_high)
        busy = known & (act > BUSY_LEVEL)
        working = np.where(high.any(axis=(1, 2))[:, None, None], high, busy)
        level = np.where(working, act, 0.0).sum(axis=(1, 2)) / working.sum(axis=(1, 2))
        bubble = np.clip(1.0 - np.nanmean(act, axis=(1, 2)) / level, 0.0, 1.0)
    return correlation, stagger, gapped, bubble


class PodFeatures(NamedTuple):
    """One unit's features over its window (a row of pod_features()), as the signatures read them. Shares
    are of the unit's samples, 0-1 (of its driver samples where the trace carries the exporter's activity
    shape); activity is SM activity, else graphics-engine activity, else utilization (frame.activity); NaN
    where the trace does not have the signal."""

    namespace: str
    pod: str
    node: str
    gpu_model: str
    #: The unit's GPUs (UUIDs, or MIG instance keys), sorted.
    gpu_list: list[str]
    gpus: int
    samples: int
    #: Unix seconds of the first sample; seconds from it to the end of the last sample.
    start: float
    window_seconds: float
    #: Seconds between one GPU's samples (median); what the shape features resolve (the driver's samples
    #: where the trace carries the exporter's shape); GPU-seconds the samples cover; their share of the window.
    sample_seconds: float
    resolution_seconds: float
    gpu_seconds: float
    coverage: float
    has_activity: bool
    #: SM or DRAM activity (profiling fields that say how much of the GPU worked).
    has_profiling: bool
    #: Graphics-engine activity: a profiling field that says a kernel ran, as utilization does.
    engine_active: float
    has_shape: bool
    activity: float
    sm_active: float
    #: Below idle_activity; above starvation_high; below starvation_low; quiet (idle, from every driver sample
    #: where the trace has the exporter's shape).
    idle_share: float
    high_share: float
    low_share: float
    quiet_share: float
    #: A model load seen in the window (memory rose to the level it held; _Signals._start_up), and when it
    #: ended (unix seconds; the window's start without one; NaN where work has not paused since).
    load_seen: bool
    load_end: float
    #: From load_end to the end of the last sample, seconds: the steady state.
    steady_seconds: float
    #: Seconds of a start-up left out before `start` (a process starting with the data: its load and warm-up,
    #: _Signals._start_up): the features read the rest, its steady state. 0 where none was.
    start_up_seconds: float
    #: Rises through BUSY_LEVEL in the steady state: served work, notebook cells, steps.
    bursts_after_load: float
    #: Share of the steady state's GPU time that did work (0-1; frame.work): seconds of work, not samples
    #: that caught a blip.
    work_share: float
    #: Standard deviation of the used memory fraction once the load reached its level: a pre-allocator's
    #: is flat.
    memory_spread_after_load: float
    #: The last busy sample (unix seconds; NaN: none), and seconds from it to the end of the window.
    last_busy: float
    trailing_idle_seconds: float
    #: Busy share of the recent_samples samples up to the last busy one.
    busy_before_share: float
    longest_pause_seconds: float
    #: Busy/idle switches (at BUSY_LEVEL) and bursts (rises through it).
    switches: float
    bursts: float
    burst_period_seconds: float
    #: (p75 - p25) / median of the time between burst starts.
    burst_spread: float
    #: Bursts that started within 1.5x of the previous period (the exporter's counters; NaN from rows).
    steady_burst_share: float
    shape_samples: float
    #: Memory used over capacity: highest, lowest, standard deviation; highest in bytes.
    memory_peak: float
    memory_low: float
    #: The memory fractions rest on the catalogue's capacity for the model on some rows: the input had no total.
    capacity_from_catalogue: bool
    memory_spread: float
    memory_peak_bytes: float
    #: Samples holding serving_memory_bytes or more (a model kept resident); above memory_full.
    model_held_share: float
    memory_full_share: float
    #: Falls of more than memory_drop between samples (a process that died and gave its memory back).
    memory_drops: float
    restarts_max: float
    restarts_min: float
    dram_active: float
    #: DRAM >= dram_active with every pipe < pipes_idle.
    dram_bound_share: float
    #: The busier of PCIe and NVLink, of capacity; samples with a link >= link_busy and SMs < interconnect_sm.
    link_use: float
    link_bound_share: float
    nvlink_use: float
    #: The smaller of PCIe send and receive, of capacity: peer exchange (collectives send as they receive).
    pcie_peer_use: float
    #: PCIe bytes per second into the GPU (mean), and the share of samples fetching offload_pcie_bytes_per_second
    #: or more of them while activity is under interconnect_sm (CPU offload).
    host_to_device_bytes_per_second: float
    #: Mean bytes per second into and out of the GPU over PCIe over the samples where it sits idle between its
    #: bursts (activity under starvation_low, no kernel spinning): what it waits on. NaN without such samples or
    #: PCIe counters.
    host_to_device_in_gaps_bytes_per_second: float
    device_to_host_in_gaps_bytes_per_second: float
    host_fetch_share: float
    #: Of busy samples with throttle_reasons_mask bits; of all samples.
    throttled_share: float
    throttled_time_share: float
    #: SM clock over its maximum.
    clock_share: float
    #: Samples where a kernel ran most of the time; power while one did, of the board's limit; samples
    #: waiting (busy at low power or idle SMs).
    kernel_busy_share: float
    busy_power_share: float
    waiting_share: float
    #: Samples where a kernel ran with the SMs idle (SM activity under starvation_low): a spin-wait.
    spinning_share: float
    #: The most stalled GPU's share of samples waiting or without a kernel.
    stalled_share: float
    #: Stalls (runs of waiting or kernel-less samples on one GPU): how many, their median length in samples,
    #: the median seconds from one to the next and its spread.
    stalls: float
    #: Stalled samples holding serving_memory_bytes or more.
    stall_held_share: float
    stall_samples: float
    stall_period_seconds: float
    stall_spread: float
    #: Samples with the pod's CPU at cpu_saturated of its limit; activity meanwhile; the share after the
    #: GPU's last work.
    cpu_at_limit_share: float
    activity_at_cpu_limit: float
    #: Samples with the pod's CPU use within host_thread_cores of one core, under a limit of more or none.
    one_core_share: float
    cpu_at_limit_after_work: float
    #: How many CPU sockets, PCIe roots, NVLink islands the GPUs span: 0 unknown, 1, 2 for two or more.
    numa_nodes: float
    pcie_roots: float
    nvlink_groups: float
    #: The highest hardware XID (core/metrics.py) its GPUs reported: 0 or NaN for none (NaN where the input
    #: has no XIDs, and from a store, which answers only the steps with one); the unix time of the last
    #: sample with one.
    hardware_xid: float
    hardware_xid_last: float
    gpu_activity_min: float
    gpu_activity_max: float
    #: Each GPU of a multi-GPU unit; () for one GPU.
    pod_gpus: tuple[PodGpu, ...]
    #: The mean correlation between the samples of a multi-GPU unit's GPUs (power, else activity): ranks of one
    #: job move together, independent processes do not. NaN for one GPU, or GPUs not sampled at the same times.
    gpu_correlation: float
    #: Of the moments a multi-GPU unit's GPU sat in a gap (activity under starvation_low), the share with another
    #: working (above BUSY_LEVEL): stages taking turns. How many GPUs sit in a gap on pipeline_gap_share of their
    #: samples or more. The bubble share: 1 - mean activity / mean activity of working samples. NaN as
    #: gpu_correlation (and stagger_share without gaps).
    stagger_share: float
    gapped_gpus: float
    bubble_share: float

    @classmethod
    def rows(cls, features: pd.DataFrame) -> Iterator[PodFeatures]:
        """Each row of pod_features() as a record. Column by column (a list each), not itertuples: a day of a
        fleet's windows is a hundred thousand rows of a hundred columns, three times faster so."""
        columns = [features[name].tolist() for name in cls._fields]
        for values in zip(*columns, strict=True):
            yield cls(*values)

    @classmethod
    def columns(cls, features: pd.DataFrame) -> list[np.ndarray]:
        """The columns of pod_features() a record is made of, as arrays (not copied): at() reads a row of them."""
        return [features[name].to_numpy() for name in cls._fields]

    @classmethod
    def at(cls, columns: list[np.ndarray], position: int) -> PodFeatures:
        """The record of row `position` of columns(), with the Python values rows() gives."""
        return cls(*(v.item() if isinstance(v, np.generic) else v for v in (c[position] for c in columns)))


def _add_identity(rows: _Rows, features: pd.DataFrame) -> None:
    """Who each unit is: node, model, pod, its GPUs, and the index ("namespace/pod" or "gpu:node/gpu")."""
    for name in ("node", "gpu_model", "namespace", "pod"):
        features[name] = rows.rows_of(name, rows.unit_starts)
    gpu_names = rows.rows_of("gpu", rows.gpu_starts)
    unit_gpu_ends = np.append(rows.first_gpu_of_unit[1:], len(rows.gpu_starts))
    features["gpu_list"] = [sorted(gpu_names[a:b]) for a, b in zip(rows.first_gpu_of_unit, unit_gpu_ends, strict=True)]
    features.index = unit_names(trace=rows.trace, rows=rows.order_of(rows.unit_starts))


def unit_names(trace: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The unit of each of the trace's `rows` (positions): "namespace/pod", or "gpu:node/gpu" when no
    pod holds the GPU."""
    pick = trace.iloc[rows][["node", "gpu", "namespace", "pod"]].astype(str)
    return np.where(
        pick["pod"] == "",
        "gpu:" + pick["node"] + "/" + pick["gpu"],
        pick["namespace"] + "/" + pick["pod"],
    )


def _add_timing(features: pd.DataFrame) -> None:
    """Seconds each sample stands for (the unit's sampling interval; 1 s for a single sample), the span
    from the first sample to the end of the last, the GPU-seconds the samples cover (gaps excluded),
    the share of the span they cover, and how long the unit has been idle at the span's end."""
    features["sample_seconds"] = features["interval"].fillna(1.0)
    features["window_seconds"] = features["end"] - features["start"] + features["sample_seconds"]
    features["gpu_seconds"] = features["samples"] * features["sample_seconds"]
    # What the shape features resolve: the driver's samples where the trace carries them, else the rows.
    with np.errstate(invalid="ignore", divide="ignore"):
        features["resolution_seconds"] = np.where(
            features["has_shape"], features["gpu_seconds"] / features["shape_samples"], features["sample_seconds"]
        )
    features["coverage"] = np.minimum(features["gpu_seconds"] / (features["gpus"] * features["window_seconds"]), 1.0)
    #: The steady state's length: from the start-up's end to the end of the last sample (NaN: not yet).
    features["steady_seconds"] = features["end"] + features["sample_seconds"] - features["load_end"]
    features["trailing_idle_seconds"] = np.where(
        features["last_busy"].isna(), features["window_seconds"], features["end"] - features["last_busy"]
    )

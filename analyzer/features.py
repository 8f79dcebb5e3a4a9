"""Per-pod features of a trace window, computed for all pods at once.

Each signature is a per-sample boolean whose mean over a pod's samples is its feature: "p95 > 0.7"
is "more than 5% of samples above 0.7", "DRAM-bound" is "the share of samples with DRAM >= 0.5 and
pipes < 0.3". Rows are put in (pod, GPU, time) order once, by integer keys (and not at all when the
trace already is in that order), and every feature is then a reduction over contiguous segments
(numpy reduceat), so 10,000 GPUs over 10 minutes at 1 s take seconds. Sequences (busy/idle switches,
memory drops) are comparisons of neighbouring rows.

A "unit" is a pod (namespace/pod), or a GPU that no pod holds (gpu:<node>/<gpu>).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpulens.core.catalog import model_info
from gpulens.core.thresholds import Thresholds


def _order(unit: np.ndarray, gpu: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
    """Row order by (unit, GPU, time), or None when the rows already are in it."""
    key = unit * (int(gpu.max()) + 1) + gpu
    same = key[1:] == key[:-1]
    if np.all(key[1:] >= key[:-1]) and np.all(~same | (ts[1:] >= ts[:-1])):
        return None
    by_time = np.argsort(ts, kind="stable")
    return by_time[np.argsort(key[by_time], kind="stable")]


class _Segments:
    """Reductions over contiguous runs of rows (one run per unit, or per GPU)."""

    def __init__(self, starts: np.ndarray, n: int):
        self.starts = starts
        self.sizes = np.diff(np.append(starts, n))

    def sum(self, x):
        return np.add.reduceat(x, self.starts)

    def count(self, valid):
        return np.add.reduceat(valid.view(np.int8), self.starts, dtype=np.int64)

    def share(self, mask, valid):
        """Fraction of the valid rows where `mask` holds (a signature's feature); NaN with none valid."""
        count = self.count(valid)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, self.count(mask & valid) / count, np.nan)

    def mean(self, x):
        """Mean of the non-NaN values; NaN where there are none."""
        valid = ~np.isnan(x)
        count = self.count(valid)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, self.sum(np.where(valid, x, 0.0)) / count, np.nan)

    def max(self, x):
        out = np.maximum.reduceat(np.where(np.isnan(x), -np.inf, x), self.starts)
        return np.where(np.isneginf(out), np.nan, out)

    def min(self, x):
        out = np.minimum.reduceat(np.where(np.isnan(x), np.inf, x), self.starts)
        return np.where(np.isposinf(out), np.nan, out)

    def std(self, x):
        """Sample standard deviation of the non-NaN values."""
        valid = ~np.isnan(x)
        count = self.count(valid)
        x0 = np.where(valid, x, 0.0)
        total, squares = self.sum(x0), self.sum(x0 * x0)
        with np.errstate(invalid="ignore", divide="ignore"):
            variance = (squares - total * total / count) / (count - 1)
        return np.where(count > 1, np.sqrt(np.maximum(variance, 0.0)), np.nan)


def pod_features(trace: pd.DataFrame, t: Thresholds) -> pd.DataFrame:
    """One row per unit with everything the classifier needs. Index: unit."""
    if trace.empty:
        return pd.DataFrame()
    # Integer keys: a GPU is (node, gpu); a unit is (namespace, pod), or its GPU when no pod holds it.
    node_code, _ = pd.factorize(trace["node"])
    gpu_code, _ = pd.factorize(trace["gpu"])
    gpu_key, _ = pd.factorize(node_code.astype(np.int64) * (int(gpu_code.max()) + 1) + gpu_code)
    ns_code, _ = pd.factorize(trace["namespace"])
    pod_code, pods = pd.factorize(trace["pod"])
    no_pod = (trace["pod"] == "").to_numpy()
    pod_key = ns_code.astype(np.int64) * (len(pods) + 1) + pod_code
    unit_key, _ = pd.factorize(np.where(no_pod, -1 - gpu_key.astype(np.int64), pod_key))
    ts = trace["timestamp"].to_numpy()
    order = _order(unit_key.astype(np.int64), gpu_key.astype(np.int64), ts)

    def column(name: str) -> np.ndarray:
        values = trace[name].to_numpy()
        return values if order is None else values[order]

    def rows_of(name: str, positions: np.ndarray) -> np.ndarray:
        """A string column at a few sorted positions, without converting the whole column."""
        return trace[name].iloc[positions if order is None else order[positions]].to_numpy()

    unit, gpu, ts = (a if order is None else a[order] for a in (unit_key, gpu_key, ts))
    n = len(ts)
    unit_starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]])
    gpu_changes = np.r_[True, (gpu[1:] != gpu[:-1]) | (unit[1:] != unit[:-1])]
    gpu_starts = np.flatnonzero(gpu_changes)
    U, G = _Segments(unit_starts, n), _Segments(gpu_starts, n)

    sm = column("sm_active")
    act = np.where(np.isnan(sm), column("gr_engine_active"), sm)
    act = np.where(np.isnan(act), column("gpu_util"), act)
    has_activity = ~np.isnan(act)
    act0 = np.nan_to_num(act)
    busy = act0 >= t.idle_activity
    mem_used, mem_total = column("memory_used_bytes"), column("memory_total_bytes")
    mem_frac = mem_used / mem_total
    pipes = np.fmax(
        np.fmax(column("tensor_active"), column("fp16_active")), np.fmax(column("fp32_active"), column("fp64_active"))
    )
    dram = column("dram_active")
    # A pod runs on one GPU model: link capacities by unit, spread over its rows.
    unit_models = rows_of("gpu_model", unit_starts)
    row_unit = np.repeat(np.arange(len(unit_starts)), np.diff(np.append(unit_starts, n)))
    pcie_cap = np.array([model_info(x).pcie_bytes_per_second for x in unit_models])[row_unit]
    nvlink_cap = np.array([model_info(x).nvlink_bytes_per_second for x in unit_models])[row_unit]
    with np.errstate(invalid="ignore", divide="ignore"):
        pcie_use = np.fmax(column("pcie_tx_bytes_per_second"), column("pcie_rx_bytes_per_second")) / pcie_cap
        nvlink_use = np.where(
            nvlink_cap > 0,
            np.fmax(column("nvlink_tx_bytes_per_second"), column("nvlink_rx_bytes_per_second")) / nvlink_cap,
            np.nan,
        )
        cpu = column("cpu_usage_cores") / column("cpu_limit_cores")
        clock = column("sm_clock_hertz") / column("sm_clock_max_hertz")
    link = np.fmax(pcie_use, nvlink_use)
    reasons_raw = column("clock_event_reasons")
    reasons = np.nan_to_num(reasons_raw).astype(np.int64)
    # Busy/idle switches and memory drops between neighbouring samples of the same GPU.
    state = act0 >= 0.5
    switch = np.r_[False, state[1:] != state[:-1]] & ~gpu_changes
    with np.errstate(invalid="ignore"):
        drop = np.r_[False, (mem_frac[1:] - mem_frac[:-1]) < -0.2] & ~gpu_changes
    restarts, numa = column("restarts_total"), column("numa_node")

    gpu_activity = G.mean(np.where(has_activity, act, np.nan))
    gpu_unit = np.searchsorted(unit_starts, gpu_starts, side="right") - 1
    first_gpu_of_unit = np.searchsorted(gpu_unit, np.arange(len(unit_starts)))
    GU = _Segments(first_gpu_of_unit, len(gpu_starts))
    numa_max, numa_min = U.max(numa), U.min(numa)
    first = unit_starts
    features = pd.DataFrame(
        {
            "samples": U.sizes,
            "ts_min": U.min(ts),
            "ts_max": U.max(ts),
            "activity": U.mean(np.where(has_activity, act, np.nan)),
            "sm_active": U.mean(sm),
            "has_activity": U.count(has_activity) > 0,
            "has_prof": U.count(~np.isnan(sm) | ~np.isnan(dram)) > 0,
            "idle": U.share(~busy, has_activity),
            "high": U.share(act0 > t.starvation_high, has_activity),
            "low": U.share(act0 < t.starvation_low, has_activity),
            "switches": U.count(switch).astype(float),
            "last_busy": U.max(np.where(busy & has_activity, ts, np.nan)),
            "mem_max": U.max(mem_frac),
            "mem_min": U.min(mem_frac),
            "mem_std": U.std(mem_frac),
            "mem_used_max": U.max(mem_used),
            "full": U.share(mem_frac > t.memory_full, ~np.isnan(mem_frac)),
            "drops": U.count(drop).astype(float),
            "restarts_max": U.max(restarts),
            "restarts_min": U.min(restarts),
            "dram": U.mean(dram),
            "pipes": U.mean(pipes),
            "mb": U.share((dram >= t.dram_active) & (pipes < t.pipes_idle), ~np.isnan(dram) & ~np.isnan(pipes)),
            "link": U.mean(link),
            # Without SM activity a saturated link is the evidence: utilization shows only that kernels ran.
            "ic": U.share(
                (link >= t.link_busy) & (np.isnan(sm) | (sm < t.interconnect_sm)), ~np.isnan(link) & has_activity
            ),
            # Of busy time: a clock held down while nothing runs costs nothing, and a starved GPU that
            # is throttled during each of its bursts is throttled.
            "throttle": U.share((reasons & t.throttle_reasons_mask) != 0, busy & ~np.isnan(reasons_raw)),
            # Of all time: how long the bits held, for the duration threshold.
            "throttle_time": U.share((reasons & t.throttle_reasons_mask) != 0, ~np.isnan(reasons_raw)),
            "clock": U.mean(clock),
            "cpu_sat": U.share(cpu >= t.cpu_saturated, ~np.isnan(cpu)),
            "numa_nodes": np.where(np.isnan(numa_max), 0, np.where(numa_max > numa_min, 2, 1)),
            "gpus": GU.sizes,
            "gpu_activity_min": GU.min(gpu_activity),
            "gpu_activity_max": GU.max(gpu_activity),
            "node": rows_of("node", first),
            "gpu_model": rows_of("gpu_model", first),
            "namespace": rows_of("namespace", first),
            "pod": rows_of("pod", first),
        }
    )
    gpu_names = rows_of("gpu", gpu_starts)
    unit_gpu_ends = np.append(first_gpu_of_unit[1:], len(gpu_starts))
    features["gpu_list"] = [sorted(gpu_names[a:b]) for a, b in zip(first_gpu_of_unit, unit_gpu_ends, strict=True)]
    features.index = np.where(
        features["pod"] == "",
        "gpu:" + features["node"] + "/" + gpu_names[first_gpu_of_unit],
        features["namespace"] + "/" + features["pod"],
    )
    # Seconds each sample stands for: the window divided by the samples of one GPU.
    per_gpu = features["samples"] / features["gpus"]
    spacing: pd.Series = (features["ts_max"] - features["ts_min"]) / np.maximum(per_gpu - 1, 1)
    features["sample_seconds"] = spacing.where(per_gpu > 1, 1.0)
    features["window_seconds"] = features["ts_max"] - features["ts_min"] + features["sample_seconds"]
    features["gpu_seconds"] = features["samples"] * features["sample_seconds"]
    features["trailing_idle_seconds"] = np.where(
        features["last_busy"].isna(), features["window_seconds"], features["ts_max"] - features["last_busy"]
    )
    return features

"""What a live analyzer keeps across restarts: the window it has read from the store (--analysis.state-file).

A replica that restarts (a crash, an OOM kill, a node drained, a rollout onto a kept volume) loads the
window it held and reads only the steps it missed, instead of the whole window: at 10,000 GPUs the whole
window is the costliest read a replica makes of its Prometheus (docs/sizing.md).

The file is one NumPy .npz (no pickled objects: it is loaded with allow_pickle=False), written beside its
final name and renamed, so that a replica killed while writing keeps the last whole file. It holds what
it was read with (store, selectors, step, window, shard): a file written by another configuration is not
used. A file that cannot be read is said once and ignored: the window is read from the store, as on a
first start.
"""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

import numpy as np

from gpulens.analyzer.series import SeriesReader, Window
from gpulens.core.config import atomic_output

log = logging.getLogger(__name__)

#: The file's layout; a file of another version is not used.
VERSION = 3


def save(path: str, window: Window, reader: SeriesReader, identity: dict) -> None:
    """Write the window, the reader's pod table and dcgm-exporter hardware, and `identity` (what must
    match for the file to be used) to `path`, atomically."""
    arrays: dict[str, np.ndarray] = {}
    grids = {}
    for name, grid in window.grids.items():
        rows = len(grid.gpus)
        grids[name] = {"end": grid.end, "keys": list(grid.gpus), "part_of": grid.part_of}
        for column, matrix in grid.values.items():
            arrays[f"{name}.{column}"] = matrix[:rows]
    meta = {
        "version": VERSION,
        "identity": identity,
        "step": window.gpus.step,
        "points": window.gpus.points,
        "parts": window.parts,
        "read_until": window.read_until,
        "read_from": window.read_from,
        "grids": grids,
        "pods": reader.pods,
        "dcgm": [[*key, reader.dcgm.models.get(key, ""), reader.dcgm.nodes.get(key, "")] for key in reader.dcgm.models],
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with atomic_output(path, "--analysis.state-file") as tmp, tmp.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stubs take a key for allow_pickle


def load(path: str, reader: SeriesReader, identity: dict) -> Window | None:
    """The window saved at `path` if it was written with `identity`, with `reader`'s pod table and
    dcgm-exporter hardware set from it; None (and a log line saying why) otherwise."""
    file = Path(path)
    if not file.exists():
        return None
    try:
        with np.load(file, allow_pickle=False) as saved:
            meta = json.loads(saved["meta"].tobytes())
            if meta.get("version") != VERSION or meta.get("identity") != identity:
                log.info(
                    "%s was written by another configuration (%s): reading the window from the store",
                    path,
                    meta.get("identity"),
                )
                return None
            window = Window.of(float(meta["step"]), int(meta["points"]), int(meta["parts"]))
            read_until = [None if until is None else float(until) for until in meta["read_until"]]
            if len(read_until) != window.parts:
                raise ValueError(f"{len(read_until)} parts read, not {window.parts}")
            window.read_until, window.read_from = read_until, meta["read_from"]
            for name, grid in window.grids.items():
                held = meta["grids"][name]
                grid.restore(
                    held["end"],
                    [(str(instance), str(uuid)) for instance, uuid in held["keys"]],
                    {column: saved[f"{name}.{column}"] for column in held["part_of"]},
                    held["part_of"],
                )
            pods = [(str(namespace), str(pod), str(container)) for namespace, pod, container in meta["pods"]]
            dcgm = [((str(instance), str(uuid)), str(model), str(node)) for instance, uuid, model, node in meta["dcgm"]]
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
        log.warning("cannot read the analyzer's state file %s (%s): reading the window from the store", path, e)
        return None
    reader.restore_pods(pods)
    for key, model, node in dcgm:
        reader.dcgm.models[key], reader.dcgm.nodes[key] = model, node
    return window

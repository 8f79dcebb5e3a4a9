"""What a live analyzer keeps across restarts: the window it has read from the store (--analysis.state-file).

A replica that restarts (a crash, an OOM kill, a node drained, a rollout onto a kept volume) loads the
window it held and reads only the steps it missed, instead of the whole window: at 10,000 GPUs the whole
window is the costliest read a replica makes of its Prometheus (docs/sizing.md).

The file is one NumPy .npz (no pickled objects: it is loaded with allow_pickle=False), written beside its
final name and renamed, so that a replica killed while writing keeps the last whole file. It holds what
it was read with (store, selectors, step, window, shard): a file written by another configuration is not
used. A file that cannot be read is said once and ignored: the window is read from the store, as on a
first start. Every field is checked before it is used and every matrix's size before it is read, so a
damaged or hostile file costs no more than a good one. One process writes a file: it holds a lock beside
it (.NAME.lock), and a second replica given the same path keeps no state rather than tear the first's.
"""

from __future__ import annotations

import json
import logging
import math
import zipfile
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gpulens.analyzer.inputs.window import Key, Window
from gpulens.core.config import atomic_output

log = logging.getLogger(__name__)

#: The file's layout; a file of another version is not used.
VERSION = 3


def save(path: str, window: Window, identity: dict) -> None:
    """Write the window (its matrices, its pod table and dcgm-exporter hardware) and `identity` (what must
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
        "pods": window.names.pods,
        "dcgm": [[*key, window.dcgm.models.get(key, ""), window.dcgm.nodes.get(key, "")] for key in window.dcgm.models],
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with atomic_output(path, "--analysis.state-file") as tmp, tmp.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stubs take a key for allow_pickle


#: Bytes of the file's description (JSON: pods, GPUs, the read state): about 100 bytes a GPU, so 64 MiB holds
#: far more GPUs than a replica judges (docs/sizing.md). Each matrix may hold no more than its rows and
#: steps say; a file past either is not read, so a file inflating to gigabytes costs nothing.
MAX_META_BYTES = 64 * 1024 * 1024
#: Bytes of a .npy member's header beyond its values (numpy pads it to 64 or 128; 4 KiB is plenty).
_NPY_HEADER_BYTES = 4096


class StateFileError(ValueError):
    """The state file cannot be used as it is: the message says why."""


def lock(path: str) -> TextIO | None:
    """Hold `path`'s lock (.NAME.lock beside it) until the handle returned is closed, or None when another
    process holds it: two replicas writing one state file would each read the other's window."""
    import fcntl

    file = Path(path)
    handle = open(file.with_name(f".{file.name}.lock"), "a")  # noqa: SIM115  (held until close())
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def load(path: str, identity: dict, window: Window) -> Window | None:
    """`window` (empty, of the step, points and parts this replica reads) holding what was saved at `path`
    if it was written with `identity`, its pod table and dcgm-exporter hardware with it;
    None (and a log line saying why) otherwise. Every field is checked before it is used: a file that
    is not one gpulens wrote, whole, is said once and left for the next write to replace."""
    file = Path(path)
    if not file.exists():
        return None
    try:
        if not file.is_file():
            raise StateFileError("it is not a regular file")
        with zipfile.ZipFile(file) as archive:
            meta = _meta(archive)
            if meta.get("version") != VERSION or meta.get("identity") != identity:
                log.info(
                    "%s was written by another configuration (%s): reading the window from the store",
                    path,
                    _differences(meta.get("identity"), identity) if meta.get("version") == VERSION else "version",
                )
                return None
            pods, dcgm = _restore(archive, meta, window)
    except (OSError, StateFileError, zipfile.BadZipFile, EOFError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        log.warning("cannot read the analyzer's state file %s (%s): reading the window from the store", path, reason)
        return None
    window.names.restore(pods)
    for key, model, node in dcgm:
        window.dcgm.models[key], window.dcgm.nodes[key] = model, node
    return window


def _meta(archive: zipfile.ZipFile) -> dict:
    """The file's description, read only if it is within MAX_META_BYTES."""
    try:
        info = archive.getinfo("meta.npy")
    except KeyError:
        raise StateFileError("it has no description (meta.npy): it is not a state file gpulens wrote") from None
    if info.file_size > MAX_META_BYTES + _NPY_HEADER_BYTES:
        raise StateFileError(f"its description holds {info.file_size:,} bytes, more than {MAX_META_BYTES:,}")
    try:
        meta = json.loads(_array(archive, "meta.npy").tobytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise StateFileError(f"its description is not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise StateFileError("its description is not a JSON object")
    return meta


def _array(archive: zipfile.ZipFile, member: str) -> np.ndarray:
    with archive.open(member) as f:
        try:
            return np.lib.format.read_array(f, allow_pickle=False)
        except ValueError as e:
            raise StateFileError(f"{member}: {e}") from None


def _restore(
    archive: zipfile.ZipFile, meta: dict, window: Window
) -> tuple[list[tuple[str, str, str]], list[tuple[Key, str, str]]]:
    """Fill `window` from the file's matrices; its pods and dcgm-exporter hardware. StateFileError naming
    the first field that is not what save() writes."""
    for name, wanted in (("step", window.gpus.step), ("points", window.gpus.points), ("parts", window.parts)):
        if meta.get(name) != wanted:
            raise StateFileError(f"{name} is {_shown(meta.get(name))}, not this analyzer's {wanted}")
    read_until = _field(meta, "read_until", list)
    if len(read_until) != window.parts or not all(until is None or _finite(until) for until in read_until):
        raise StateFileError(f"read_until is {_shown(read_until)}, not {window.parts} times or nulls")
    read_from = meta.get("read_from")
    if not (read_from is None or _finite(read_from)):
        raise StateFileError(f"read_from is {_shown(read_from)}, not a time or null")
    grids = _field(meta, "grids", dict)
    for name, grid in window.grids.items():
        held = grids.get(name)
        if not isinstance(held, dict):
            raise StateFileError(f"grids.{name} is missing")
        end, keys, part_of = held.get("end"), held.get("keys"), held.get("part_of")
        if not (end is None or _finite(end)):
            raise StateFileError(f"grids.{name}.end is {_shown(end)}, not a time or null")
        if not isinstance(keys, list) or not all(_strings(key, 2) for key in keys):
            raise StateFileError(f"grids.{name}.keys is not a list of [instance, uuid]")
        if not isinstance(part_of, dict) or not all(
            type(part) is int and 0 <= part < window.parts for part in part_of.values()
        ):
            raise StateFileError(f"grids.{name}.part_of is not a part from 0 to {window.parts - 1} per column")
        values = {}
        for column in part_of:
            member = f"{name}.{column}.npy"
            try:
                size = archive.getinfo(member).file_size
            except KeyError:
                raise StateFileError(f"it has no {member}") from None
            if size > len(keys) * grid.points * 8 + _NPY_HEADER_BYTES:
                raise StateFileError(f"{member} holds {size:,} bytes, more than {len(keys)} rows of {grid.points}")
            values[column] = _array(archive, member)
        try:
            grid.restore(end, [(instance, uuid) for instance, uuid in keys], values, part_of)
        except ValueError as e:
            raise StateFileError(f"grids.{name}: {e}") from None
    window.read_until, window.read_from = [None if u is None else float(u) for u in read_until], read_from
    pods, dcgm = _field(meta, "pods", list), _field(meta, "dcgm", list)
    if not all(_strings(pod, 3) for pod in pods):
        raise StateFileError("pods is not a list of [namespace, pod, container]")
    if not all(_strings(gpu, 4) for gpu in dcgm):
        raise StateFileError("dcgm is not a list of [instance, uuid, model, node]")
    return [(ns, pod, container) for ns, pod, container in pods], [((i, u), model, node) for i, u, model, node in dcgm]


def _field(meta: dict, name: str, kind: type) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind):
        raise StateFileError(f"{name} is {_shown(value)}, not a {kind.__name__}")
    return value


def _finite(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _strings(value: object, count: int) -> bool:
    return isinstance(value, list) and len(value) == count and all(type(v) is str for v in value)


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _differences(saved: object, identity: dict) -> str:
    """The settings that differ between a file's identity and this analyzer's, by name: what to look at."""
    if not isinstance(saved, dict):
        return "no settings"
    names = sorted(name for name in saved.keys() | identity.keys() if saved.get(name) != identity.get(name))
    return "differs in " + ", ".join(names)

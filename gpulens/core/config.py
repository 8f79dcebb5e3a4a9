"""Configuration errors and the checks every gpulens command shares."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A flag or configuration file is wrong. The message names the value and how to fix it."""


#: Nodes a YAML config may hold once its aliases are expanded: a thousand times the largest config gpulens
#: reads. A few hundred bytes of nested aliases (a "billion laughs") expand past any memory.
MAX_YAML_NODES = 100_000
#: Bytes a YAML config may hold, checked before it is parsed: PyYAML reads about 4 s a MiB (100,000 rules of
#: workload_kinds, 4.6 MiB, took 18 s to parse and were then refused), and the largest config gpulens ships is
#: 31 KiB (deploy/compose/gpulens-rules.yaml); 2,000 workload_kinds rules take about 100 KiB.
MAX_YAML_BYTES = 256 * 1024


def read_secret(path: str, where: str) -> str:
    """A credential file's text (a password, a token, a webhook's URL) without its surrounding whitespace;
    ConfigError naming `where` it is set (a flag, a settings key) and the path, never its content."""
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "it is not text"
        raise ConfigError(f"{where} {path}: cannot read it ({reason})") from None


def read_yaml(path: str | Path, flag: str) -> Any:
    """The YAML document in `path`, given with `flag`; ConfigError naming both when it cannot be read or
    parsed, is not UTF-8, nests deeper than Python reads, or expands past MAX_YAML_NODES nodes."""
    import yaml  # here: most runs read no YAML, and a node's exporter should not load it

    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
        if len(raw) > MAX_YAML_BYTES:
            raise ConfigError(
                f"{flag} {path}: larger than {MAX_YAML_BYTES // 1024} KiB, which no gpulens setting needs (2,000 "
                "workload_kinds rules take about 100 KiB): match pods by fewer, broader rules (a label many pods "
                "share, an image pattern)"
            )
        text = raw.decode("utf-8")
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot read it ({e.strerror})") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{flag} {path}: not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    try:
        loader = yaml.SafeLoader(text)  # refuses characters YAML does not allow, here already
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag} {path}: not valid YAML: {e}") from e
    try:
        node = loader.get_single_node()
        if node is not None and (sizes := _sizes(node))[id(node)] > MAX_YAML_NODES:
            if len(sizes) > MAX_YAML_NODES:  # that many written out, aliases or not
                raise ConfigError(
                    f"{flag} {path}: holds more than {MAX_YAML_NODES:,} values, which no gpulens setting needs: "
                    "write it shorter"
                )
            raise ConfigError(
                f"{flag} {path}: its aliases expand to more than {MAX_YAML_NODES:,} values: write it without "
                "nested aliases (*name)"
            )
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag} {path}: not valid YAML: {e}") from e
    except RecursionError:
        raise ConfigError(f"{flag} {path}: nested deeper than gpulens reads: flatten it") from None
    except ConfigError:
        raise
    except ValueError:  # PyYAML's int() of a number of over 4,300 digits, which Python refuses to read
        raise ConfigError(f"{flag} {path}: holds a number of thousands of digits: no setting takes one") from None
    finally:
        loader.dispose()


def _sizes(root: Any) -> dict[int, int]:
    """Each node of a composed YAML document (by id) and the values it holds with every alias expanded, counted
    without expanding them (each node's size once: an alias is the same node object). As many entries as the
    document writes out nodes; the root's size is the document's, expanded."""
    import yaml

    sizes: dict[int, int] = {}
    pending = [(root, False)]
    while pending:  # iterative: a deep document must not exhaust the stack here either
        node, children_done = pending.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
        else:
            pending.append((node, True))
            pending.extend((c, False) for c in children if id(c) not in sizes)
    return sizes


#: A Prometheus duration: one or more number-unit pairs, largest unit first (1h30m).
PROMQL_DURATION = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?(?<=[a-z])")


def parse_duration(text: str, flag: str) -> float:
    """Seconds from a flag's value: a number of seconds ("900") or a Prometheus duration ("15m", "1h").
    Raises ConfigError naming the flag and the accepted forms."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not PROMQL_DURATION.fullmatch(text):
            raise ConfigError(f"{flag} {text!r} is not a duration: give seconds (900) or 30s, 10m, 1h30m, 1d") from None
        seconds = duration_seconds(text)
    if not 0 < seconds < math.inf:
        raise ConfigError(f"{flag} must be a positive, finite duration, got {text!r}")
    return seconds


def duration_seconds(duration: str) -> float:
    """Seconds in a Prometheus duration ("1h30m" -> 5400.0)."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|[smhdwy])", duration))


def prometheus_duration(seconds: float) -> str:
    """A duration written as Prometheus writes one, largest unit first (300 -> "5m", 5400 -> "1h30m"),
    so every generated `for:` and window reads the same way whatever form a thresholds file used."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    out = ""
    for unit, size in (
        ("y", 31536000000),
        ("w", 604800000),
        ("d", 86400000),
        ("h", 3600000),
        ("m", 60000),
        ("s", 1000),
        ("ms", 1),
    ):
        count, millis = divmod(millis, size)
        if count:
            out += f"{count}{unit}"
    return out


def require_positive(*flags: tuple[str, float], unit: str = "number of seconds") -> None:
    """ConfigError for the first (flag, value) that is not a positive number."""
    for flag, value in flags:
        if not value > 0:
            raise ConfigError(f"{flag} must be a positive {unit}, got {value}")


#: Tries at a fresh temporary name before giving up (each is random: a clash means something plants them).
_TEMPORARY_TRIES = 8


@contextlib.contextmanager
def atomic_output(path: str | Path, flag: str = "--out") -> Iterator[Path]:
    """A path to write `path`'s new content to. For a regular file (or a new one), a temporary file beside
    it, created afresh (never one planted there, nor a link followed) and renamed over it when the block
    succeeds, removed when it fails: a reader (Prometheus reloading its rules, Grafana its dashboards,
    `gpulens report` a trace) never sees half a file and a failure leaves the old one whole; a link is
    kept, and the file it points to replaced, with its permissions. For a device or a FIFO (/dev/null,
    /dev/stdout, a pipe), the path itself, written in place: renaming over it would replace the system's
    device with a file. The one way gpulens writes a file. ConfigError naming `flag` when it cannot be
    written (a directory, a parent that is a file, no permission)."""
    path = Path(path)
    tmp: Path | None = None
    try:
        try:
            mode: int | None = path.stat().st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            raise ConfigError(f"{flag} {path}: it is a directory; name a file")
        if mode is not None and not stat.S_ISREG(mode):
            yield path
            return
        target = path.resolve() if path.is_symlink() else path
        target.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(_TEMPORARY_TRIES):
            candidate = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
            try:  # O_EXCL: a name that exists, a planted link included, is never opened
                os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
            except FileExistsError:
                continue
            tmp = candidate
            break
        else:
            raise ConfigError(f"{flag} {path}: {_TEMPORARY_TRIES} temporary names beside it were taken; remove them")
        yield tmp
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))  # the file replaced keeps its permissions
        tmp.replace(target)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"{flag} {path}: cannot write it ({reason}); choose a writable directory") from e
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_atomically(path: str | Path, text: str, flag: str = "--out") -> None:
    """Write `text` to `path` through atomic_output."""
    with atomic_output(path, flag) as tmp:
        tmp.write_text(text)


def write_generated(command: str, out: str | Path, generate: Callable[[], dict[str, str]]) -> int:
    """Run `generate()` ({file name: text}) and write each file into `out`: the body of every
    `gpulens COMMAND --out DIR` command. Returns the exit status; errors name the fix."""
    import sys

    try:
        files = generate()
        for name, text in files.items():
            write_atomically(Path(out) / name, text)
    except ConfigError as e:
        print(f"gpulens {command}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(files)} to {out}", file=sys.stderr)
    return 0


#: The user:password@ of a URL (http://user:pass@prometheus:9090).
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced, for logs, errors and API answers."""
    return _URL_CREDENTIALS.sub(r"\1<redacted>@", text)


def finite_json(document: Any, indent: int | None = None) -> str:
    """JSON as every gpulens answer and report writes it: NaN and infinities (a value not known, or a bug)
    as null. JSON has neither, and Python's json would write NaN and Infinity, which parsers refuse."""

    def finite(value: Any) -> Any:
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(document), indent=indent, allow_nan=False)

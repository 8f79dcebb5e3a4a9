"""The benchmarks' results files: what each printed, the machine it ran on, and the code it measured.

Every benchmark ends with save(): benchmarks/results/<name>.json holds its figures, the machine (CPU
model, cores, memory, Python, the time of the run), the commit it ran on and a digest of the source files on
the path it measured. docs/benchmarks.md's figures are rendered from these files (benchmarks/readme.py), each
with the commit it measured; a test holds the page to them, and each file's digest to its commit's code (the
figures are that commit's, not a later edit's).

A change to measured code does not wait on the benchmarks (a full run takes hours here): their figures stand
for the commit they name until they run again, once per issue that changes measured code, as the developers'
guide asks. What has changed since is listed by

    .venv/bin/python benchmarks/results.py      (each benchmark, the commit it measured, and whether the
                                                 code it measures has changed since: the closing note's list)
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

#: The core modules an NVML exporter never loads (tests/test_nvml_source.py holds it to that): the
#: analyzer's classes and thresholds, the dashboards', alerts' and analyzer's PromQL, the trace schema and
#: dcgm-exporter's format. A change to them does not ask for the exporter's benchmarks (the soak: two hours).
_NOT_IN_EXPORTER = tuple(f"!gpulens/core/{name}.py" for name in ("mixin", "trace", "dcgm", "bottlenecks", "thresholds"))
#: The exporter's code and what it runs against (the fake driver library).
_EXPORTER = (
    "exporter/**/*.py",
    "gpulens/core/**/*.py",
    *_NOT_IN_EXPORTER,
    "gpulens/cli.py",
    "gpulens/__init__.py",
    "tests/fake_nvml/fake_nvml.c",
)
#: The source files each benchmark measures, as globs from the repository root: the benchmark itself, the
#: measured code, and what it runs against; a glob after "!" takes files out.
SOURCES: dict[str, tuple[str, ...]] = {
    "exporter": ("benchmarks/exporter.py", *_EXPORTER),
    "scrapers": ("benchmarks/scrapers.py", *_EXPORTER),
    "attacks": ("benchmarks/attacks.py", "benchmarks/scrapers.py", *_EXPORTER),
    "analyzer-cycle": ("benchmarks/analyzer.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    "analyzer-day": ("benchmarks/analyzer.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    "analyzer-input": ("benchmarks/analyzer.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    "report-store": ("benchmarks/store_report.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    "report-store-wide": ("benchmarks/store_report.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    "live-prometheus": ("benchmarks/live_prometheus.py", "analyzer/**/*.py", "gpulens/core/**/*.py"),
    # Prometheus' own costs, on store_report.py's data (and the helpers that start it): no gpulens code.
    "store-reductions": ("benchmarks/store_reductions.py", "benchmarks/store_report.py", "tests/helpers.py"),
    "soak": ("benchmarks/soak.py", *_EXPORTER),
}


def _matcher(patterns: tuple[str, ...]):
    """A test of a repository path (POSIX, from the root) against `patterns`: globs as pathlib's ("**/" any
    folders, "*" within a name), a glob after "!" taking paths out."""

    def regex(glob: str) -> re.Pattern:
        parts = re.split(r"(\*\*/|\*|\?)", glob)
        wild = {"**/": "(?:.*/)?", "*": "[^/]*", "?": "[^/]"}
        return re.compile("".join(wild.get(part, re.escape(part)) for part in parts) + r"\Z")

    taken = [regex(p) for p in patterns if not p.startswith("!")]
    left_out = [regex(p[1:]) for p in patterns if p.startswith("!")]
    return lambda path: any(r.match(path) for r in taken) and not any(r.match(path) for r in left_out)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def measured_paths(name: str, commit: str | None = None) -> list[str]:
    """The paths benchmark `name` measures, sorted: in the working tree (tracked files and new ones git does
    not ignore), or in `commit`'s tree."""
    listed = _git("ls-tree", "-r", "--name-only", commit) if commit else _git("ls-files", "-co", "--exclude-standard")
    measured = _matcher(SOURCES[name])
    return sorted(path for path in set(listed.splitlines()) if measured(path) and (commit or (REPO / path).is_file()))


def source_digest(name: str, commit: str | None = None) -> str:
    """SHA-256 over the paths and contents of the files benchmark `name` measures, in path order: the working
    tree's, or `commit`'s."""
    digest = hashlib.sha256()
    for path in measured_paths(name, commit):
        content = _git_bytes("show", f"{commit}:{path}") if commit else (REPO / path).read_bytes()
        digest.update(path.encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def _git_bytes(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=True).stdout


def head() -> str:
    """The commit checked out: the one a benchmark measures (its results name it)."""
    return _git("rev-parse", "HEAD").strip()


def machine() -> dict:
    """What the figures were measured on: ratios carry across machines, times do not."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "measured_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def save(name: str, figures: dict) -> Path:
    """Write benchmarks/results/<name>.json: the figures, the machine, the commit and the measured code's digest
    (the figures of uncommitted code are written, with a warning: they stand for no commit)."""
    digest = source_digest(name)
    commit = head()
    if digest != source_digest(name, commit):
        # Written all the same (a run can take hours): tests/test_benchmarks.py refuses the file until the
        # benchmark runs again on committed code.
        print(f"\nwarning: the code {name} measured differs from commit {commit[:12]}: commit it and run again")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {
        "benchmark": name,
        "machine": machine(),
        "commit": commit,
        "source_digest": digest,
        "figures": figures,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nresults written to {path.relative_to(REPO)}")
    return path


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def changed_since(name: str) -> list[str]:
    """The files benchmark `name` measures that differ now from the commit its results name ([] where its
    figures are the current code's)."""
    commit = load(name)["commit"]
    now, then = measured_paths(name), measured_paths(name, commit)
    return [p for p in sorted(set(now) | set(then)) if p not in then or p not in now or _differs(p, commit)]


def _differs(path: str, commit: str) -> bool:
    """Whether what `path` runs differs from `commit`'s: a Python file's comments, docstrings and layout are
    not what a benchmark measures, so an edit of them alone leaves its figures standing."""
    return _code(path, (REPO / path).read_bytes()) != _code(path, _git_bytes("show", f"{commit}:{path}"))


def _code(path: str, content: bytes) -> bytes:
    """A Python file's syntax tree without its docstrings (no comments or positions are in it); any other file,
    or one that does not parse, as it is."""
    if not path.endswith(".py"):
        return content
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return content
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def main() -> None:
    """Print each benchmark, the commit it measured, and the measured files changed since (stale figures)."""
    print(f"{'benchmark':<18} {'measured':<12} {'at':<21} changed since")
    for name in sorted(SOURCES):
        document = load(name)
        changed = changed_since(name)
        shown = ", ".join(changed[:4]) + (", ..." if len(changed) > 4 else "")
        said = f"{len(changed)} file{'s' if len(changed) != 1 else ''}: {shown}"
        when = document["machine"]["measured_at"]
        print(f"{name:<18} {document['commit'][:12]:<12} {when:<21} {said if changed else '-'}")


if __name__ == "__main__":
    main()

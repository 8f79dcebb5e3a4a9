"""The benchmarks' results files: what each printed, the machine it ran on, and the code it measured.

Every benchmark ends with save(): benchmarks/results/<name>.json holds its figures, the machine (CPU
model, cores, memory, Python, the time of the run) and a digest of the source files on the path it
measured. docs/benchmarks.md's figures are rendered from these files (benchmarks/readme.py), and a test holds
the page to them and each file's digest to the current code, so a figure cannot outlive the code that
produced it: change the measured code and the test asks for the benchmark to be run again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
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
    "soak": ("benchmarks/soak.py", *_EXPORTER),
}


def source_digest(name: str) -> str:
    """SHA-256 over the paths and contents of the files benchmark `name` measures, in path order."""
    digest = hashlib.sha256()
    patterns = SOURCES[name]
    left_out = {p for pattern in patterns if pattern.startswith("!") for p in REPO.glob(pattern[1:])}
    paths = sorted({p for pattern in patterns for p in REPO.glob(pattern) if p.is_file()} - left_out)
    for path in paths:
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


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
    """Write benchmarks/results/<name>.json: the figures, the machine and the measured code's digest."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {"benchmark": name, "machine": machine(), "source_digest": source_digest(name), "figures": figures}
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nresults written to {path.relative_to(REPO)}")
    return path


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())

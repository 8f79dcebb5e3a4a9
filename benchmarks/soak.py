"""The exporter's memory over hours: `gpulens exporter` at 64 GPUs scraped 10 times a second, its RSS read
every minute, beside a bare interpreter's HTTP server answering the same scrapes (the floor: what CPython
and the standard library's server do under the same traffic).

Run: .venv/bin/python benchmarks/soak.py [--hours 2]   (not in CI: it takes the hours it is given)

The path production takes: the real nvidia-ml-py on the fake libnvidia-ml.so.1 (H100s with GPM and 18
NVLinks each, 8 processes per GPU, as benchmarks/exporter.py), the fake kubelet over its real gRPC
protocol, and scrapes as Prometheus sends them (OpenMetrics, gzip, the connection kept alive). The world
changes as a node's does: every minute each GPU's processes are replaced by new ones (new PIDs) and a
quarter of the pods by new pods, so that whatever the exporter keeps per process or per pod must be let go.

The verdict is the growth over the run after its first quarter (the warm-up: caches filling, the
allocator's arenas settling), as a least-squares slope in MiB per hour, for both processes. The figures
are written to benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402
from benchmarks.exporter import BARE_SERVER, PROCESSES_PER_GPU, gpu_state, rss_mib, write_board  # noqa: E402
from benchmarks.scrapers import Scraper, free_port, wait_for  # noqa: E402

GPUS = 64
#: Seconds between two readings of the resident memory, and between two changes of processes and pods.
MINUTE = 60.0


def pods(gpus: int, generation: int) -> dict:
    """The kubelet's answer: GPU i runs pod replica-i-<n>, where a quarter of the pods are replaced at each
    generation (pods i with i % 4 == generation % 4 get a new name)."""
    out = {}
    for i in range(gpus):
        renamed = sum(1 for g in range(1, generation + 1) if g % 4 == i % 4)  # times pod i was replaced
        uuid = gpu_state(i, 0)["uuid"]
        out[("serving", f"replica-{i}-{renamed}")] = {"server": [("nvidia.com/gpu", [uuid])]}
    return out


def board(fake, gpus: int, generation: int) -> None:
    """The board with every GPU's processes new in each generation (their PIDs moved on)."""
    write_board(fake, gpus)  # topology, links and the first generation's processes
    if generation:
        states = [gpu_state(i, PROCESSES_PER_GPU, gpus) for i in range(gpus)]
        for i, state in enumerate(states):
            for p in range(PROCESSES_PER_GPU):
                state[f"proc{p}.pid"] = 1_000_000 + generation * 10_000 + i * PROCESSES_PER_GPU + p
        pairs = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
        fake.write(
            states,
            topology={(a, b): 40 if a // 4 == b // 4 else 50 for a, b in pairs},
            p2p=dict.fromkeys(pairs, "nvlink"),
        )


async def scrape_forever(ports: list[int], rate: float, stop: threading.Event, failures: list[str]) -> int:
    """Scrape each port `rate` times a second, one kept-alive connection per scraper, until `stop`;
    the number of scrapes answered."""
    clients = [Scraper(port, timeout=10.0) for port in ports]
    answered, started, tick = 0, time.monotonic(), 0
    while not stop.is_set():
        tick += 1
        await asyncio.sleep(max(0.0, started + tick / rate - time.monotonic()))
        for client in clients:
            answer = await client.scrape()
            if isinstance(answer, str) or b" 200 " not in answer[1].split(b"\r\n")[0]:
                failures.append(answer if isinstance(answer, str) else answer[1].split(b"\r\n")[0].decode())
            else:
                answered += 1
    return answered


def slope_mib_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) in MiB per hour."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * 3600 if spread else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0, help="how long to soak (at least 0.05)")
    parser.add_argument("--rate", type=float, default=10.0, help="scrapes a second of each server")
    args = parser.parse_args()
    if not 0.05 <= args.hours <= 48 or not 0.1 <= args.rate <= 100:
        parser.error("--hours must be within 0.05..48 and --rate within 0.1..100")

    from tests.fake_kubelet import FakeKubelet
    from tests.helpers import FakeNvml, build_fake_nvml

    with tempfile.TemporaryDirectory(prefix="gpulens-soak-") as tmp:
        workdir = Path(tmp)
        fake = FakeNvml(build_fake_nvml(workdir / "lib").parent, workdir / "state")
        board(fake, GPUS, 0)
        empty = workdir / "empty"
        empty.mkdir()
        kubelet = FakeKubelet(str(workdir / "kubelet.sock"), pods(GPUS, 0)).start()
        env = fake.env() | {"PYTHONPATH": str(REPO)}
        ports = {"gpulens": free_port(), "bare": free_port()}
        commands = {
            "gpulens": [
                sys.executable, "-m", "gpulens", "--log.level", "warning", "exporter", "--source", "nvml",
                "--kubelet.socket", str(workdir / "kubelet.sock"), "--path.procfs", str(empty),
                "--path.var-log", str(empty), "--web.listen-address", f"127.0.0.1:{ports['gpulens']}",
            ],
            "bare": [sys.executable, "-c", BARE_SERVER, str(ports["bare"]), "gpulens_gpu_up 1\n# EOF\n"],
        }  # fmt: skip
        # Their logs go to files: a pipe nobody reads for hours would fill and stall the writer.
        logs = {name: (workdir / f"{name}.log").open("wb") for name in commands}
        processes = {
            name: subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=logs[name])
            for name, command in commands.items()
        }
        stop, failures = threading.Event(), []
        try:
            for name, process in processes.items():
                wait_for(ports[name], process)
            scraped: list[int] = []
            scraping = scrape_forever(list(ports.values()), args.rate, stop, failures)
            scraper = threading.Thread(target=lambda: scraped.append(asyncio.run(scraping)))
            scraper.start()
            readings: dict[str, list[tuple[float, float]]] = {name: [] for name in processes}
            started = time.monotonic()
            print(f"{'minute':>6} {'gpulens MiB':>12} {'bare MiB':>9} {'failed scrapes':>15}", flush=True)
            minute = 0
            while (elapsed := time.monotonic() - started) < args.hours * 3600:
                for name, process in processes.items():
                    if process.poll() is not None:
                        log = (workdir / f"{name}.log").read_text(errors="replace")
                        raise SystemExit(f"{name} exited with {process.returncode}: {log}")
                    readings[name].append((elapsed, rss_mib(process.pid)))
                if minute < 10 or minute % 10 == 0:  # the warm-up minute by minute
                    print(
                        f"{minute:>6} {readings['gpulens'][-1][1]:>12.1f} {readings['bare'][-1][1]:>9.1f} "
                        f"{len(failures):>15}",
                        flush=True,
                    )
                minute += 1
                board(fake, GPUS, minute)
                kubelet.set_pods(pods(GPUS, minute))
                time.sleep(max(0.0, started + minute * MINUTE - time.monotonic()))
        finally:
            stop.set()
            for process in processes.values():
                process.terminate()
                process.wait(timeout=10)
            for file in logs.values():
                file.close()
            kubelet.stop()
            warnings = (workdir / "gpulens.log").read_text(errors="replace").splitlines()
        scraper.join(timeout=30)

    warm = len(readings["gpulens"]) // 4
    figures: dict = {"hours": args.hours, "gpus": GPUS, "rate": args.rate, "scrapes": scraped[0] if scraped else 0}
    figures["failed_scrapes"] = len(failures)
    figures["log_lines"] = len(warnings)
    for name, points in readings.items():
        figures[name] = {
            "first_mib": points[0][1],
            "after_warmup_mib": points[warm][1],
            "last_mib": points[-1][1],
            "peak_mib": max(mib for _, mib in points),
            "slope_mib_per_hour": slope_mib_per_hour(points[warm:]),
        }
    print(
        f"\n{args.hours:g} h at {GPUS} GPUs, {args.rate:g} scrapes/s each, {figures['scrapes']} answered, "
        f"{len(failures)} failed; processes replaced every minute, a quarter of the pods too; "
        f"the exporter logged {len(warnings)} lines at warning or above.\n"
    )
    print(f"{'process':<10} {'start MiB':>10} {'warm MiB':>9} {'end MiB':>8} {'peak MiB':>9} {'MiB/h warm':>11}")
    for name in processes:
        f = figures[name]
        print(
            f"{name:<10} {f['first_mib']:>10.1f} {f['after_warmup_mib']:>9.1f} {f['last_mib']:>8.1f} "
            f"{f['peak_mib']:>9.1f} {f['slope_mib_per_hour']:>11.2f}"
        )
    results.save("soak", figures)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

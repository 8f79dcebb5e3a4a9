"""100 Prometheus-like scrapers against the exporter for a minute, beside prometheus_client's own server.

Run: .venv/bin/python benchmarks/scrapers.py [--scrapers 100] [--seconds 60]

Both servers run the same sampler over the fake libnvidia-ml from the tests (8 H100s, 64 processes),
each in a process of its own: "gpulens" is `gpulens exporter` as deployed, "prometheus_client" the same
collector behind prometheus_client's start_http_server, the stock way to serve a Python exporter. Every
scraper asks as Prometheus does (its Accept header, gzip, its connection kept alive), once a second:
spread over the second as Prometheus spreads targets' scrapes, then all at the same instant. A scrape
slower than --timeout is an error, as for Prometheus. Each is timed from the request to the answer's
last byte and checked whole (status, gzip, OpenMetrics' closing # EOF) after the run. The scrapers share
the machine's cores with the server, so the latencies are an upper bound. The figures are written to
benchmarks/results/scrapers.json with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402
from benchmarks.exporter import PROCESSES_PER_GPU, gpu_state  # noqa: E402

GPUS = 8
#: What Prometheus 2.x sends on every scrape (scrape/scrape.go's acceptHeader), and Accept-Encoding: gzip.
ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_baseline(port: int) -> None:
    """The child that serves the same collector with prometheus_client's start_http_server."""
    from prometheus_client import CollectorRegistry, start_http_server

    from gpulens.exporter.collector import ExporterCollector
    from gpulens.exporter.sampler import Sampler
    from gpulens.exporter.sources.nvml import NvmlSource

    source = NvmlSource()
    source.start()
    sampler = Sampler(source, interval=1.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(sampler, "bench", "nvml"))
    sampler.start()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    while True:
        time.sleep(3600)


class Scraper:
    """One Prometheus-like scraper: its connection kept alive from one scrape to the next, as Prometheus
    keeps it, and opened again when the server has closed it."""

    def __init__(self, port: int, timeout: float):
        self.port, self.timeout = port, timeout
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def scrape(self) -> tuple[float, bytes, bytes] | str:
        """Seconds to the answer's last byte, its head and body, or what went wrong."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(started)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as e:
            self.close()
            return "timeout" if isinstance(e, TimeoutError) else type(e).__name__

    def request(self) -> bytes:
        """What Prometheus sends for a scrape."""
        return (
            f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUser-Agent: Prometheus/2.42.0\r\n"
            f"Accept: {ACCEPT}\r\nAccept-Encoding: gzip\r\n\r\n"
        ).encode()

    async def _exchange(self, started: float) -> tuple[float, bytes, bytes]:
        for attempt in (1, 2):  # a kept connection the server closed or reset meanwhile: once more on a new one
            if self.connection is None:
                self.connection = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = self.connection
            writer.write(self.request())
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):  # as Go's client, once more on a new one
                self.close()
                if attempt == 2:
                    raise
                continue
            lines = head.lower().split(b"\r\n")
            length = [int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:")]
            body = await reader.readexactly(length[0]) if length else await reader.read()
            if not length or lines[0].startswith(b"http/1.0") or b"connection: close" in lines:
                self.close()  # the server ends the connection after this answer
            return time.perf_counter() - started, head, body
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.connection is not None:
            self.connection[1].close()
            self.connection = None


def checked(result: tuple[float, bytes, bytes] | str) -> float | str:
    """The scrape's seconds if its answer is whole and right, else what is wrong with it. Checked after
    the second's scrapes are all in, so that checking one does not delay the others' timing."""
    if isinstance(result, str):
        return result
    elapsed, head, body = result
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if lines[0].split(" ")[1:2] != ["200"]:
        return f"status {lines[0]}"
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    if not body.endswith(b"# EOF\n") or b"gpulens_gpu_up" not in body:
        return "not a whole OpenMetrics answer"
    return elapsed


async def paced(client: Scraper, start: float, seconds: int) -> list[tuple[float, bytes, bytes] | str]:
    """`client`'s answers to a scrape once a second for `seconds`, from `start` (time.monotonic())."""
    answers = []
    for second in range(seconds):
        await asyncio.sleep(max(0.0, start + second - time.monotonic()))
        answers.append(await client.scrape())
    client.close()
    return answers


async def scrapers(port: int, count: int, seconds: int, timeout: float, spread: bool) -> list[float | str]:
    """`count` scrapers, once a second for `seconds`: all at the same instant, or each at its own offset
    within the second (`spread`), as Prometheus places each target's scrapes."""
    clients = [Scraper(port, timeout) for _ in range(count)]
    start = time.monotonic() + 1.0
    answers = await asyncio.gather(
        *(paced(c, start + (i / count if spread else 0.0), seconds) for i, c in enumerate(clients))
    )
    return [checked(a) for each in answers for a in each]


def wait_for(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}: {process.communicate()[1].decode()}")
        try:
            if isinstance(checked(asyncio.run(Scraper(port, 2.0).scrape())), float):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not answer within 30 s")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapers", type=int, default=100, help="how many scrapers")
    parser.add_argument("--seconds", type=int, default=60, help="how long each server is scraped, each way")
    parser.add_argument("--timeout", type=float, default=1.0, help="a scrape slower than this is an error")
    parser.add_argument("--baseline-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:
        serve_baseline(args.baseline_child)
        return 0

    from tests.helpers import FakeNvml, build_fake_nvml

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as tmp:
        workdir = Path(tmp)
        fake = FakeNvml(build_fake_nvml(workdir / "lib").parent, workdir / "state")
        fake.write([gpu_state(i, PROCESSES_PER_GPU) for i in range(GPUS)])
        env = fake.env() | {"PYTHONPATH": str(REPO)}
        gpulens = [sys.executable, "-m", "gpulens", "--log.level", "error", "exporter", "--source", "nvml"]
        for name, command in (
            ("gpulens", lambda port: [*gpulens, "--web.listen-address", f"127.0.0.1:{port}"]),
            ("prometheus_client", lambda port: [sys.executable, __file__, "--baseline-child", str(port)]),
        ):
            port = free_port()
            process = subprocess.Popen(command(port), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                wait_for(port, process)
                for spread in (True, False):
                    answers = asyncio.run(scrapers(port, args.scrapers, args.seconds, args.timeout, spread))
                    times = [r for r in answers if isinstance(r, float)]
                    errors = [r for r in answers if not isinstance(r, float)]
                    rows.append((name, "spread" if spread else "at once", len(answers), errors, times))
            finally:
                process.terminate()
                stderr = process.communicate(timeout=10)[1].decode().strip()
            if stderr and name == "gpulens":
                print(f"gpulens logged:\n{stderr}\n")

    print(
        f"{args.scrapers} scrapers, once a second for {args.seconds} s each, asking as Prometheus does (OpenMetrics "
        f"preferred, gzip, the connection kept alive), {GPUS} GPUs and {GPUS * PROCESSES_PER_GPU} processes on "
        "the fake libnvidia-ml.\nspread: each scraper at its own offset within the second, as Prometheus places each "
        "target's scrapes; at once: all at the same instant, the worst case.\nAn error is a scrape not answered "
        f"whole within {args.timeout:g} s. Milliseconds from the request to the answer's last byte.\n"
    )
    print(
        f"{'server':<18} {'arrival':<8} {'scrapes':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'p99/gpulens':>12}"
    )
    ours = {arrival: percentile(times, 99) for name, arrival, _, _, times in rows if name == "gpulens"}
    for name, arrival, total, errors, times in rows:
        p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
        worst = max(times, default=float("nan")) * 1000
        print(
            f"{name:<18} {arrival:<8} {total:>8} {len(errors):>7} {p50:>8.1f} {p99:>8.1f} {worst:>8.1f} "
            f"{percentile(times, 99) / ours[arrival]:>12.2f}"
        )
    for name, arrival, _, errors, _ in rows:
        if errors:
            kinds = {e: errors.count(e) for e in errors}
            print(f"{name} {arrival} errors: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
    results.save(
        "scrapers",
        {
            "scrapers": args.scrapers,
            "seconds": args.seconds,
            "timeout_s": args.timeout,
            "gpus": GPUS,
            "rows": [
                {
                    "server": name,
                    "arrival": arrival,
                    "scrapes": total,
                    "errors": len(errors),
                    "p50_ms": percentile(times, 50) * 1000,
                    "p99_ms": percentile(times, 99) * 1000,
                    "max_ms": max(times, default=float("nan")) * 1000,
                }
                for name, arrival, total, errors, times in rows
            ],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A normal scraper's latency while the exporter is attacked, beside the same scraper with no attack.

Run: .venv/bin/python benchmarks/attacks.py [--seconds 20] [--scrapers 10]

`gpulens exporter` as deployed (8 H100s and 64 processes on the fake libnvidia-ml of the tests) with
basic auth on (a bcrypt hash of cost 10, as `htpasswd -nBC 10` makes). Ten scrapers ask /metrics once a
second as Prometheus does (OpenMetrics, gzip, kept-alive connections, the right credentials), and a
Kubernetes-like probe asks /healthz once a second, for --seconds under each attack in turn:

- none: the baseline, in the same run;
- slowloris: 600 connections (more than the server's 512 slots), each sending an unfinished head and
  then one header line every 5 s, reconnecting when closed;
- big heads: 50 clients sending heads of 100 lines of 64 KiB, again and again;
- bcrypt flood: 50 clients asking /metrics with a new wrong password each time, as fast as answered;
- idle keep-alives: 500 connections that ask /healthz once and then sit idle, reconnecting when closed.

An error is a scrape or probe not answered whole within --timeout. Milliseconds from the request to the
answer's last byte; the exporter's resident memory at the end of each attack. The attackers, scrapers and
server share this machine's cores, so the latencies are an upper bound. Figures are written to
benchmarks/results/attacks.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402
from benchmarks.exporter import PROCESSES_PER_GPU, gpu_state, rss_mib  # noqa: E402
from benchmarks.scrapers import ACCEPT, GPUS, Scraper, checked, free_port, paced, percentile  # noqa: E402

USER, PASSWORD = "prometheus", "s3cret"


class AuthScraper(Scraper):
    """A scraper sending the right credentials (or another path, for the probe)."""

    def __init__(self, port: int, timeout: float, path: str = "/metrics"):
        super().__init__(port, timeout)
        self.path = path
        self.auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    def request(self) -> bytes:
        credentials = f"Authorization: Basic {self.auth}\r\n" if self.auth else ""  # a probe sends none
        return (
            f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{credentials}"
            f"Accept: {ACCEPT}\r\nAccept-Encoding: gzip\r\n\r\n"
        ).encode()


def probe_checked(result: tuple[float, bytes, bytes] | str) -> float | str:
    if isinstance(result, str):
        return result
    elapsed, head, body = result
    return elapsed if head.startswith(b"HTTP/1.1 200") and body == b"ok\n" else f"probe answered {head[:20]!r}"


async def _forever(port: int, attack: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
    """One attacker: connect, attack, and again whenever the server closes the connection."""
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            await attack(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def slowloris(port: int) -> list[Awaitable[None]]:
    async def attack(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        while True:
            await asyncio.sleep(5)
            writer.write(b"X-Slow: 1\r\n")
            await writer.drain()

    return [_forever(port, attack) for _ in range(600)]


def big_heads(port: int) -> list[Awaitable[None]]:
    line = b"X-Pad: " + b"a" * (64 * 1024 - 9) + b"\r\n"

    async def attack(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(100):
            writer.write(line)
            await writer.drain()
        writer.write(b"\r\n")
        await writer.drain()
        await reader.read()

    return [_forever(port, attack) for _ in range(50)]


def bcrypt_flood(port: int) -> list[Awaitable[None]]:
    counter = iter(range(10**9))

    async def attack(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            wrong = base64.b64encode(f"{USER}:guess{next(counter)}".encode()).decode()
            writer.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {wrong}\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = [int(x.split(b":")[1]) for x in head.lower().split(b"\r\n") if x.startswith(b"content-length:")]
            await reader.readexactly(length[0] if length else 0)

    return [_forever(port, attack) for _ in range(50)]


def idle_keepalives(port: int) -> list[Awaitable[None]]:
    async def attack(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await reader.readuntil(b"ok\n")
        await reader.read()  # idle until the server closes it

    return [_forever(port, attack) for _ in range(500)]


ATTACKS: dict[str, Callable[[int], list[Awaitable[None]]]] = {
    "none": lambda port: [],
    "slowloris": slowloris,
    "big heads": big_heads,
    "bcrypt flood": bcrypt_flood,
    "idle keep-alives": idle_keepalives,
}


async def measure(port: int, attack: str, scrapers: int, seconds: int, timeout: float) -> tuple[list, list]:
    """The scrapes' and probes' results while `attack` runs (it starts 3 s before the first scrape)."""
    attackers = [asyncio.ensure_future(a) for a in ATTACKS[attack](port)]
    clients = [AuthScraper(port, timeout) for _ in range(scrapers)]
    probe = AuthScraper(port, timeout, "/healthz")
    probe.auth = ""  # Kubernetes sends no credentials
    start = time.monotonic() + 3.0
    scrapes, probes = await asyncio.gather(
        asyncio.gather(*(paced(c, start + i / scrapers, seconds) for i, c in enumerate(clients))),
        paced(probe, start + 0.5, seconds),
    )
    for task in attackers:
        task.cancel()
    await asyncio.gather(*attackers, return_exceptions=True)
    return [checked(a) for each in scrapes for a in each], [probe_checked(a) for a in probes]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapers", type=int, default=10, help="normal scrapers, each once a second")
    parser.add_argument("--seconds", type=int, default=20, help="how long each attack is measured")
    parser.add_argument("--timeout", type=float, default=1.0, help="a scrape slower than this is an error")
    args = parser.parse_args()

    import bcrypt

    from tests.helpers import FakeNvml, build_fake_nvml

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as tmp:
        workdir = Path(tmp)
        fake = FakeNvml(build_fake_nvml(workdir / "lib").parent, workdir / "state")
        fake.write([gpu_state(i, PROCESSES_PER_GPU) for i in range(GPUS)])
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
        (workdir / "web.yml").write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        port = free_port()
        command = [sys.executable, "-m", "gpulens", "--log.level", "error", "exporter", "--source", "nvml"]
        command += ["--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", str(workdir / "web.yml")]
        env = fake.env() | {"PYTHONPATH": str(REPO)}
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not isinstance(checked(asyncio.run(AuthScraper(port, 2.0).scrape())), float):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit("the exporter did not answer within 30 s")
                time.sleep(0.2)
            for attack in ATTACKS:
                scrapes, probes = asyncio.run(measure(port, attack, args.scrapers, args.seconds, args.timeout))
                rows.append((attack, scrapes, probes, rss_mib(process.pid)))
        finally:
            process.terminate()
            stderr = process.communicate(timeout=10)[1].decode().strip()
        if stderr:
            print(f"gpulens logged:\n{stderr}\n")

    print(
        f"{args.scrapers} scrapers and a probe, once a second for {args.seconds} s under each attack, against "
        f"`gpulens exporter` ({GPUS} GPUs, basic auth with bcrypt cost 10).\nAn error is an answer not whole within "
        f"{args.timeout:g} s. Milliseconds from the request to the answer's last byte; RSS at the attack's end.\n"
    )
    print(
        f"{'attack':<17} {'scrapes':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'p99/none':>9} "
        f"{'probes':>7} {'probe errors':>13} {'probe p99 ms':>13} {'RSS MiB':>8}"
    )
    figures = []
    baseline = percentile([t for t in rows[0][1] if isinstance(t, float)], 99)
    for attack, scrapes, probes, rss in rows:
        times = [t for t in scrapes if isinstance(t, float)]
        probe_times = [t for t in probes if isinstance(t, float)]
        row = {
            "attack": attack,
            "scrapes": len(scrapes),
            "errors": len(scrapes) - len(times),
            "p50_ms": percentile(times, 50) * 1000,
            "p99_ms": percentile(times, 99) * 1000,
            "probes": len(probes),
            "probe_errors": len(probes) - len(probe_times),
            "probe_p99_ms": percentile(probe_times, 99) * 1000,
            "rss_mib": rss,
        }
        figures.append(row)
        print(
            f"{attack:<17} {row['scrapes']:>8} {row['errors']:>7} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} "
            f"{row['p99_ms'] / 1000 / baseline:>9.2f} {row['probes']:>7} {row['probe_errors']:>13} "
            f"{row['probe_p99_ms']:>13.1f} {rss:>8.1f}"
        )
        errors = [e for e in scrapes + probes if not isinstance(e, float)]
        if errors:
            print(f"  {attack} errors: " + ", ".join(f"{e} x{errors.count(e)}" for e in sorted(set(errors))))
    results.save(
        "attacks",
        {"scrapers": args.scrapers, "seconds": args.seconds, "timeout_s": args.timeout, "gpus": GPUS, "rows": figures},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

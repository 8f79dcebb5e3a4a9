"""Connections: HTTP/1.1 kept alive between scrapes, a backlog of 1,024, at most MAX_CONNECTIONS open at
once. A request's head (request line and headers) must arrive whole within HEAD_TIMEOUT_SECONDS of its
first byte (of the connection's accept, for its first request), however slowly it trickles, and hold at
most MAX_HEAD_BYTES; a kept-alive connection may wait IDLE_TIMEOUT_SECONDS for its next request. When
every slot is taken, a new connection takes the slot of the oldest one that is idle between requests or
still sending its head: a client that ties connections up without finishing requests (slowloris) is shed,
and scrapes and probes are still served. A GET carries no body; a POST's is read in full (at most
MAX_BODY_BYTES, by its Content-Length), so nothing of one request is read as the next. Basic auth never
runs bcrypt for a probe, runs it for at most BCRYPT_WAITING requests at once (429 beyond), and a scraper
whose credentials were verified once is answered from a cache that wrong passwords cannot evict. A client
hanging up is a debug line, never a traceback. /metrics bodies come from an Exposition: rendered once,
shared by every scraper.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from gpulens.core import metrics as m
from gpulens.core.exposition import Families
from gpulens.core.status import ProblemLog

log = logging.getLogger(__name__)


#: Seconds a connection may sit without sending (its next request) or receiving (the answer) before it is
#: closed.
IDLE_TIMEOUT_SECONDS = 30.0
#: Seconds a request's head (and a POST's body) may take to arrive in full, from its first byte, or from
#: the accept for a connection's first request (its TLS handshake included): Go's ReadHeaderTimeout.
HEAD_TIMEOUT_SECONDS = 10.0
#: Bytes a request's head may hold in all (a scrape's is about 300, a browser's 2 KiB); more: 431.
MAX_HEAD_BYTES = 16 * 1024
#: Bytes a POST's body may hold (an Alertmanager webhook of a few hundred alerts); more: 413.
MAX_BODY_BYTES = 1024 * 1024
#: POST bodies read at once, so that bodies in memory stay under 16 MiB; more: 503.
MAX_BODIES = 16
#: Connections served at once. Past it, a new connection takes the slot of the oldest idle or unfinished
#: one (see the module docstring), or is closed on arrival if every one is busy answering.
MAX_CONNECTIONS = 512
#: Query parameters a GET may carry: the routes read one or two; more is a client to refuse, not to parse.
MAX_QUERY_FIELDS = 20


#: Why the server closed a connection to protect the others (the reason label of
#: gpulens_http_connections_shed_total; docs/metrics.md).
SHED_REASONS = ("full", "busy", "slow_head")


class HeadTooLarge(Exception):
    """The request head holds more than MAX_HEAD_BYTES."""


class HeadReader:
    """The connection's reader while a request head is read: at most `budget` bytes in all, line by line
    as the standard library reads a head (its own bound is 100 lines of 64 KiB: 6.4 MiB a connection)."""

    def __init__(self, reader: io.BufferedIOBase, budget: int):
        self._reader, self._left = reader, budget

    def readline(self, limit: int = -1) -> bytes:
        if self._left < 0:
            raise HeadTooLarge
        line = self._reader.readline(self._left + 1 if limit < 0 else min(limit, self._left + 1))
        self._left -= len(line)
        if self._left < 0:
            raise HeadTooLarge
        return line


class Slot:
    """One open connection: its socket, what it is doing, and since when (time.monotonic())."""

    __slots__ = ("sock", "state", "since")

    #: Waiting for or reading a request (head, or a POST's body); between two requests; answering.
    RECEIVING, IDLE, BUSY = "receiving", "idle", "busy"

    def __init__(self, sock: socket.socket, now: float):
        self.sock, self.state, self.since = sock, self.RECEIVING, now


class Slots:
    """The server's MAX_CONNECTIONS slots, and the watch that ends a head (or body) that takes longer
    than HEAD_TIMEOUT_SECONDS: its connection is shut down, which ends the blocked read in its thread."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic):
        self.capacity, self._clock = capacity, clock
        self._open: dict[int, Slot] = {}
        self._lock = threading.Lock()
        self._problems = ProblemLog(log)
        self._stop = threading.Event()
        #: Connections closed to protect the others, by reason (gpulens_http_connections_shed_total).
        self.shed = dict.fromkeys(SHED_REASONS, 0)
        #: Threads serving connections, shed ones still unwinding included: at most twice the capacity.
        self.threads = 0

    def admit(self, sock: socket.socket) -> Slot | None:
        """A slot for a new connection, shedding the oldest idle or unfinished one when all are taken;
        None (close it) when every one is busy answering or too many threads are still unwinding."""
        with self._lock:
            if self.threads >= 2 * self.capacity:
                self.shed["busy"] += 1
                return None
            if len(self._open) >= self.capacity:
                waiting = [slot for slot in self._open.values() if slot.state != Slot.BUSY]
                if not waiting:
                    self.shed["busy"] += 1
                    self._problems.problem("cap", f"{self.capacity} connections busy at once: closing new ones")
                    return None
                victim = min(waiting, key=lambda slot: (slot.state != Slot.IDLE, slot.since))
                self.shed["full"] += 1
                self._problems.problem(
                    "shed", f"{self.capacity} connections open at once: closing the oldest idle or unfinished ones"
                )
                self._drop(victim)
            else:
                self._problems.resolved("cap", f"fewer than {self.capacity} connections busy again")
                self._problems.resolved("shed", f"fewer than {self.capacity} connections open again")
            slot = self._open[id(sock)] = Slot(sock, self._clock())
            self.threads += 1
            return slot

    def set(self, slot: Slot, state: str) -> None:
        with self._lock:
            slot.state, slot.since = state, self._clock()

    def release(self, slot: Slot) -> None:
        with self._lock:
            self._open.pop(id(slot.sock), None)
            self.threads -= 1

    def _drop(self, slot: Slot) -> None:
        """Shut a connection down (its thread's read returns at once) and free its slot. Lock held."""
        self._open.pop(id(slot.sock), None)
        try:
            slot.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by its client

    def watch(self) -> None:
        """Until close(): end every head or body that has taken longer than HEAD_TIMEOUT_SECONDS."""
        while not self._stop.wait(min(HEAD_TIMEOUT_SECONDS / 4, 1.0)):
            deadline = self._clock() - HEAD_TIMEOUT_SECONDS
            with self._lock:
                for slot in [s for s in self._open.values() if s.state == Slot.RECEIVING and s.since < deadline]:
                    log.debug("a request head took over %g s: closing its connection", HEAD_TIMEOUT_SECONDS)
                    self.shed["slow_head"] += 1
                    self._drop(slot)

    def close(self) -> None:
        self._stop.set()

    def families(self, out: Families) -> Families:
        """`out` with the shed counter added."""
        for reason, count in self.shed.items():
            out.add(m.HTTP_CONNECTIONS_SHED, (reason,), count)
        return out


class WithServer:
    """A registry's metrics and the server's shed counter, for prometheus_client's encoders."""

    def __init__(self, registry: CollectorRegistry, slots: Slots):
        self._registry, self._slots = registry, slots

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()
        yield from self._slots.families(Families()).metric_families()

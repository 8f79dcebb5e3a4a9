"""HTTP serving for gpulens' exporter and analyzer: /metrics, /healthz, /readyz, a small index page.

`--web.config.file` takes the Prometheus exporter-toolkit format, so an SRE can reuse the file they
already have for node_exporter. Every field is read with exporter-toolkit's meaning, or the file is
refused naming the field and why:

    tls_server_config:
      cert_file: server.crt          # or cert: PEM text (and key: for key_file)
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # NoClientCert (default), RequestClientCert,
                                     # VerifyClientCertIfGiven; RequireAnyClientCert is refused: Python's
                                     # TLS cannot admit a certificate without verifying it
      client_ca_file: ca.crt         # or client_ca: PEM text
      client_allowed_sans: [prometheus.monitoring.svc]   # DNS, IP, e-mail or URI, exact
      min_version: TLS12             # TLS10-TLS13; max_version too (default TLS13)
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go's names; TLS 1.2 and below
      prefer_server_cipher_suites: true
      curve_preferences: [X25519]    # one curve (Python sets one, not an order)
    http_server_config:
      http2: true                    # gpulens speaks HTTP/1.1; clients agree on it through ALPN
      headers: {X-Frame-Options: deny}   # the five headers exporter-toolkit allows
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
    rate_limit: {interval: 100ms, burst: 10}   # beyond it: 429 (never for /healthz, /readyz)

Connections: HTTP/1.1 kept alive between scrapes, a backlog of 1,024, at most MAX_CONNECTIONS open at
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

import base64
import gzip
import hashlib
import html
import io
import ipaddress
import logging
import re
import socket
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from gpulens.core import metrics as m
from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Exposition, Families, negotiate
from gpulens.core.schema import Duration, Flag, Integer, ListOf, MapOf, Record, Text, validate
from gpulens.core.status import ProblemLog

log = logging.getLogger(__name__)


def parse_listen_address(value: str) -> tuple[str, int]:
    """':9848' -> ('', 9848); '127.0.0.1:0' -> ('127.0.0.1', 0); '[::1]:9848' -> ('::1', 9848)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--web.listen-address {value!r} is not HOST:PORT; for example ':9848' or '127.0.0.1:9848'")
    return host.strip("[]"), int(port)


_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and admits every client whatever it sends; nothing uses an unverified
    # certificate here, so it is not asked for: every client is admitted, as there.
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
#: Go's cipher suite names (crypto/tls.CipherSuites(), the ones exporter-toolkit accepts) as OpenSSL's.
#: Like Go, they choose among TLS 1.2 suites only; TLS 1.3's are not configurable.
_CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # TLS 1.3's: accepted and without effect, as in Go.
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
}
#: Go's curve names (crypto/tls.CurveID) as OpenSSL's.
_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}
#: The response headers exporter-toolkit lets a web config set, with the values it accepts (None: any).
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}


def _latin1(value: str) -> bool:
    """HTTP/1.1 sends header values as ISO-8859-1: anything else would fail every answer, not the start."""
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _header(values: tuple[str, ...] | None) -> Text:
    """A header's value: one of `values` in any case, or any one-line ISO-8859-1 text."""
    if values is None:
        return Text(valid=_latin1, what="a header value in ISO-8859-1 (HTTP/1.1 cannot send other characters)")
    return Text(valid=lambda v: v.lower() in values, what=f"one of {', '.join(values)}")


_HTPASSWD = "htpasswd -nBC 10 \"\" | tr -d ':\\n'"
#: A bcrypt hash as htpasswd and Go write it: version, cost 4-31, 22 characters of salt, 31 of hash.
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
#: exporter-toolkit's format, every field; validate() refuses a key outside it, naming it.
WEB_CONFIG_SCHEMA = Record(
    {
        "tls_server_config": Record(
            {
                "cert": Text(what="a PEM certificate", one_line=False),
                "key": Text(what="a PEM private key", one_line=False, secret=True),
                "client_ca": Text(what="PEM CA certificates", one_line=False),
                "cert_file": Text(valid=bool, what="a file name"),
                "key_file": Text(valid=bool, what="a file name"),
                "client_auth_type": Text(choices=(*_CLIENT_AUTH, "RequireAnyClientCert")),
                "client_ca_file": Text(valid=bool, what="a file name"),
                "client_allowed_sans": ListOf(Text(valid=bool, what="a DNS name, IP address, e-mail or URI")),
                "min_version": Text(choices=tuple(_TLS_VERSIONS)),
                "max_version": Text(choices=tuple(_TLS_VERSIONS)),
                "cipher_suites": ListOf(Text(choices=tuple(_CIPHER_SUITES))),
                "prefer_server_cipher_suites": Flag(),
                "curve_preferences": ListOf(Text(choices=tuple(_CURVES))),
            }
        ),
        "http_server_config": Record(
            {
                "http2": Flag(),
                "headers": Record({name: _header(values) for name, values in _HEADERS.items()}),
            }
        ),
        "basic_auth_users": MapOf(
            Text(valid=_BCRYPT.fullmatch, what=f"a bcrypt hash (make one with: {_HTPASSWD})", secret=True),
            key=Text(valid=lambda user: ":" not in user, what="a user name without ':'"),
        ),
        "rate_limit": Record({"interval": Duration(), "burst": Integer(low=0)}),
    },
    what="an exporter-toolkit web config",
)


@dataclass
class WebConfig:
    """A validated --web.config.file (exporter-toolkit's format)."""

    ssl_context: ssl.SSLContext | None = None
    #: Client certificates must name one of these (DNS, IP, e-mail or URI SAN); empty: any verified one.
    allowed_sans: frozenset[str] = frozenset()
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)
    #: Requests admitted per second and the burst above it (exporter-toolkit's rate_limit); None: no limit.
    rate_limit: tuple[float, int] | None = None

    @classmethod
    def load(cls, path: str | None) -> WebConfig:
        """The file at `path` (none: plain HTTP, no auth); ConfigError naming the file, the key and the
        fix for anything outside exporter-toolkit's format or that gpulens cannot do as it does."""
        if not path:
            return cls()
        where = f"--web.config.file {path}"
        raw = validate(read_yaml(path, "--web.config.file"), WEB_CONFIG_SCHEMA, where, empty={})
        config = cls()
        if "tls_server_config" in raw:
            config.ssl_context, config.allowed_sans = _tls(raw["tls_server_config"], Path(path).resolve().parent, where)
        users = raw.get("basic_auth_users", {})
        if users:
            import bcrypt  # only where basic auth is on: most nodes never load it
        for user, hashed in users.items():
            try:
                bcrypt.checkpw(b"", hashed.encode())  # a hash the library cannot read fails here, not at a scrape
            except ValueError:
                raise ConfigError(f"{where}: basic_auth_users.{user}: not a valid bcrypt hash") from None
            config.users[user] = hashed.encode()
        config.headers = raw.get("http_server_config", {}).get("headers", {})
        limit = raw.get("rate_limit", {})
        if limit.get("interval", 0) > 0:
            config.rate_limit = (1 / limit["interval"], limit.get("burst", 0))
        return config


def _tls(tls: dict, base: Path, where: str) -> tuple[ssl.SSLContext, frozenset[str]]:
    """The server's TLS context and the client SANs allowed, from a checked tls_server_config."""

    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"{where}: tls_server_config: {problem}")

    for inline, file in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if inline in tls and file in tls:
            raise refuse(f"give {inline} or {file}, not both")
    if not ("cert" in tls or "cert_file" in tls) or not ("key" in tls or "key_file" in tls):
        raise refuse("needs a certificate and its key (cert_file and key_file)")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth == "RequireAnyClientCert":
        raise refuse(
            "client_auth_type RequireAnyClientCert admits certificates nobody verified, which Python's TLS "
            "cannot do; use RequireAndVerifyClientCert with client_ca_file"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS[tls.get("min_version", "TLS12")]
    context.maximum_version = _TLS_VERSIONS[tls.get("max_version", "TLS13")]
    if context.minimum_version > context.maximum_version:
        raise refuse(f"min_version {tls['min_version']} is above max_version {tls.get('max_version', 'TLS13')}")
    # gpulens speaks HTTP/1.1; with http2 on, clients agree on it through ALPN as with any HTTP/1.1 server.
    context.set_alpn_protocols(["http/1.1"])
    try:
        _load_chain(context, tls, base)
    except (OSError, ssl.SSLError) as e:
        raise refuse(f"cannot load the certificate and key: {e}") from e
    context.verify_mode = _CLIENT_AUTH[auth]
    try:
        if "client_ca_file" in tls:
            context.load_verify_locations(base / tls["client_ca_file"])
        elif "client_ca" in tls:
            context.load_verify_locations(cadata=tls["client_ca"])
    except (OSError, ssl.SSLError) as e:
        raise refuse(f"cannot load the client CA: {e}") from e
    if context.verify_mode != ssl.CERT_NONE and not ("client_ca_file" in tls or "client_ca" in tls):
        raise refuse(f"client_auth_type {auth} needs client_ca_file")
    sans = frozenset(tls.get("client_allowed_sans", []))
    if sans and auth != "RequireAndVerifyClientCert":
        raise refuse("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    suites = [_CIPHER_SUITES[s] for s in tls.get("cipher_suites", []) if _CIPHER_SUITES[s]]
    try:
        if suites:
            context.set_ciphers(":".join(suites))
    except ssl.SSLError as e:
        raise refuse(f"cipher_suites: this OpenSSL offers none of them ({e})") from e
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = tls.get("curve_preferences", [])
    if len(curves) > 1:
        raise refuse("curve_preferences: Python's TLS sets one curve, not an order of several; name the one to use")
    if curves:
        context.set_ecdh_curve(_CURVES[curves[0]])
    return context, sans


def _load_chain(context: ssl.SSLContext, tls: dict, base: Path) -> None:
    """Load the server's certificate and key, from their files or inline (PEM text in the web config:
    Python's TLS reads files only, so inline ones pass through a directory only this process can read,
    removed at once)."""
    with tempfile.TemporaryDirectory() as directory:

        def path(inline: str, file: str) -> Path:
            if inline not in tls:
                return base / tls[file]
            written = Path(directory) / inline
            written.write_text(tls[inline])
            return written

        context.load_cert_chain(path("cert", "cert_file"), path("key", "key_file"))


def client_san_allowed(certificate: dict | None, allowed: frozenset[str]) -> bool:
    """Whether a verified client certificate (ssl.getpeercert()) names one of `allowed` among its DNS,
    IP, e-mail or URI subject alternative names, exactly (IP addresses compared as addresses)."""
    if not allowed:
        return True
    addresses = {_ip(a) for a in allowed} - {None}
    for kind, value in (certificate or {}).get("subjectAltName", ()):
        if kind in ("DNS", "email", "URI") and value in allowed:
            return True
        if kind == "IP Address" and _ip(value.strip()) in addresses:
            return True
    return False


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class _Authenticator:
    """Checks basic-auth credentials against bcrypt hashes as exporter-toolkit does, and keeps doing so
    under a flood of wrong ones.

    Timing tells nothing: every first check of a user and password costs one bcrypt run, for a user
    that does not exist too (against a decoy hash of the highest cost), and a check of a cheaper hash
    is padded to the time the slowest cost takes, so users of different costs are not told apart.
    Answers are cached by a hash of user, password and stored hash (bcrypt is slow on purpose, and a
    scraper sends the same credentials every time): good and bad answers apart, so that wrong passwords
    never evict the scraper's good one. bcrypt runs one at a time (a flood costs one core, not all) for
    at most BCRYPT_WAITING requests; more are refused at once (`allowed` is then None)."""

    CACHE_SIZE = 100

    def __init__(
        self,
        users: dict[str, bytes],
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.users = users
        self._good: dict[bytes, None] = {}
        self._bad: dict[bytes, None] = {}
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()
        self._waiting = 0
        self._clock, self._sleep = clock, sleep
        self._decoy = b""
        #: Seconds the costliest check took (the decoy's, at start): every check lasts at least that.
        self.slowest = 0.0
        if users:
            import bcrypt

            cost = max(int(h.split(b"$")[2]) for h in users.values())
            self._decoy = bcrypt.hashpw(b"decoy", bcrypt.gensalt(rounds=cost))
            started = clock()
            bcrypt.checkpw(b"decoy", self._decoy)
            self.slowest = clock() - started

    def _key(self, header: str | None) -> tuple[bytes, bytes, bytes | None] | None:
        """(cache key, password, stored hash) of a Basic Authorization header; None if it is not one."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, password_text = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        password = password_text.encode()
        hashed = self.users.get(user)
        return hashlib.sha256(b"\0".join((user.encode(), password, hashed or b""))).digest(), password, hashed

    def known(self, header: str | None) -> bool:
        """True for credentials already verified, without running bcrypt (for the probes)."""
        if not self.users:
            return True
        key = self._key(header)
        with self._lock:
            return key is not None and key[0] in self._good

    def allowed(self, header: str | None) -> bool | None:
        """True for good credentials (or basic auth off), False for others, None when too many checks
        are already waiting for bcrypt (answer 429: try again)."""
        if not self.users:
            return True
        checked = self._key(header)
        if checked is None:
            return False
        key, password, hashed = checked
        with self._lock:
            if key in self._good:
                return True
            if key in self._bad:
                return False
            if self._waiting >= BCRYPT_WAITING:
                return None
            self._waiting += 1
        import bcrypt

        try:
            with self._bcrypt:
                started = self._clock()
                # bcrypt reads 72 bytes at most; a longer password is refused (as Go's bcrypt does) after
                # the same work as any other.
                matches = bcrypt.checkpw(password[:72], hashed or self._decoy)
                spent = self._clock() - started
        finally:
            with self._lock:
                self._waiting -= 1
        if spent < self.slowest:
            self._sleep(self.slowest - spent)  # outside the lock: padding costs no one else time
        good = hashed is not None and matches and len(password) <= 72
        with self._lock:
            cache = self._good if good else self._bad
            if len(cache) >= self.CACHE_SIZE:
                del cache[next(iter(cache))]
            cache[key] = None
        return good


class _RateLimit:
    """A token bucket: `rate` requests a second on average, `burst` more at once (exporter-toolkit's
    rate_limit, as golang.org/x/time/rate counts it)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, max(burst, 1), clock
        self._tokens, self._last = float(self.burst), clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


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
#: Requests that may wait for bcrypt at once (one runs, the others queue); more are answered 429.
BCRYPT_WAITING = 4
#: Query parameters a GET may carry: the routes read one or two; more is a client to refuse, not to parse.
MAX_QUERY_FIELDS = 20


#: Why the server closed a connection to protect the others (the reason label of
#: gpulens_http_connections_shed_total; docs/metrics.md).
SHED_REASONS = ("full", "busy", "slow_head")


class _HeadTooLarge(Exception):
    """The request head holds more than MAX_HEAD_BYTES."""


class _HeadReader:
    """The connection's reader while a request head is read: at most `budget` bytes in all, line by line
    as the standard library reads a head (its own bound is 100 lines of 64 KiB: 6.4 MiB a connection)."""

    def __init__(self, reader: io.BufferedIOBase, budget: int):
        self._reader, self._left = reader, budget

    def readline(self, limit: int = -1) -> bytes:
        if self._left < 0:
            raise _HeadTooLarge
        line = self._reader.readline(self._left + 1 if limit < 0 else min(limit, self._left + 1))
        self._left -= len(line)
        if self._left < 0:
            raise _HeadTooLarge
        return line


class _Slot:
    """One open connection: its socket, what it is doing, and since when (time.monotonic())."""

    __slots__ = ("sock", "state", "since")

    #: Waiting for or reading a request (head, or a POST's body); between two requests; answering.
    RECEIVING, IDLE, BUSY = "receiving", "idle", "busy"

    def __init__(self, sock: socket.socket, now: float):
        self.sock, self.state, self.since = sock, self.RECEIVING, now


class _Slots:
    """The server's MAX_CONNECTIONS slots, and the watch that ends a head (or body) that takes longer
    than HEAD_TIMEOUT_SECONDS: its connection is shut down, which ends the blocked read in its thread."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic):
        self.capacity, self._clock = capacity, clock
        self._open: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._problems = ProblemLog(log)
        self._stop = threading.Event()
        #: Connections closed to protect the others, by reason (gpulens_http_connections_shed_total).
        self.shed = dict.fromkeys(SHED_REASONS, 0)
        #: Threads serving connections, shed ones still unwinding included: at most twice the capacity.
        self.threads = 0

    def admit(self, sock: socket.socket) -> _Slot | None:
        """A slot for a new connection, shedding the oldest idle or unfinished one when all are taken;
        None (close it) when every one is busy answering or too many threads are still unwinding."""
        with self._lock:
            if self.threads >= 2 * self.capacity:
                self.shed["busy"] += 1
                return None
            if len(self._open) >= self.capacity:
                waiting = [slot for slot in self._open.values() if slot.state != _Slot.BUSY]
                if not waiting:
                    self.shed["busy"] += 1
                    self._problems.problem("cap", f"{self.capacity} connections busy at once: closing new ones")
                    return None
                victim = min(waiting, key=lambda slot: (slot.state != _Slot.IDLE, slot.since))
                self.shed["full"] += 1
                self._problems.problem(
                    "shed", f"{self.capacity} connections open at once: closing the oldest idle or unfinished ones"
                )
                self._drop(victim)
            else:
                self._problems.resolved("cap", f"fewer than {self.capacity} connections busy again")
                self._problems.resolved("shed", f"fewer than {self.capacity} connections open again")
            slot = self._open[id(sock)] = _Slot(sock, self._clock())
            self.threads += 1
            return slot

    def set(self, slot: _Slot, state: str) -> None:
        with self._lock:
            slot.state, slot.since = state, self._clock()

    def release(self, slot: _Slot) -> None:
        with self._lock:
            self._open.pop(id(slot.sock), None)
            self.threads -= 1

    def _drop(self, slot: _Slot) -> None:
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
                for slot in [s for s in self._open.values() if s.state == _Slot.RECEIVING and s.since < deadline]:
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


class _WithServer:
    """A registry's metrics and the server's shed counter, for prometheus_client's encoders."""

    def __init__(self, registry: CollectorRegistry, slots: _Slots):
        self._registry, self._slots = registry, slots

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()
        yield from self._slots.families(Families()).metric_families()


#: The slot of the connection the current thread serves (set before its handler is made).
_serving = threading.local()


#: A GET handler: (the query's parameters, each its last value) -> (status, content type, body).
Route = Callable[[Mapping[str, str]], tuple[int, str, bytes]]
#: A POST handler: (path, request body) -> (status, content type, body).
PostHandler = Callable[[str, bytes], tuple[int, str, bytes]]


def serve(
    registry: CollectorRegistry,
    address: tuple[str, int],
    config: WebConfig,
    *,
    title: str,
    health: Callable[[], tuple[bool, str]],
    ready: Callable[[], tuple[bool, str]] | None = None,
    routes: dict[str, Route] | None = None,
    post: PostHandler | None = None,
    exposition: Exposition | None = None,
) -> ThreadingHTTPServer:
    """Start serving in a background thread and return the server (call shutdown() to stop).

    `health` returns (alive, reason) for /healthz (liveness: a failure means restart me) and `ready`
    (ready, reason) for /readyz (readiness: my inputs answer; `health` where not given). The probes
    answer without credentials, as Kubernetes probes send none; their reasons only to an authorized
    client, since a reason may name an input. `routes` adds GET paths such as a JSON API
    (or replaces the index page at "/"); `post` answers every POST (the alert receiver's webhooks);
    `exposition` serves /metrics in the format the scraper negotiates from bodies rendered once and
    shared (`registry` through prometheus_client's encoders where not given). Raises ConfigError if the
    address cannot be bound."""
    get_routes = dict(routes or {})
    auth = _Authenticator(config.users)
    limit = _RateLimit(*config.rate_limit) if config.rate_limit else None
    slots = _Slots(MAX_CONNECTIONS)
    bodies = threading.BoundedSemaphore(MAX_BODIES)
    # /metrics carries the server's own counter beside what its owner serves.
    if exposition is not None:
        owned = exposition
        exposition = Exposition(
            lambda: slots.families(owned.gather()), owned.version, owned.max_age_seconds, owned.clock
        )
    scraped = cast(CollectorRegistry, _WithServer(registry, slots))  # for prometheus_client's encoders

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpulens"
        # Keep-alive: Prometheus reuses its connection from one scrape to the next, sparing both sides a
        # connection (and a thread here) per scrape. Every answer carries its Content-Length.
        protocol_version = "HTTP/1.1"
        # The head and the body are two writes: with Nagle's algorithm the body waits for the client's
        # delayed ACK of the head, 40 ms a scrape on Linux once the connection is kept alive.
        disable_nagle_algorithm = True
        # A client that sends nothing, or stops reading, for this long is let go: a stalled or malicious
        # client holds a thread no longer than that (a request's head and body: HEAD_TIMEOUT_SECONDS).
        timeout = IDLE_TIMEOUT_SECONDS
        # Errors found before a request line's version is read are answered with a status line and headers
        # (the standard library's default, HTTP/0.9, answers them with a bare body).
        default_request_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            self.slot: _Slot = _serving.slot
            self.served = 0

        def handle_one_request(self):
            """The standard library's, with the wait for a kept-alive connection's next request apart from
            the reading of its head, which is bounded in bytes here and in time by the slots' watch."""
            try:
                if self.served:
                    slots.set(self.slot, _Slot.IDLE)
                    if not cast(io.BufferedReader, self.rfile).peek(1):  # the client closed its kept-alive connection
                        self.close_connection = True
                        return
                    slots.set(self.slot, _Slot.RECEIVING)
                reader = self.rfile
                self.rfile = cast(io.BufferedIOBase, _HeadReader(reader, MAX_HEAD_BYTES))
                try:
                    self.raw_requestline = self.rfile.readline(65537)
                    if not self.raw_requestline:
                        self.close_connection = True
                        return
                    if len(self.raw_requestline.split()) == 2:  # "GET /": HTTP/0.9, a body with no status
                        self.request_version, self.close_connection = self.protocol_version, True
                        self.command, self.requestline = "", self.raw_requestline.decode("latin-1").rstrip()
                        self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.1 or HTTP/1.0")
                        return
                    parsed = self.parse_request()
                except _HeadTooLarge:
                    self.send_error(431, f"Request head larger than {MAX_HEAD_BYTES} bytes")
                    return
                finally:
                    self.rfile = reader
                if not parsed:
                    return
                if not self.path.startswith("/"):  # absolute-form (RFC 9112 3.2.2), which a server must accept
                    target = urllib.parse.urlsplit(self.path)
                    if target.scheme.lower() in ("http", "https"):
                        self.path = (target.path or "/") + (f"?{target.query}" if target.query else "")
                self.served += 1
                if self.command != "POST" and ("Transfer-Encoding" in self.headers or self._length() != 0):
                    # Left unread, a body would be read as the next request: refused, the connection closed.
                    self.send_error(400, f"A {self.command} request carries no body")
                    return
                slots.set(self.slot, _Slot.BUSY)
                method = getattr(self, "do_" + self.command, None)
                if method is None:
                    self.send_error(501, f"Unsupported method ({self.command!r})")
                    return
                method()
                self.wfile.flush()
            except TimeoutError:  # idle for IDLE_TIMEOUT_SECONDS, or a client not reading its answer
                self.close_connection = True

        def _length(self) -> int | None:
            """The request's Content-Length (0 where absent); None where it is not one number of bytes."""
            values = self.headers.get_all("Content-Length") or ["0"]
            if len(set(values)) != 1 or not re.fullmatch(r"[0-9]{1,12}", values[0]):
                return None
            return int(values[0])

        def log_message(self, format, *args):  # access logs would drown the useful ones
            if log.isEnabledFor(logging.DEBUG):  # formatted only when shown: this runs on every scrape
                log.debug("%s %s", self.address_string(), format % args)

        def _send(self, code: int, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            for k, v in {**config.headers, **(extra or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _authorized(self) -> bool:
            """True when basic auth is off or the credentials are good; else answers 401 (429 when too
            many checks wait for bcrypt already)."""
            allowed = auth.allowed(self.headers.get("Authorization"))
            if allowed:
                return True
            if allowed is None:
                self._send(429, "text/plain; charset=utf-8", b"Too Many Requests\n", {"Retry-After": "1"})
            else:
                self._send(
                    401, "text/plain; charset=utf-8", b"Unauthorized\n", {"WWW-Authenticate": 'Basic realm="gpulens"'}
                )
            return False

        def _admitted(self) -> bool:
            """True within the rate limit (if any); else answers 429."""
            if limit is None or limit.allow():
                return True
            self._send(429, "text/plain; charset=utf-8", b"Too Many Requests\n", {"Retry-After": "1"})
            return False

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/healthz", "/readyz"):  # never rate-limited: a refused probe restarts the pod
                ok, reason = (health if path == "/healthz" else ready or health)()
                if not auth.known(self.headers.get("Authorization")):  # never bcrypt: probes are not limited
                    reason = "ok" if ok else "failing (authenticate to see why)"
                self._send(200 if ok else 503, "text/plain; charset=utf-8", (reason + "\n").encode())
                return
            if not self._admitted() or not self._authorized():
                return
            if path == "/metrics":
                accept = self.headers.get("Accept", "")
                openmetrics, gzipped = negotiate(accept, self.headers.get("Accept-Encoding", ""))
                if exposition is not None:
                    content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
                    body = exposition.body(openmetrics, gzipped)
                else:
                    encoder, content_type = choose_encoder(accept)
                    body = encoder(scraped)
                    body = gzip.compress(body, compresslevel=1) if gzipped else body
                self._send(200, content_type, body, {"Content-Encoding": "gzip"} if gzipped else {})
            elif path in get_routes:
                try:
                    query = urllib.parse.parse_qsl(self.path.partition("?")[2], max_num_fields=MAX_QUERY_FIELDS)
                except ValueError:
                    self._send(400, "text/plain; charset=utf-8", f"More than {MAX_QUERY_FIELDS} parameters\n".encode())
                    return
                code, content_type, body = get_routes[path](dict(query))
                self._send(code, content_type, body)
            elif path == "/":
                links = "".join(
                    f'<li><a href="{p}">{p}</a></li>' for p in ["/metrics", "/healthz", "/readyz", *get_routes]
                )
                body = (
                    f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
                    f"<h1>{html.escape(title)}</h1><ul>{links}</ul></body></html>"
                ).encode()
                self._send(200, "text/html; charset=utf-8", body)
            else:
                self._send(404, "text/plain; charset=utf-8", b"Not Found\n")

        do_HEAD = do_GET

        def do_POST(self):
            asked_to_close = self.close_connection  # Connection: close (or HTTP/1.0 without keep-alive)
            # Answered without its body read, the connection must close: the body would be the next request.
            self.close_connection = True
            if not self._admitted() or not self._authorized():
                return
            if post is None:
                self._send(405, "text/plain; charset=utf-8", b"Method Not Allowed\n", {"Allow": "GET, HEAD"})
                return
            length = self._length()
            plain = "text/plain; charset=utf-8"
            if "Transfer-Encoding" in self.headers or "Content-Length" not in self.headers:
                self._send(411, plain, b"Send the body with a Content-Length (no chunked encoding)\n")
                return
            if length is None:
                self._send(400, plain, b"Content-Length must be one number of bytes\n")
                return
            if length > MAX_BODY_BYTES:
                self._send(413, plain, f"A body of {MAX_BODY_BYTES} bytes at most\n".encode())
                return
            if not bodies.acquire(blocking=False):
                self._send(503, plain, b"Too many bodies being sent at once\n", {"Retry-After": "1"})
                return
            try:
                slots.set(self.slot, _Slot.RECEIVING)  # the body, as the head, within HEAD_TIMEOUT_SECONDS
                body = self.rfile.read(length)
                slots.set(self.slot, _Slot.BUSY)
            finally:
                bodies.release()
            if len(body) < length:
                return  # the client went away mid-body
            self.close_connection = asked_to_close
            code, content_type, answer = post(self.path.split("?", 1)[0], body)
            self._send(code, content_type, answer)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # socketserver's default backlog of 5 refused a third of 100 scrapers arriving at once (federations,
        # several Prometheus replicas, a dashboard refresh): the kernel queues this many instead.
        request_queue_size = 1024
        address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET

        def process_request(self, request, client_address):
            # One thread a connection, in one of MAX_CONNECTIONS slots (_Slots says whose slot a new one
            # takes when they are all taken), so a flood cannot exhaust the process's threads and memory.
            slot = slots.admit(request)
            if slot is None:
                self.shutdown_request(request)
                return
            thread = threading.Thread(target=self.serve_connection, args=(request, client_address, slot))
            thread.daemon = True
            try:
                thread.start()
            except BaseException:
                slots.release(slot)
                self.shutdown_request(request)
                raise

        def serve_connection(self, request, client_address, slot):
            _serving.slot = slot
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                slots.release(slot)
                self.shutdown_request(request)

        def shutdown(self):
            slots.close()  # the head watch ends with the server
            super().shutdown()

        def finish_request(self, request, client_address):
            # The TLS handshake runs here, in the connection's own thread, so that one slow or
            # broken client cannot stall the accept loop and every other scrape with it.
            if config.ssl_context is not None:  # within HEAD_TIMEOUT_SECONDS of the accept, as a head
                request.settimeout(IDLE_TIMEOUT_SECONDS)
                try:
                    request = config.ssl_context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as e:
                    log.debug("TLS handshake with %s failed: %s", client_address, e)
                    return
                if not client_san_allowed(request.getpeercert(), config.allowed_sans):
                    log.debug("client certificate of %s names none of client_allowed_sans", client_address)
                    request.close()
                    return
            super().finish_request(request, client_address)

        def handle_error(self, request, client_address):
            # A client that hangs up or stalls is routine (a scrape timing out, a probe): a debug line, not
            # socketserver's traceback on stderr. Anything else is a bug, logged with its traceback.
            error = sys.exc_info()[1]
            if isinstance(error, ConnectionError | TimeoutError | ssl.SSLError):
                log.debug("connection from %s ended: %r", client_address, error)
            else:
                log.error("error serving %s", client_address, exc_info=True)

    try:
        server = Server(address, Handler)
    except OSError as e:
        host, port = address
        raise ConfigError(
            f"cannot listen on {host or '*'}:{port}: {e.strerror}; choose another --web.listen-address"
        ) from e
    threading.Thread(target=server.serve_forever, name="gpulens-http", daemon=True).start()
    threading.Thread(target=slots.watch, name="gpulens-http-heads", daemon=True).start()
    return server

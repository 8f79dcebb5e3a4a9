"""serve(): the HTTP server of gpulens' exporter, analyzer and the demo's receiver: /metrics (from an Exposition:
rendered once, shared by every scraper), /healthz, /readyz, a small index page and its owner's routes, within
the limits of connections.py, for the clients auth.py admits, over the TLS of tls.py."""

from __future__ import annotations

import gzip
import html
import io
import logging
import re
import socket
import ssl
import sys
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseRequestHandler
from typing import cast

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from gpulens.core.config import ConfigError
from gpulens.core.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Exposition, Families, negotiate
from gpulens.core.web import connections
from gpulens.core.web.auth import Authenticator, RateLimit
from gpulens.core.web.config import WebConfig
from gpulens.core.web.connections import HeadReader, HeadTooLarge, Slot, Slots, WithServer
from gpulens.core.web.tls import client_san_allowed

log = logging.getLogger(__name__)


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
    auth = Authenticator(config.users)
    limit = RateLimit(*config.rate_limit) if config.rate_limit else None
    slots = Slots(connections.MAX_CONNECTIONS)
    bodies = threading.BoundedSemaphore(connections.MAX_BODIES)
    # /metrics carries the server's own counter beside what its owner serves: with its live families, rendered at
    # every scrape, so that it never holds back the shared body.
    if exposition is not None:
        owned = exposition
        exposition = Exposition(
            owned.gather,
            owned.version,
            owned.max_age_seconds,
            owned.clock,
            live=lambda: slots.families(owned.live() if owned.live else Families()),
        )
    scraped = cast(CollectorRegistry, WithServer(registry, slots))  # for prometheus_client's encoders
    site = _Site(
        config, title, health, ready, dict(routes or {}), post, exposition, scraped, auth, limit, slots, bodies
    )

    try:
        server = _Server(address, site)
    except OSError as e:
        host, port = address
        raise ConfigError(
            f"cannot listen on {host or '*'}:{port}: {e.strerror}; choose another --web.listen-address"
        ) from e
    threading.Thread(target=server.serve_forever, name="gpulens-http", daemon=True).start()
    threading.Thread(target=slots.watch, name="gpulens-http-heads", daemon=True).start()
    return server


@dataclass(frozen=True)
class _Site:
    """What a server answers and within which limits: serve()'s arguments, and the state its connections share."""

    config: WebConfig
    title: str
    health: Callable[[], tuple[bool, str]]
    ready: Callable[[], tuple[bool, str]] | None
    #: GET paths beside /metrics, /healthz and /readyz, and the handler of every POST (None: 405).
    routes: dict[str, Route]
    post: PostHandler | None
    #: /metrics: bodies rendered once and shared where given, else `scraped` through prometheus_client's encoders.
    exposition: Exposition | None
    scraped: CollectorRegistry
    auth: Authenticator
    limit: RateLimit | None
    slots: Slots
    #: POST bodies being read at once (connections.MAX_BODIES).
    bodies: threading.BoundedSemaphore


class _Handler(BaseHTTPRequestHandler):
    """One connection's requests, answered as its server's `site` says, in the connection's `slot`."""

    server_version = "gpulens"
    # Keep-alive: Prometheus reuses its connection from one scrape to the next, sparing both sides a
    # connection (and a thread here) per scrape. Every answer carries its Content-Length.
    protocol_version = "HTTP/1.1"
    # The head and the body are two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the head, 40 ms a scrape on Linux once the connection is kept alive.
    disable_nagle_algorithm = True
    # Errors found before a request line's version is read are answered with a status line and headers
    # (the standard library's default, HTTP/0.9, answers them with a bare body).
    default_request_version = "HTTP/1.1"

    def __init__(self, request: socket.socket, client_address: tuple, server: _Server, slot: Slot):
        # Set before the standard library's __init__, which serves the connection to its end.
        self.site, self.slot, self.served = server.site, slot, 0
        super().__init__(request, client_address, server)

    def setup(self):
        super().setup()
        # A client that sends nothing, or stops reading, for this long is let go: a stalled or malicious
        # client holds a thread no longer than that (a request's head and body: HEAD_TIMEOUT_SECONDS).
        self.connection.settimeout(connections.IDLE_TIMEOUT_SECONDS)

    def handle_one_request(self):
        """The standard library's, with the wait for a kept-alive connection's next request apart from
        the reading of its head, which is bounded in bytes here and in time by the slots' watch."""
        try:
            if self.served:
                self.site.slots.set(self.slot, Slot.IDLE)
                if not cast(io.BufferedReader, self.rfile).peek(1):  # the client closed its kept-alive connection
                    self.close_connection = True
                    return
                self.site.slots.set(self.slot, Slot.RECEIVING)
            reader = self.rfile
            self.rfile = cast(io.BufferedIOBase, HeadReader(reader, connections.MAX_HEAD_BYTES))
            # What an answer before the request line is parsed (a 431 for a line past the bound) needs:
            # the standard library sets them only in parse_request.
            self.command, self.requestline, self.request_version = "", "", self.protocol_version
            try:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline:
                    self.close_connection = True
                    return
                if len(self.raw_requestline.split()) == 2:  # "GET /": HTTP/0.9, a body with no status
                    self.close_connection = True
                    self.requestline = self.raw_requestline.decode("latin-1").rstrip()
                    self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.1 or HTTP/1.0")
                    return
                parsed = self.parse_request()
            except HeadTooLarge:
                self.send_error(431, f"Request head larger than {connections.MAX_HEAD_BYTES} bytes")
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
            self.site.slots.set(self.slot, Slot.BUSY)
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
        for k, v in {**self.site.config.headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorized(self) -> bool:
        """True when basic auth is off or the credentials are good; else answers 401 (429 when too
        many checks wait for bcrypt already)."""
        allowed = self.site.auth.allowed(self.headers.get("Authorization"))
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
        if self.site.limit is None or self.site.limit.allow():
            return True
        self._send(429, "text/plain; charset=utf-8", b"Too Many Requests\n", {"Retry-After": "1"})
        return False

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/readyz"):  # never rate-limited: a refused probe restarts the pod
            site = self.site
            ok, reason = (site.health if path == "/healthz" else site.ready or site.health)()
            if not site.auth.known(self.headers.get("Authorization")):  # never bcrypt: probes are not limited
                reason = "ok" if ok else "failing (authenticate to see why)"
            self._send(200 if ok else 503, "text/plain; charset=utf-8", (reason + "\n").encode())
            return
        if not self._admitted() or not self._authorized():
            return
        if path == "/metrics":
            accept = self.headers.get("Accept", "")
            openmetrics, gzipped = negotiate(accept, self.headers.get("Accept-Encoding", ""))
            if self.site.exposition is not None:
                content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
                body = self.site.exposition.body(openmetrics, gzipped)
            else:
                encoder, content_type = choose_encoder(accept)
                body = encoder(self.site.scraped)
                body = gzip.compress(body, compresslevel=1) if gzipped else body
            self._send(200, content_type, body, {"Content-Encoding": "gzip"} if gzipped else {})
        elif path in self.site.routes:
            try:
                query = urllib.parse.parse_qsl(self.path.partition("?")[2], max_num_fields=connections.MAX_QUERY_FIELDS)
            except ValueError:
                self._send(
                    400,
                    "text/plain; charset=utf-8",
                    f"More than {connections.MAX_QUERY_FIELDS} parameters\n".encode(),
                )
                return
            code, content_type, body = self.site.routes[path](dict(query))
            self._send(code, content_type, body)
        elif path == "/":
            links = "".join(
                f'<li><a href="{p}">{p}</a></li>' for p in ["/metrics", "/healthz", "/readyz", *self.site.routes]
            )
            body = (
                f"<!doctype html><html><head><title>{html.escape(self.site.title)}</title></head><body>"
                f"<h1>{html.escape(self.site.title)}</h1><ul>{links}</ul></body></html>"
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
        if self.site.post is None:
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
        if length > connections.MAX_BODY_BYTES:
            self._send(413, plain, f"A body of {connections.MAX_BODY_BYTES} bytes at most\n".encode())
            return
        if not self.site.bodies.acquire(blocking=False):
            self._send(503, plain, b"Too many bodies being sent at once\n", {"Retry-After": "1"})
            return
        try:
            self.site.slots.set(self.slot, Slot.RECEIVING)  # the body, as the head, within HEAD_TIMEOUT_SECONDS
            body = self.rfile.read(length)
            self.site.slots.set(self.slot, Slot.BUSY)
        finally:
            self.site.bodies.release()
        if len(body) < length:
            return  # the client went away mid-body
        self.close_connection = asked_to_close
        code, content_type, answer = self.site.post(self.path.split("?", 1)[0], body)
        self._send(code, content_type, answer)


class _Server(ThreadingHTTPServer):
    """Accepts connections, each served in a thread of its own in one of the site's slots."""

    daemon_threads = True
    # socketserver's default backlog of 5 refused a third of 100 scrapers arriving at once (federations,
    # several Prometheus replicas, a dashboard refresh): the kernel queues this many instead.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], site: _Site):
        self.site = site
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # Each connection's handler is made with its slot (_finish_request), not by socketserver's finish_request.
        super().__init__(address, cast("type[BaseRequestHandler]", _Handler))

    def process_request(self, request, client_address):
        # One thread a connection, in one of MAX_CONNECTIONS slots (Slots says whose slot a new one
        # takes when they are all taken), so a flood cannot exhaust the process's threads and memory.
        slot = self.site.slots.admit(request)
        if slot is None:
            self.shutdown_request(request)
            return
        thread = threading.Thread(target=self.serve_connection, args=(request, client_address, slot))
        thread.daemon = True
        try:
            thread.start()
        except BaseException:
            self.site.slots.release(slot)
            self.shutdown_request(request)
            raise

    def serve_connection(self, request, client_address, slot):
        try:
            self._finish_request(request, client_address, slot)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.site.slots.release(slot)
            self.shutdown_request(request)

    def shutdown(self):
        self.site.slots.close()  # the head watch ends with the server
        super().shutdown()

    def _finish_request(self, request: socket.socket, client_address: tuple, slot: Slot) -> None:
        # The TLS handshake runs here, in the connection's own thread, so that one slow or
        # broken client cannot stall the accept loop and every other scrape with it.
        config = self.site.config
        if config.ssl_context is not None:  # within HEAD_TIMEOUT_SECONDS of the accept, as a head
            request.settimeout(connections.IDLE_TIMEOUT_SECONDS)
            try:
                request = config.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address, e)
                return
            if not client_san_allowed(request.getpeercert(), config.allowed_sans):
                log.debug("client certificate of %s names none of client_allowed_sans", client_address)
                request.close()
                return
        _Handler(request, client_address, self, slot)

    def handle_error(self, request, client_address):
        # A client that hangs up or stalls is routine (a scrape timing out, a probe): a debug line, not
        # socketserver's traceback on stderr. Anything else is a bug, logged with its traceback.
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError | ssl.SSLError):
            log.debug("connection from %s ended: %r", client_address, error)
        else:
            log.error("error serving %s", client_address, exc_info=True)

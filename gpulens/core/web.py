"""HTTP serving for gpulens' exporter and analyzer: /metrics, /healthz, a small index page.

`--web.config.file` takes the Prometheus exporter-toolkit format, so an SRE can reuse the file they
already have for node_exporter:

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: ca.crt                         # optional
      min_version: TLS12                             # optional
    http_server_config:
      headers: {X-Frame-Options: deny}               # optional
    basic_auth_users:
      prometheus: $2y$10$...                         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from gpulens.core.config import ConfigError, read_yaml

log = logging.getLogger(__name__)


def parse_listen_address(value: str) -> tuple[str, int]:
    """':9848' -> ('', 9848); '127.0.0.1:0' -> ('127.0.0.1', 0); '[::1]:9848' -> ('::1', 9848)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--web.listen-address {value!r} is not HOST:PORT; for example ':9848' or '127.0.0.1:9848'")
    return host.strip("[]"), int(port)


_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
    "client_allowed_sans",
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


@dataclass
class WebConfig:
    """A validated --web.config.file."""

    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None) -> WebConfig:
        if not path:
            return cls()
        where = f"--web.config.file {path}"
        raw = read_yaml(path, "--web.config.file") or {}
        if not isinstance(raw, dict):
            raise ConfigError(
                f"{where}: expected a mapping with tls_server_config, http_server_config or basic_auth_users"
            )
        unknown = set(raw) - {"tls_server_config", "http_server_config", "basic_auth_users"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        base = Path(path).resolve().parent
        config = cls()
        tls = raw.get("tls_server_config")
        if tls:
            config.ssl_context = _ssl_context(tls, base, where)
        users = raw.get("basic_auth_users") or {}
        if not isinstance(users, dict):
            raise ConfigError(f"{where}: basic_auth_users must map user names to bcrypt hashes")
        for user, hashed in users.items():
            if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise ConfigError(
                    f"{where}: the password of user {user!r} is not a bcrypt hash "
                    "(make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                )
            config.users[str(user)] = hashed.encode()
        http_config = raw.get("http_server_config") or {}
        config.headers = {str(k): str(v) for k, v in (http_config.get("headers") or {}).items()}
        return config


def _ssl_context(tls: dict, base: Path, where: str) -> ssl.SSLContext:
    unknown = set(tls) - _TLS_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown tls_server_config key(s) {', '.join(sorted(unknown))}")
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise ConfigError(f"{where}: tls_server_config needs both cert_file and key_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS.get(tls.get("min_version", "TLS12"), ssl.TLSVersion.TLSv1_2)
    try:
        context.load_cert_chain(base / tls["cert_file"], base / tls["key_file"])
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{where}: cannot load cert_file/key_file: {e}") from e
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"{where}: client_auth_type {auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    context.verify_mode = _CLIENT_AUTH[auth]
    if tls.get("client_ca_file"):
        try:
            context.load_verify_locations(base / tls["client_ca_file"])
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{where}: cannot load client_ca_file: {e}") from e
    elif auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        raise ConfigError(f"{where}: client_auth_type {auth} needs client_ca_file")
    return context


class _Authenticator:
    """Checks basic-auth credentials against bcrypt hashes. bcrypt is slow on purpose (tens of ms),
    so, like exporter-toolkit, successful checks are cached by a hash of the credentials."""

    def __init__(self, users: dict[str, bytes]):
        self.users = users
        self._good: set[bytes] = set()
        self._lock = threading.Lock()

    def allowed(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with self._lock:
            if key in self._good:
                return True
        import bcrypt  # only needed when basic auth is configured

        if bcrypt.checkpw(password.encode(), hashed):
            with self._lock:
                self._good.add(key)
            return True
        return False


Route = Callable[[], tuple[int, str, bytes]]
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
    render_text: Callable[[], bytes] | None = None,
) -> ThreadingHTTPServer:
    """Start serving in a background thread and return the server (call shutdown() to stop).

    `health` returns (alive, reason) for /healthz (liveness: a failure means restart me) and `ready`
    (ready, reason) for /readyz (readiness: my inputs answer; `health` where not given). The probes
    answer without credentials, as Kubernetes probes send none; their reasons only to an authorized
    client, since a reason may name an input. `routes` adds GET paths such as a JSON API
    (or replaces the index page at "/"); `post` answers every POST (the alert receiver's webhooks);
    `render_text` is a faster renderer of the registry in the Prometheus text format, used when the
    scraper asks for that format. Raises ConfigError if the address cannot be bound."""
    get_routes = dict(routes or {})
    auth = _Authenticator(config.users)

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpulens"

        def log_message(self, format, *args):  # access logs would drown the useful ones
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
            """True when basic auth is off or the credentials are good; else answers 401."""
            if auth.allowed(self.headers.get("Authorization")):
                return True
            self._send(
                401, "text/plain; charset=utf-8", b"Unauthorized\n", {"WWW-Authenticate": 'Basic realm="gpulens"'}
            )
            return False

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/healthz", "/readyz"):
                ok, reason = (health if path == "/healthz" else ready or health)()
                if not auth.allowed(self.headers.get("Authorization")):
                    reason = "ok" if ok else "failing (authenticate to see why)"
                self._send(200 if ok else 503, "text/plain; charset=utf-8", (reason + "\n").encode())
                return
            if not self._authorized():
                return
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                if render_text is not None and content_type.startswith("text/plain"):
                    body = render_text()
                else:
                    body = encoder(registry)
                extra = {}
                if "gzip" in self.headers.get("Accept-Encoding", ""):
                    body = gzip.compress(body, compresslevel=1)
                    extra["Content-Encoding"] = "gzip"
                self._send(200, content_type, body, extra)
            elif path in get_routes:
                code, content_type, body = get_routes[path]()
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
            if not self._authorized():
                return
            if post is None:
                self._send(405, "text/plain; charset=utf-8", b"Method Not Allowed\n", {"Allow": "GET, HEAD"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            code, content_type, body = post(self.path.split("?", 1)[0], self.rfile.read(length))
            self._send(code, content_type, body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # socketserver's default backlog of 5 refused a third of 100 scrapers arriving at once (federations,
        # several Prometheus replicas, a dashboard refresh): the kernel queues this many instead.
        request_queue_size = 1024
        address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET

        def finish_request(self, request, client_address):
            # The TLS handshake runs here, in the connection's own thread, so that one slow or
            # broken client cannot stall the accept loop and every other scrape with it.
            if config.ssl_context is not None:
                request.settimeout(10)
                try:
                    request = config.ssl_context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as e:
                    log.debug("TLS handshake with %s failed: %s", client_address, e)
                    return
            super().finish_request(request, client_address)

    try:
        server = Server(address, Handler)
    except OSError as e:
        host, port = address
        raise ConfigError(
            f"cannot listen on {host or '*'}:{port}: {e.strerror}; choose another --web.listen-address"
        ) from e
    threading.Thread(target=server.serve_forever, name="gpulens-http", daemon=True).start()
    return server

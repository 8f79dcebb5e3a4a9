"""`--web.config.file` takes the Prometheus exporter-toolkit format, so an SRE can reuse the file they
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

--web.listen-address is read here too.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.schema import Duration, Flag, Integer, ListOf, MapOf, Record, Text, validate
from gpulens.core.web.tls import CIPHER_SUITES, CLIENT_AUTH, CURVES, TLS_VERSIONS, server_tls


def parse_listen_address(value: str) -> tuple[str, int]:
    """':9848' -> ('', 9848); '127.0.0.1:0' -> ('127.0.0.1', 0); '[::1]:9848' -> ('::1', 9848)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--web.listen-address {value!r} is not HOST:PORT; for example ':9848' or '127.0.0.1:9848'")
    return host.strip("[]"), int(port)


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
                "client_auth_type": Text(choices=(*CLIENT_AUTH, "RequireAnyClientCert")),
                "client_ca_file": Text(valid=bool, what="a file name"),
                "client_allowed_sans": ListOf(Text(valid=bool, what="a DNS name, IP address, e-mail or URI")),
                "min_version": Text(choices=tuple(TLS_VERSIONS)),
                "max_version": Text(choices=tuple(TLS_VERSIONS)),
                "cipher_suites": ListOf(Text(choices=tuple(CIPHER_SUITES))),
                "prefer_server_cipher_suites": Flag(),
                "curve_preferences": ListOf(Text(choices=tuple(CURVES))),
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
            config.ssl_context, config.allowed_sans = server_tls(
                raw["tls_server_config"], Path(path).resolve().parent, where
            )
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

"""The exporter-toolkit web config, field by field, on gpulens' real server with certificates made by
openssl: every client-auth mode, the SAN allowlist, TLS version bounds, cipher suites; basic auth that
does the same work for every user; connections that cannot exhaust the server."""

import base64
import contextlib
import logging
import socket
import ssl
import struct
import time

import bcrypt
import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge

from gpulens.core import web
from gpulens.core.config import ConfigError
from gpulens.core.web import WebConfig, serve
from tests.helpers import certificate, certificate_authority

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; the server's certificate for 127.0.0.1; clients: Prometheus (signed, DNS SAN), another
    signed client with other SANs, and a self-signed one."""
    directory = certificate_authority(tmp_path_factory.mktemp("pki"))
    certificate(directory, "server", "/CN=server", "IP:127.0.0.1")
    certificate(directory, "prometheus", "/CN=prometheus", "DNS:prometheus.monitoring.svc,IP:10.0.0.7")
    certificate(directory, "intruder", "/CN=intruder", "DNS:intruder.example,email:x@example.com")
    certificate(directory, "selfsigned", "/CN=prometheus", "DNS:prometheus.monitoring.svc", ca=None)
    return directory


@contextlib.contextmanager
def serving(directory, text, **kwargs):
    """gpulens' server with the web config `text` (written beside the certificates), for the block; its
    address (host:port)."""
    (directory / "web.yml").write_text(text)
    registry = CollectorRegistry()
    Gauge("up_test", "a gauge", registry=registry).set(1)
    server = serve(
        registry,
        ("127.0.0.1", 0),
        WebConfig.load(str(directory / "web.yml")),
        title="test",
        health=lambda: (True, "ok"),
        **kwargs,
    )
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def refused(directory, text) -> str:
    """The error a web config `text` is refused with at start."""
    (directory / "web.yml").write_text(text)
    with pytest.raises(ConfigError) as error:
        WebConfig.load(str(directory / "web.yml"))
    return str(error.value)


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def handshake(pki, address, client=None, **context_options):
    """The cipher a TLS client (with the named client certificate) agrees on, or the error that ended it."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    for name, option in context_options.items():
        setattr(context, name, option) if name != "ciphers" else context.set_ciphers(option)
    if client:
        context.load_cert_chain(pki / f"{client}.crt", pki / f"{client}.key")
    host, port = address.split(":")
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        # TLS 1.3 sends the server's verdict on the client's certificate after the handshake: read it.
        answer = tls.recv(64)
        if not answer:
            raise ConnectionResetError("closed without an answer")
        assert answer.startswith(b"HTTP/1.1 200")
        return tls.cipher()[0]


def admitted(pki, address, client=None, **options) -> bool:
    try:
        handshake(pki, address, client, **options)
        return True
    except (ssl.SSLError, ConnectionError):
        return False


@pytest.mark.parametrize(
    "mode, expected",
    [
        # client: none, signed by the CA, self-signed
        ("NoClientCert", (True, True, True)),
        ("RequestClientCert", (True, True, True)),
        ("VerifyClientCertIfGiven", (True, True, False)),
        ("RequireAndVerifyClientCert", (False, True, False)),
    ],
)
def test_every_client_auth_mode_admits_whom_exporter_toolkit_admits(pki, mode, expected):
    with serving(pki, TLS + f"  client_auth_type: {mode}\n  client_ca_file: ca.crt\n") as address:
        assert tuple(admitted(pki, address, client) for client in (None, "prometheus", "selfsigned")) == expected


def test_require_any_client_cert_is_refused_naming_the_field_and_the_fix(pki):
    assert "client_auth_type RequireAnyClientCert admits certificates nobody verified" in refused(
        pki, TLS + "  client_auth_type: RequireAnyClientCert\n"
    )


def test_client_allowed_sans_admits_only_the_named_clients(pki):
    config = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    for allowed, expected in (("[prometheus.monitoring.svc]", (True, False)), ("['10.0.0.7']", (True, False)),
                              ("['x@example.com']", (False, True)), ("[nobody.example]", (False, False))):  # fmt: skip
        with serving(pki, config + f"  client_allowed_sans: {allowed}\n") as address:
            assert (admitted(pki, address, "prometheus"), admitted(pki, address, "intruder")) == expected, allowed
    assert "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert" in refused(
        pki, TLS + "  client_allowed_sans: [a]\n"
    )


def test_tls_version_bounds(pki):
    with serving(pki, TLS + "  min_version: TLS13\n") as address:
        assert not admitted(pki, address, maximum_version=ssl.TLSVersion.TLSv1_2)
        assert admitted(pki, address, minimum_version=ssl.TLSVersion.TLSv1_3)
    with serving(pki, TLS + "  max_version: TLS12\n") as address:
        assert not admitted(pki, address, minimum_version=ssl.TLSVersion.TLSv1_3)
        assert admitted(pki, address, maximum_version=ssl.TLSVersion.TLSv1_2)
    assert "min_version TLS13 is above max_version TLS12" in refused(
        pki, TLS + "  min_version: TLS13\n  max_version: TLS12\n"
    )


def test_cipher_suites_by_go_name(pki):
    config = TLS + "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n"
    with serving(pki, config) as address:
        assert handshake(pki, address) == "ECDHE-ECDSA-AES256-GCM-SHA384"
        assert not admitted(pki, address, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
    assert "cipher_suites[0]: expected one of TLS_RSA_WITH_AES_128_CBC_SHA" in refused(
        pki, TLS + "  cipher_suites: [TLS_INVENTED_WITH_NOTHING]\n"
    )


def test_inline_certificate_key_and_a_single_curve(pki):
    indent = "\n    ".join
    config = (
        f"tls_server_config:\n  cert: |\n    {indent((pki / 'server.crt').read_text().splitlines())}\n"
        f"  key: |\n    {indent((pki / 'server.key').read_text().splitlines())}\n"
        "  curve_preferences: [CurveP384]\n"
    )
    with serving(pki, config) as address:
        assert admitted(pki, address)
    assert "curve_preferences: Python's TLS sets one curve" in refused(
        pki, TLS + "  curve_preferences: [X25519, CurveP256]\n"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'http_server_config:\n  headers:\n    X-Frame-Options: "deny\\r\\nSet-Cookie: a=b"\n',
            "http_server_config.headers.X-Frame-Options: expected one of deny, sameorigin",
        ),
        (
            'http_server_config:\n  headers:\n    Content-Security-Policy: "none\\r\\nSet-Cookie: a=b"\n',
            "http_server_config.headers.Content-Security-Policy: expected a header value on one line",
        ),
        ("http_server_config:\n  headers:\n    X-Evil: a\n", "http_server_config.headers: unknown key(s) X-Evil"),
        (
            "basic_auth_users:\n  'a:b': '$2y$04$" + "a" * 53 + "'\n",
            "basic_auth_users: expected a user name without ':'",
        ),
        ("basic_auth_users:\n  alice: '$2y$04$short'\n", "basic_auth_users.alice: expected a bcrypt hash"),
        ("tls_server_config:\n  cert_file: a\n  key: '-----BEGIN'\n  key_file: b\n", "give key or key_file, not both"),
        ("rate_limit:\n  interval: soon\n", "rate_limit.interval: expected a duration such as 30s"),
    ],
)
def test_a_web_config_outside_the_format_is_refused_naming_the_key(tmp_path, text, message):
    error = refused(tmp_path, text)
    assert message in error and "Set-Cookie" not in error.split(message)[0]
    assert "$2y$04$short" not in error  # hashes and keys are never shown


def basic(user: str, password: bytes) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(user.encode() + b":" + password).decode()}


def test_basic_auth_costs_the_same_for_unknown_users_and_caches_every_answer(tmp_path, monkeypatch):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=5)).decode()
    runs: list[int] = []  # the cost of each bcrypt run
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda pw, h: runs.append(int(h.split(b"$")[2])) or real(pw, h))
    with serving(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n") as address:
        runs.clear()  # the start checked the hash once
        url = f"http://{address}/metrics"
        attempts = [("prometheus", b"s3cret", 200), ("prometheus", b"wrong", 401), ("nobody", b"s3cret", 401),
                    ("prometheus", b"s3cret" + b"x" * 80, 401)]  # fmt: skip
        for user, password, status in attempts:
            assert requests.get(url, headers=basic(user, password), timeout=5).status_code == status
        # One bcrypt run each at the users' cost, the unknown user's too: timing tells nothing.
        assert runs == [5, 5, 5, 5]
        for user, password, status in attempts:  # asked again: answered from the cache, good and bad
            assert requests.get(url, headers=basic(user, password), timeout=5).status_code == status
        assert runs == [5, 5, 5, 5]


def test_a_malformed_bcrypt_hash_is_refused_at_start(tmp_path):
    # The right shape, but bcrypt cannot read it: the salt's 22nd character can only be one of .Oeu.
    malformed = "$2y$04$" + "." * 21 + "x" + "." * 31
    error = refused(tmp_path, f"basic_auth_users:\n  alice: '{malformed}'\n")
    assert error.endswith("basic_auth_users.alice: not a valid bcrypt hash") and malformed not in error


def test_rate_limit_answers_429_but_never_to_the_probes(tmp_path):
    with serving(tmp_path, "rate_limit:\n  interval: 1h\n  burst: 2\n") as address:
        statuses = [requests.get(f"http://{address}/metrics", timeout=5).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert requests.get(f"http://{address}/healthz", timeout=5).status_code == 200


def test_an_idle_connection_is_closed_and_the_cap_closes_connections_past_it(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(web, "IDLE_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(web, "MAX_CONNECTIONS", 3)
    with serving(tmp_path, "") as address:
        host, port = address.split(":")
        idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(3)]
        time.sleep(0.2)
        extra = socket.create_connection((host, int(port)), timeout=5)
        assert extra.recv(1) == b""  # closed on arrival: three connections are all it serves
        assert "more than 3 connections at once: closing new ones" in caplog.text
        started = time.monotonic()
        assert [s.recv(1) for s in idle] == [b""] * 3  # each closed after half a second of silence
        assert time.monotonic() - started < 5
        assert requests.get(f"http://{address}/metrics", timeout=5).status_code == 200


def test_clients_hanging_up_mid_answer_are_quiet(tmp_path, capfd, caplog):
    body = b"x" * (16 << 20)  # larger than any socket buffer: the server is still writing when they hang up
    caplog.set_level(logging.INFO)
    with serving(tmp_path, "", routes={"/big": lambda _query: (200, "text/plain", body)}) as address:
        host, port = address.split(":")
        for _ in range(50):
            client = socket.create_connection((host, int(port)), timeout=5)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.sendall(b"GET /big HTTP/1.0\r\n\r\n")
            client.recv(1)
            client.close()  # a reset, mid-answer
        assert requests.get(f"http://{address}/healthz", timeout=5).status_code == 200
    assert "Traceback" not in capfd.readouterr().err
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []

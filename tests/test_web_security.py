"""The exporter-toolkit web config, field by field, on gpulens' real server with certificates made by
openssl: every client-auth mode, the SAN allowlist, TLS version bounds, cipher suites; basic auth that
does the same work for every user; connections that cannot exhaust the server."""

import base64
import contextlib
import logging
import socket
import ssl
import struct
import threading
import time

import bcrypt
import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge

from gpulens.core import web
from gpulens.core.config import ConfigError
from gpulens.core.web import WebConfig, auth, connections, serve
from tests.helpers import certificate, certificate_authority, wait_until

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
            "http_server_config.headers.Content-Security-Policy: expected a header value in ISO-8859-1 "
            "(HTTP/1.1 cannot send other characters) on one line",
        ),
        # Refused at start: sent as a header, it would fail every answer at run time.
        (
            "http_server_config:\n  headers:\n    Content-Security-Policy: \"default-src 'self' \u2014 strict\"\n",
            "http_server_config.headers.Content-Security-Policy: expected a header value in ISO-8859-1",
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


def connect(address: str) -> socket.socket:
    host, port = address.split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def until_closed(client: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    try:
        while chunk := client.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def closed_by_server(client: socket.socket) -> bool:
    """True once the server has closed the connection (after any answer it sent)."""
    until_closed(client)
    return True


def test_an_idle_kept_alive_connection_is_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(connections, "IDLE_TIMEOUT_SECONDS", 0.5)
    with serving(tmp_path, "") as address:
        client = connect(address)
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert closed_by_server(client) and time.monotonic() - started < 5  # after half a second of silence


def test_slowloris_is_shed_and_scrapes_and_probes_are_still_served(tmp_path, monkeypatch, caplog):
    """Every slot held by a client trickling an unfinished head: a scrape takes the oldest one's slot,
    and a head that is not whole HEAD_TIMEOUT_SECONDS after its first byte is ended however it trickles."""
    monkeypatch.setattr(connections, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(connections, "HEAD_TIMEOUT_SECONDS", 1.0)
    with serving(tmp_path, "") as address:
        attackers = [connect(address) for _ in range(3)]
        for attacker in attackers:
            attacker.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert requests.get(f"http://{address}/metrics", timeout=5).status_code == 200
        assert requests.get(f"http://{address}/healthz", timeout=5).status_code == 200
        assert "3 connections open at once: closing the oldest idle or unfinished ones" in caplog.text
        assert closed_by_server(attackers[0])  # the oldest, shed for the scrape
        # One byte every 0.2 s, each well within the idle timeout: ended by the head's own deadline.
        trickler, started = connect(address), time.monotonic()
        trickler.sendall(b"GET /metrics HTTP/1.1\r\n")
        with pytest.raises(OSError):
            for _ in range(50):  # 10 s at most
                trickler.sendall(b"X")
                time.sleep(0.2)  # the attack's own pace
        assert time.monotonic() - started < 5
        # Each attacker closed once, for a new connection or by its head's deadline (the trickler by its
        # deadline: nothing arrived meanwhile); a scrape's own idle connection may have made room too.
        counts = shed(address)
        assert counts["busy"] == 0 and counts["full"] >= 1 and counts["slow_head"] >= 1
        assert counts["full"] + counts["slow_head"] >= 4
        assert "fewer than 3 connections open again" in caplog.text  # said once the attack is over
        caplog.clear()
        second = [connect(address) for _ in range(3)]
        for attacker in second:
            attacker.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert requests.get(f"http://{address}/metrics", timeout=5).status_code == 200
        assert (
            "3 connections open at once: closing the oldest idle or unfinished ones" in caplog.text
        )  # a second attack is heard
        assert closed_by_server(second[0])


def shed(address: str) -> dict[str, int]:
    """gpulens_http_connections_shed_total by reason, as the server's /metrics says."""
    text = requests.get(f"http://{address}/metrics", timeout=5).text
    return {
        reason: int(float(line.rpartition(" ")[2]))
        for reason in web.SHED_REASONS
        for line in text.splitlines()
        if line.startswith(f'gpulens_http_connections_shed_total{{reason="{reason}"}}')
    }


def test_a_full_server_of_busy_answers_closes_new_connections(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(connections, "MAX_CONNECTIONS", 2)
    release, entered = threading.Event(), []

    def slow(_query):
        entered.append(1)
        release.wait(10)
        return 200, "text/plain", b"done\n"

    with serving(tmp_path, "", routes={"/slow": slow}) as address:
        busy = [connect(address) for _ in range(2)]
        for client in busy:
            client.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: len(entered) == 2, timeout=5, what="both answers under way")
        assert connect(address).recv(1) == b""  # closed on arrival: no slot is idle or unfinished
        assert "2 connections busy at once: closing new ones" in caplog.text
        release.set()
        assert [client.recv(4096).split(b"\r\n")[0] for client in busy] == [b"HTTP/1.1 200 OK"] * 2
        assert shed(address) == {"full": 1, "busy": 1, "slow_head": 0}  # the scrape took an idle slot


def test_a_head_past_its_byte_bound_is_refused_without_buffering_it(tmp_path, caplog):
    """Past 16 KiB, in header lines or in the request line alone (whose refusal had no request to answer and
    logged two tracebacks a request, without credentials): 431, and nothing logged above debug."""
    with serving(tmp_path, "") as address, caplog.at_level(logging.DEBUG, logger="gpulens"):
        client = connect(address)
        client.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 1000 + b"\r\n")
        for _ in range(16):  # 16 KiB in lines of 1 KiB: under the library's 64 KiB a line, over the head's bound
            client.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        answer = client.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431") and b"Request head larger than 16384 bytes" in answer
        long_line = connect(address)
        long_line.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = until_closed(long_line)
        assert answer.startswith(b"HTTP/1.1 431") and b"Request head larger than 16384 bytes" in answer
        assert requests.get(f"http://{address}/metrics", timeout=5).status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG] == []


def test_a_body_cannot_ride_into_the_next_request(tmp_path):
    """A GET with a body is refused and its connection closed: the body is never read as a request."""
    with serving(tmp_path, "", routes={"/secret": lambda _query: (200, "text/plain", b"secret\n")}) as address:
        client = connect(address)
        smuggled = b"GET /secret HTTP/1.1\r\nHost: x\r\n\r\n"
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled) + smuggled)
        answers = until_closed(client)
        assert answers.startswith(b"HTTP/1.1 400") and answers.count(b"HTTP/1.1") == 1
        assert b"A GET request carries no body" in answers and b"secret" not in answers


@pytest.mark.parametrize(
    "headers, status, message",
    [
        ({"Content-Length": "-1"}, 400, b"Content-Length must be one number of bytes"),
        ({"Content-Length": "12abc"}, 400, b"Content-Length must be one number of bytes"),
        ({"Content-Length": "99999999999999999999"}, 400, b"Content-Length must be one number of bytes"),
        ({"Content-Length": "2000000"}, 413, b"A body of 1048576 bytes at most"),
        ({"Transfer-Encoding": "chunked"}, 411, b"Send the body with a Content-Length"),
        ({}, 411, b"Send the body with a Content-Length"),
    ],
)
def test_odd_bodies_are_refused_naming_the_fix(tmp_path, headers, status, message):
    received = []
    post = lambda path, body: received.append(body) or (200, "text/plain", b"ok\n")  # noqa: E731
    with serving(tmp_path, "", post=post) as address:
        client = connect(address)
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        client.sendall(f"POST /alerts HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        answer = until_closed(client)
        assert answer.startswith(b"HTTP/1.1 %d" % status) and message in answer and received == []
        ok = requests.post(f"http://{address}/alerts", data=b"{}", timeout=5)
        assert ok.status_code == 200 and received == [b"{}"]


def test_a_bcrypt_flood_never_slows_the_scraper_nor_the_probes(tmp_path, monkeypatch):
    """Wrong passwords do not evict the scraper's verified credentials, probes never run bcrypt, and no
    more than BCRYPT_WAITING requests wait for it (one here): the rest are told to retry (429) at once."""
    monkeypatch.setattr(auth, "BCRYPT_WAITING", 1)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    real, runs, gate = bcrypt.checkpw, [], threading.Event()
    gate.set()

    def checkpw(password, hashed_password):
        runs.append(password)
        gate.wait(10)
        return real(password, hashed_password)

    monkeypatch.setattr(bcrypt, "checkpw", checkpw)
    with serving(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n") as address:
        url = f"http://{address}"
        assert requests.get(f"{url}/metrics", headers=basic("prometheus", b"s3cret"), timeout=5).status_code == 200
        runs.clear()
        for i in range(3 * auth.Authenticator.CACHE_SIZE):  # wrong passwords, each new
            assert requests.get(f"{url}/metrics", headers=basic("prometheus", b"%d" % i), timeout=5).status_code == 401
        assert len(runs) == 3 * auth.Authenticator.CACHE_SIZE
        runs.clear()
        assert requests.get(f"{url}/metrics", headers=basic("prometheus", b"s3cret"), timeout=5).status_code == 200
        for probe in ("/healthz", "/readyz"):
            assert requests.get(url + probe, headers=basic("prometheus", b"wrong"), timeout=5).text == "ok\n"
        assert runs == []  # the scraper from the cache; the probes never ask bcrypt
        # bcrypt held up: the one request it may hold waits, the next is refused at once.
        gate.clear()
        waiting = threading.Thread(target=requests.get, args=(f"{url}/metrics",), kwargs={"headers": basic("x", b"y")})
        waiting.start()
        wait_until(lambda: len(runs) == 1, timeout=5, what="one bcrypt run under way")
        refused_now = requests.get(f"{url}/metrics", headers=basic("y", b"z"), timeout=5)
        assert (refused_now.status_code, refused_now.headers["Retry-After"]) == (429, "1")
        assert requests.get(f"{url}/metrics", headers=basic("prometheus", b"s3cret"), timeout=5).status_code == 200
        gate.set()
        waiting.join(10)


def test_checks_of_every_cost_take_as_long_as_the_costliest():
    """Users of different bcrypt costs are not told apart by time: a cheaper check is padded (with a
    sleep: no CPU) to the time the costliest one takes. Time here is bcrypt's own count of rounds."""
    now, slept = [0.0], []
    real = bcrypt.checkpw

    def clock():
        return now[0]

    def counting(password, hashed):
        now[0] += 2 ** int(hashed.split(b"$")[2])  # bcrypt's work: 2^cost rounds
        return real(password, hashed)

    users = {
        "cheap": bcrypt.hashpw(b"a", bcrypt.gensalt(rounds=4)),
        "dear": bcrypt.hashpw(b"b", bcrypt.gensalt(rounds=6)),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bcrypt, "checkpw", counting)
        checker = auth.Authenticator(users, clock=clock, sleep=slept.append)
        assert checker.slowest == 2**6  # measured on the decoy, at the highest cost
        for user, password in (("cheap", b"a"), ("dear", b"b"), ("nobody", b"c"), ("cheap", b"wrong")):
            slept.clear()
            started = now[0]
            checker.allowed("Basic " + base64.b64encode(f"{user}:".encode() + password).decode())
            assert now[0] - started + sum(slept) == 2**6, user


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


def test_a_post_asking_to_close_is_closed_once_answered(tmp_path):
    """`Connection: close` on a POST (Alertmanager's webhooks, curl) was held open until the idle timeout."""
    post = lambda path, body: (200, "text/plain", b"ok\n")  # noqa: E731
    with serving(tmp_path, "", post=post) as address:
        client = connect(address)  # a recv waits 5 s at most: a connection held open fails the test
        client.sendall(b"POST /alerts HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
        answer = until_closed(client)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\nok\n")
        # Kept alive where not asked to close: a second request on the same connection is answered.
        client = connect(address)
        request = b"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        client.sendall(request + request.replace(b"Host: x", b"Host: x\r\nConnection: close"))
        assert until_closed(client).count(b"HTTP/1.1 200") == 2


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        # HTTP/0.9: no version, and an answer of a bare body, without a status or headers.
        (b"GET /metrics\r\n", b"HTTP/1.1 400 HTTP/0.9 is not served: send HTTP/1.1 or HTTP/1.0\r\n"),
        # A malformed request line is answered with a status line too.
        (b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", b"HTTP/1.1 400 "),
        # The absolute form, which RFC 9112 has servers accept (proxies send it).
        (b"GET http://node-a:9848/healthz HTTP/1.1\r\nHost: node-a:9848\r\n\r\n", b"HTTP/1.1 200 OK\r\n"),
        (b"GET HTTPS://node-a/healthz?x=1 HTTP/1.1\r\nHost: node-a\r\nConnection: close\r\n\r\n", b"HTTP/1.1 200 OK"),
    ],
)
def test_request_lines_are_read_as_http_1_1_reads_them(tmp_path, line, answer):
    with serving(tmp_path, "") as address:
        client = connect(address)
        client.sendall(line)
        received = client.recv(65536)
        assert received.startswith(answer), received

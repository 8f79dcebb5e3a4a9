"""The weekly digest (issue 75, part 4): two teams' figures this period against the last, hand-computed from a
fleet a real Prometheus holds (dcgm-exporter's series and kube-state-metrics', backfilled with promtool); written
as Markdown and HTML, e-mailed through a real SMTP server (aiosmtpd, STARTTLS and a login), posted to real HTTP
receivers in Slack's and Microsoft Teams' formats, a failed delivery retried and the others made all the same.

The fleet, two days from 2025-11-10 00:00 UTC sampled every minute, on H100s at $4 a GPU-hour (--prices), with
one-day periods (the digest of 2025-11-11 against 2025-11-10):
- team search: the Deployment ranker, one replica (GPU 0) both days, scaled to two at noon of the second (GPU 1
  from then): its GPUs busy 90% of the time, SMs 90% active: 24 GPU-hours ($96) the first day, 36 ($144) the
  second, nothing wasted;
- team research: the CronJob nightly's run of the first day trains on GPU 2 all day (busy 100%, SMs 80%
  active); its run of the second day holds GPU 2 all day and does nothing: $96 both days, $96 of it wasted the
  second.

kube-state-metrics says what the cluster allocated, and it is not quite what the GPU series saw: ranker's second
pod was scheduled at 11:00 (Pending on the node, pulling its image) an hour before its GPU's first sample, and
research's notebook-z requested a GPU all the second day on a node whose exporter was never scraped. OpenCost
prices the node at $5 a GPU-hour where gpulens' price file says $4.
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest
import requests

from gpulens.analyzer.inputs import frame as fr
from tests import store_history as history
from tests.helpers import (
    BackfilledPrometheus,
    certificate,
    certificate_authority,
    gpulens,
    report_json,
    require_binary,
)

pytestmark = pytest.mark.slow

START = 1_762_732_800.0  # 2025-11-10T00:00:00Z
DAY = 86400.0
STEP = 60.0
TIMES = START + STEP * np.arange(int(2 * DAY / STEP))
PRICE = 4.0
MODEL = "NVIDIA H100 80GB HBM3"
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.3:8080"}
NOON = START + DAY + 12 * 3600
#: ranker-7d9f-b's pod on its node from here (Pending an hour, then Running).
SCHEDULED = NOON - 3600
OPENCOST_PRICE = 5.0
#: Each pod: (namespace, pod, GPU, first, end, busy, SM activity, owner kind, owner name, team).
PODS = [
    ("search", "ranker-7d9f-a", 0, START, START + 2 * DAY, 0.9, 0.9, "ReplicaSet", "ranker-7d9f", "search"),
    ("search", "ranker-7d9f-b", 1, NOON, START + 2 * DAY, 0.9, 0.9, "ReplicaSet", "ranker-7d9f", "search"),
    ("research", "nightly-1-x", 2, START, START + DAY, 1.0, 0.8, "Job", "nightly-1", "research"),
    ("research", "nightly-2-y", 2, START + DAY, START + 2 * DAY, 0.0, 0.0, "Job", "nightly-2", "research"),
]
PERIODS = ["--period", "1d", "--until", "2025-11-12T00:00:00Z"]


def _trace() -> pd.DataFrame:
    rows = []
    for namespace, pod, gpu, first, end, busy, sm, *_ in PODS:
        for t in TIMES[(TIMES >= first) & (TIMES < end)]:
            rows.append(
                {
                    "timestamp": float(t),
                    "gpu": f"GPU-{gpu}",
                    "node": history.NODE,
                    "gpu_model": MODEL,
                    "namespace": namespace,
                    "pod": pod,
                    "container": "main",
                    "gpu_util": busy,
                    "sm_active": sm,
                    "memory_used_bytes": 30 * 2**30,
                    "memory_total_bytes": 80 * 2**30,
                    "power_watts": 100 + 500 * busy,
                }
            )
    return fr.normalize(pd.DataFrame(rows))


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, **KSM}.items()) + "}"


def _kube_state() -> dict[str, list]:
    """Each pod's owner and team label while it runs, the owners' owners, and ranker's replicas."""
    out: dict[str, list] = {}
    for namespace, pod, _, first, end, _, _, kind, owner, team in PODS:
        alive = TIMES[(TIMES >= first) & (TIMES < end)]
        own = {"namespace": namespace, "pod": pod, "owner_kind": kind, "owner_name": owner}
        out.setdefault("kube_pod_owner", []).extend(
            (_labels({**own, "owner_is_controller": "true"}), t, 1.0) for t in alive
        )
        pod_labels = _labels({"namespace": namespace, "pod": pod, "label_team": team})
        out.setdefault("kube_pod_labels", []).extend((pod_labels, t, 1.0) for t in alive)
    ranker = _labels(
        {"namespace": "search", "replicaset": "ranker-7d9f", "owner_kind": "Deployment", "owner_name": "ranker"}
    )
    out["kube_replicaset_owner"] = [(ranker, t, 1.0) for t in TIMES]
    jobs = [("nightly-1", TIMES < START + DAY), ("nightly-2", TIMES >= START + DAY)]
    out["kube_job_owner"] = [
        (_labels({"namespace": "research", "job_name": job, "owner_kind": "CronJob", "owner_name": "nightly"}), t, 1.0)
        for job, alive in jobs
        for t in TIMES[alive]
    ]
    replicas = _labels({"namespace": "search", "deployment": "ranker"})
    out["kube_deployment_spec_replicas"] = [(replicas, t, 2.0 if t >= NOON else 1.0) for t in TIMES]
    # What the cluster allocated: each pod's GPU request and phase while it is on its node.
    placed = [(namespace, pod, first, end, "gpu-node-a") for namespace, pod, _, first, end, *_ in PODS]
    placed = [
        (ns, pod, SCHEDULED if pod == "ranker-7d9f-b" else first, end, node) for ns, pod, first, end, node in placed
    ]
    placed.append(("research", "notebook-z", START + DAY, START + 2 * DAY, "gpu-node-b"))
    for namespace, pod, first, end, node in placed:
        on = TIMES[(TIMES >= first) & (TIMES < end)]
        request = {"namespace": namespace, "pod": pod, "container": "main", "node": node}
        request |= {"resource": "nvidia_com_gpu", "unit": "integer"}
        out.setdefault("kube_pod_container_resource_requests", []).extend((_labels(request), t, 1.0) for t in on)
        for t in on:
            phase = "Pending" if pod == "ranker-7d9f-b" and t < NOON else "Running"
            labels = _labels({"namespace": namespace, "pod": pod, "phase": phase})
            out.setdefault("kube_pod_status_phase", []).append((labels, t, 1.0))
    out["kube_node_status_allocatable"] = [
        (_labels({"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}), t, 4.0)
        for node in ("gpu-node-a", "gpu-node-b")
        for t in TIMES
    ]
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("digest")
    families = {**history.series_lines(_trace(), "dcgm-exported"), **_kube_state()}
    opencost = '{job="opencost",instance="10.0.0.5:9003",node="gpu-node-a"}'
    families["node_gpu_hourly_cost"] = [(opencost, t, OPENCOST_PRICE) for t in TIMES]
    prices = tmp / "prices.yaml"
    prices.write_text(f"H100: {PRICE}\n")
    prometheus = BackfilledPrometheus(tmp / "prometheus", history.families_openmetrics(families))
    try:
        yield {"prometheus": prometheus.url, "prices": str(prices)}
    finally:
        prometheus.stop()


def _digest(world, *args: str) -> subprocess.CompletedProcess:
    return gpulens(
        "digest",
        *("--prometheus", world["prometheus"], "--prometheus.step", "1m", "--team-label", "team"),
        *("--prices", world["prices"], *PERIODS, *args),
        timeout=300,
    )


def _report(world, until: str) -> dict:
    """The JSON report of both days, to --until, read from the world's store as the digest reads it."""
    return report_json(
        *("--prometheus", world["prometheus"], "--prometheus.step", "1m", "--team-label", "team"),
        *("--prices", world["prices"], "--since", "2025-11-10T00:00:00Z", "--until", until),
    )


#: Hand-computed (the module's docstring): each team's rows this period and the last.
FIGURES = {
    "search": [
        ("GPU-hours held", "36.0", "24.0"),
        ("cost", "$144.00", "$96.00"),
        ("wasted", "$0.00", "$0.00"),
        ("GPU-hours wasted", "0.0", "0.0"),
        ("busy (a kernel ran)", "90.0%", "90.0%"),
        ("SMs active", "90.0%", "90.0%"),
        ("tensor FLOPs of peak (OFU)", "not read", "not read"),
    ],
    "research": [
        ("GPU-hours held", "24.0", "24.0"),
        ("cost", "$96.00", "$96.00"),
        ("wasted", "$96.00", "$0.00"),
        ("GPU-hours wasted", "24.0", "0.0"),
        ("busy (a kernel ran)", "0.0%", "100.0%"),
        ("SMs active", "0.0%", "80.0%"),
        ("tensor FLOPs of peak (OFU)", "not read", "not read"),
    ],
}


def _table(markdown: str) -> list[tuple[str, str, str]]:
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (.+?) \|\r?$", markdown, re.M)
    return [(what.replace("\\", ""), now, before) for what, now, before in rows]


def test_each_teams_digest_says_its_figures_against_the_last_period_and_what_moved(world, tmp_path):
    done = _digest(world, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "2 teams' digests written" in done.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["research.html", "research.md", "search.html", "search.md"]
    # As a person reads the Markdown: its escapes (of |, *, _, ...) dropped.
    search, research = (
        (tmp_path / "out" / f"{team}.md").read_text().replace("\\", "") for team in ("search", "research")
    )
    assert _table(search) == FIGURES["search"]
    assert _table(research) == FIGURES["research"]
    assert "2025-11-11 to 2025-11-11 (UTC), against the 1 d before" in search
    # What moved: ranker's cost by its second replica, healthy; nightly's, not at all, but its waste by $96: idle,
    # with the fix its verdict gives.
    assert "- search/Deployment/ranker: $96.00 -> $144.00 (+$48.00), 24.0 -> 36.0 GPU-h; healthy (2 of 2 pods)" in (
        search
    )
    moved = re.search(r"^- research/CronJob/nightly: (.+)$", research, re.M)
    assert moved is not None, research
    said = "$96.00 -> $96.00 (+$0.00), 24.0 -> 24.0 GPU-h; idle (1 of 1 pod), wasted $0.00 -> $96.00: "
    assert moved.group(1).startswith(said)
    # This period's charges checked: ranker's second pod requested its GPU an hour before its first sample (37
    # GPU-hours requested, 36 held); OpenCost's $5 an hour against gpulens' $4.
    assert (
        "- Requests: the pods requested 37.0 GPU-h on their nodes where the GPU series saw 36.0 held: +1.0 GPU-h "
        in (search)
    )
    assert (
        "- OpenCost: it prices the 36.0 GPU-h on nodes it prices at $180.00, gpulens at $144.00: +36.00 (+25.0%)"
        in (search)
    )
    assert "- Requests: kube-state-metrics' GPU requests agree: 24.0 GPU-h requested, 24.0 held." in research
    # What changed: ranker's second replica at noon, found in kube-state-metrics.
    assert "- search/Deployment/ranker: replicas 1 -> 2 at 2025-11-11T12:00:00Z:" in search
    # The plan's action on the idle job, as the report's plan over the same span gives it.
    report = _report(world, "2025-11-12T00:00:00Z")
    [action] = [a for a in report["plan"] if a["owner"] == "research/CronJob/nightly"]
    [verdict] = [v for v in report["verdicts"] if v["pod"] == "nightly-2-y"]
    assert moved.group(1).endswith(verdict["recommendation"])
    assert action["what"] == "release its GPUs (scale to zero, or end the job)"
    # Its one H100 released: $4 x 24 h x 30 days.
    assert f"- research/CronJob/nightly: {action['what']} (1 -> 0 GPUs): $2,880 per 30 days" in research


def test_showback_says_by_how_much_the_clusters_requests_and_opencosts_prices_disagree(world):
    """The report's charges against kube-state-metrics' requests and OpenCost's prices, hand-computed: search
    requested 37 GPU-hours the second day where its GPUs were sampled 36 (the hour its pod was Pending on the node);
    notebook-z requested 24 that no GPU series names; OpenCost charges $5 for each GPU-hour gpulens charges $4."""
    report = _report(world, "2025-11-11T23:59:00Z")
    charges = {(c["day"], c["workload"]): c for c in report["showback"]["charges"]}
    search = charges[("2025-11-11", "search/Deployment/ranker")]
    assert (search["gpu_hours"], search["requested_gpu_hours"]) == (36.0, 37.0)
    assert (search["opencost_gpu_hours"], search["opencost_cost"], search["cost"]) == (36.0, 36 * 5.0, 36 * 4.0)
    nightly = charges[("2025-11-11", "research/CronJob/nightly")]
    assert (nightly["gpu_hours"], nightly["requested_gpu_hours"]) == (24.0, 24.0)
    held = sum(c["gpu_hours"] for c in charges.values())
    assert held == 24 + 24 + 36 + 24
    assert report["showback"]["checks"] == [
        f"Requests: the pods requested {held + 1:,.1f} GPU-h on their nodes where the GPU series saw {held:,.1f} held: "
        f"+1.0 GPU-h (+{1 / held:.1%}); more requested than held is time no exporter sampled (an exporter down, GPUs "
        "not attributed to their pods), less is time a pod held GPUs without a request (by team: search +1.0).",
        "Requests: 1 pod requested 24.0 GPU-h that no GPU series names, so no charge holds (research/notebook-z): "
        "their nodes' exporters were not read, or their GPUs were not attributed to them.",
        f"OpenCost: it prices the {held:,.1f} GPU-h on nodes it prices at ${held * OPENCOST_PRICE:,.2f}, gpulens at "
        f"${held * PRICE:,.2f}: +{held:,.2f} (+25.0%); to bill at one price, give gpulens OpenCost's prices "
        "(--prices) or OpenCost gpulens' (docs/showback.md).",
    ]


def test_a_digest_is_rendered_as_its_markdown_says(world, tmp_path):
    """The HTML digest, rendered by headless Chromium, holds the same figures, sections and links."""
    chromium = require_binary("chromium")
    link = "https://gpulens.example.com/"
    assert _digest(world, "--out", str(tmp_path), "--digest.link", link, "--digest.team", "research").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["research.html", "research.md"]
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"]
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}"]
    page = (tmp_path / "research.html").as_uri()
    dom = subprocess.run([*browser, page], capture_output=True, text=True, timeout=120, check=True).stdout
    cells = re.findall(r"<tr><td>([^<]+)</td><td class=\"n\">([^<]+)</td><td class=\"n\">([^<]+)</td></tr>", dom)
    assert [tuple(c.replace("&amp;", "&") for c in row) for row in cells] == FIGURES["research"]
    assert re.findall(r"<h2>([^<]+)</h2>", dom) == [
        "What moved, and why",
        "What changed",
        "What to change",
        "What the figures were checked against",
        "On the analyzer's page",
    ]
    assert re.findall(r'<a href="([^"]+)">', dom) == [f"{link}#changes", f"{link}#waste", f"{link}#units"]


def test_the_digests_links_open_the_live_analyzers_sections(world, tmp_path):
    """Each link of a digest opens the live analyzer's page (served from the same store) at a section it has."""
    from tests.test_analyzer_service import start_analyzer

    proc, url = start_analyzer(["--input.prometheus", world["prometheus"]])
    try:
        done = _digest(world, "--digest.link", url + "/", "--digest.team", "search")
        assert done.returncode == 0, done.stderr
        links = re.findall(r"\]\(([^)]+)\)", done.stdout)
        assert [link.split("#")[1] for link in links] == ["changes", "waste", "units"]
        for link in links:
            page, anchor = link.split("#")
            answer = requests.get(page, timeout=10)
            assert answer.status_code == 200
            assert re.search(f"id={anchor}[ >]", answer.text), anchor
    finally:
        proc.stop()


class _Receiver(BaseHTTPRequestHandler):
    """A webhook: records each POST's path and JSON, and answers with the next status its path has queued."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.posts.append((self.path, body))  # type: ignore[attr-defined]
        queued = server.statuses.get(self.path, [])  # type: ignore[attr-defined]
        status = queued.pop(0) if queued else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.posts, server.statuses = [], {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def smtp_server(tmp_path):
    """aiosmtpd on a free port: STARTTLS with a certificate of a CA of its own, a login required (user
    gpulens, password s3cret), each message received kept."""
    import ssl

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    certificate_authority(tmp_path)
    certificate(tmp_path, "smtp", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "smtp.crt", tmp_path / "smtp.key")
    received: list = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
            received.append(envelope)
            return "250 OK"

    def login(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"gpulens" and auth_data.password == b"s3cret"
        return AuthResult(success=ok, handled=False)  # not handled: aiosmtpd answers 535 itself

    # aiosmtpd's Controller connects to its port to know it is serving: it must be given one, not 0.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(
        Handler(),
        hostname="127.0.0.1",
        port=port,
        tls_context=context,
        require_starttls=True,
        auth_required=True,
        authenticator=login,
    )
    controller.start()
    try:
        yield {"port": controller.port, "ca": tmp_path / "ca.crt", "received": received}
    finally:
        controller.stop()


def test_digests_are_delivered_by_email_slack_and_teams_and_a_failure_leaves_the_others(
    world, tmp_path, smtp_server, receiver
):
    chromium = require_binary("chromium")
    base = f"http://127.0.0.1:{receiver.server_port}"
    (tmp_path / "password").write_text("s3cret\n")
    (tmp_path / "slack-url").write_text(f"{base}/slack/search\n")
    # Slack fails once (a 503) and takes the retry; research's Teams URL is gone (404): not retried.
    receiver.statuses = {"/slack/search": [503], "/teams/research": [404]}
    (tmp_path / "digest.yaml").write_text(
        f"""
smtp:
  server: 127.0.0.1:{smtp_server["port"]}
  tls: starttls
  from: gpulens@example.com
  username: gpulens
  password_file: {tmp_path / "password"}
  ca_file: {smtp_server["ca"]}
teams:
  search:
    email: [search-leads@example.com]
    slack_url_file: {tmp_path / "slack-url"}
    msteams_url: {base}/teams/search
  research:
    msteams_url: {base}/teams/research
"""
    )
    done = _digest(
        world,
        *("--digest.config", str(tmp_path / "digest.yaml"), "--digest.retry-wait", "0.01"),
        *("--digest.link", "https://gpulens.example.com/"),
    )
    assert done.returncode == 1, done.stderr
    assert "3 of 4 deliveries made; failed after retries: research by msteams (the webhook answered 404: ok)" in (
        done.stderr
    )
    assert "digest of search, slack: attempt 1 failed: the webhook answered 503: ok; trying again in 0.01 s" in (
        done.stderr
    )
    # The e-mail: one message to search's leads, its text the Markdown, its HTML part the page.
    [envelope] = smtp_server["received"]
    assert envelope.rcpt_tos == ["search-leads@example.com"]
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert message["Subject"] == "gpulens: search's GPUs cost $144 (+$48.00 on the period before), $0 wasted"
    assert (message["From"], message["To"]) == ("gpulens@example.com", "search-leads@example.com")
    assert message["Date"] and re.fullmatch(r"<.+@example\.com>", message["Message-ID"])
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(("plain",)).get_content()
    assert _table(text) == FIGURES["search"]
    page = tmp_path / "mail.html"
    page.write_text(message.get_body(("html",)).get_content())
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"]
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    assert '<td>cost</td><td class="n">$144.00</td><td class="n">$96.00</td>' in dom
    # The webhooks: Slack's twice (the 503, then delivered), Teams' once each.
    paths = [path for path, _ in receiver.posts]
    assert sorted(paths) == ["/slack/search", "/slack/search", "/teams/research", "/teams/search"]
    slack = [body for path, body in receiver.posts if path == "/slack/search"][-1]
    assert slack["text"] == message["Subject"]
    assert slack["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "search: GPUs this period"}}
    assert "cost: *$144.00* (before: $96.00)" in slack["blocks"][1]["text"]["text"]
    assert "<https://gpulens.example.com/#changes|what changed>" in slack["blocks"][-1]["text"]["text"]
    teams = next(body for path, body in receiver.posts if path == "/teams/search")
    [attachment] = teams["attachments"]
    assert (teams["type"], attachment["contentType"]) == ("message", "application/vnd.microsoft.card.adaptive")
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    facts = {f["title"]: f["value"] for f in card["body"][2]["facts"]}
    assert facts["wasted"] == "$0.00 (before: $0.00)" and facts["cost"] == "$144.00 (before: $96.00)"
    assert [a["url"] for a in card["actions"]] == [
        f"https://gpulens.example.com/#{s}" for s in ("changes", "waste", "units")
    ]


def test_a_wrong_login_is_said_once_and_not_retried(world, tmp_path, smtp_server):
    (tmp_path / "password").write_text("wrong\n")
    (tmp_path / "digest.yaml").write_text(
        f"smtp: {{server: '127.0.0.1:{smtp_server['port']}', from: gpulens@example.com, username: gpulens, "
        f"password_file: '{tmp_path / 'password'}', ca_file: '{smtp_server['ca']}'}}\n"
        "default: {email: [platform@example.com]}\n"
    )
    done = _digest(world, "--digest.config", str(tmp_path / "digest.yaml"), "--digest.team", "search")
    assert done.returncode == 1
    assert (
        "0 of 1 deliveries made; failed after retries: search by email to platform@example.com (the SMTP server "
        "refused the login of gpulens: 535)" in done.stderr
    )
    assert done.stderr.count("attempt") == 1
    assert smtp_server["received"] == []


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ("teams: {search: {email: [a@example.com]}}\n", "teams.search.email: e-mail needs an smtp server"),
        (
            "smtp: {server: 'localhost:25', tls: none, from: g@example.com, username: u, password_file: /dev/null}\n",
            "smtp.username with tls none would send the password in clear",
        ),
        ("teams: {search: {slack_url_file: /nonexistent/url}}\n", "teams.search.slack_url_file /nonexistent/url: "),
        ("teams: {search: {slak_url: x}}\n", "unknown key(s) slak_url; did you mean slack_url?"),
        ("teams: {search: {slack_url: hooks.slack.com/x}}\n", "teams.search.slack_url: expected an http(s) URL"),
    ],
)
def test_a_wrong_settings_file_is_refused_before_anything_is_read(tmp_path, settings, said):
    (tmp_path / "digest.yaml").write_text(settings)
    done = gpulens(
        "digest",
        "--prometheus",
        "http://127.0.0.1:9",
        "--digest.config",
        str(tmp_path / "digest.yaml"),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--period", "36h"], "--period 36h: give whole days (7d)"),
        (
            ["--until", "2025-11-12T06:00:00Z"],
            "--until 2025-11-12T06:00:00Z: give a UTC midnight (2025-11-12T00:00:00Z)",
        ),
    ],
)
def test_periods_that_would_split_a_day_are_refused(args, said):
    done = gpulens("digest", "--prometheus", "http://127.0.0.1:9", *args)
    assert done.returncode == 2 and said in done.stderr

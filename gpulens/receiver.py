"""A webhook receiver for Alertmanager that a demo user can watch: it keeps every notification,
logs one line per alert, and shows them at / (a page: each notification with when it arrived, its group,
and each alert's start, end, summary, the analyzer's verdict and its runbook and dashboard links), /text
(one line per alert) and /api/v1/notifications (JSON).

`gpulens demo` runs it in-process; the compose demo runs it as `gpulens alert-receiver`. Alertmanager's
webhook payload (version 4) is documented at
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import sys
import threading
import time

from prometheus_client import CollectorRegistry

from gpulens.core.config import ConfigError
from gpulens.core.flags import Subcommands
from gpulens.core.web import WebConfig, parse_listen_address, serve

log = logging.getLogger("gpulens.receiver")

#: Notifications kept; older ones are dropped (a demo runs for hours at most).
KEEP = 1000


class AlertReceiver:
    """Receives Alertmanager webhooks on POST /alerts/<receiver> (the demo routes `pages` and
    `tickets` there) and keeps them, newest last. Serves from the moment it is made."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.notifications: list[dict] = []
        self._lock = threading.Lock()
        routes = {
            "/": lambda _query: (200, "text/html; charset=utf-8", self.page().encode()),
            "/text": lambda _query: (200, "text/plain; charset=utf-8", self.text().encode()),
            "/api/v1/notifications": lambda _query: (200, "application/json", json.dumps(self.snapshot()).encode()),
        }
        self.server = serve(
            CollectorRegistry(auto_describe=False),
            (host, port),
            WebConfig(),
            title="gpulens alert receiver",
            health=lambda: (True, "ok"),
            routes=routes,
            post=self._receive,
        )
        self.url = f"http://{host}:{self.server.server_address[1]}"

    def _receive(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
                raise ValueError("no 'alerts' list")
        except ValueError as e:
            return 400, "text/plain", f"not an Alertmanager webhook payload: {e}\n".encode()
        payload["path"] = path
        payload["received"] = time.time()
        self.add(payload)
        return 200, "text/plain", b"ok\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, payload: dict) -> None:
        with self._lock:
            self.notifications.append(payload)
            del self.notifications[:-KEEP]
        for alert in payload["alerts"]:
            log.info("%s", describe(alert, payload.get("path", "")))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.notifications)

    def firing(self) -> dict[tuple[str, str, str], dict]:
        """The alerts firing now, per (alertname, namespace/pod or node, receiver path), from the
        latest notification that mentioned each."""
        current: dict[tuple[str, str, str], dict] = {}
        for payload in self.snapshot():
            for alert in payload["alerts"]:
                labels = alert.get("labels", {})
                subject = f"{labels['namespace']}/{labels['pod']}" if labels.get("pod") else labels.get("node", "")
                key = (labels.get("alertname", ""), subject, payload.get("path", ""))
                if alert.get("status") == "firing":
                    current[key] = alert
                else:
                    current.pop(key, None)
        return current

    def text(self) -> str:
        lines = [describe(alert, payload.get("path", "")) for payload in self.snapshot() for alert in payload["alerts"]]
        return "\n".join(lines or ["no notifications yet"]) + "\n"

    def page(self) -> str:
        """The notifications as a person reads them: newest first, each with when it arrived, where it was
        routed and its group, then its alerts (status, subject, start and end, summary, verdict, links)."""
        parts = [
            "<!doctype html><html lang=en><head><meta charset=utf-8>",
            "<meta name=viewport content='width=device-width, initial-scale=1'><meta http-equiv=refresh content=10>",
            f"<title>gpulens alert receiver</title><style>{_STYLE}</style></head><body>",
            "<h1>Alertmanager notifications</h1>",
            f"<p>{len(self.firing())} alert(s) firing now; this page refreshes every 10 s "
            "(<a href=/text>as text</a>, <a href=/api/v1/notifications>as JSON</a>).</p>",
        ]
        notifications = self.snapshot()[::-1]
        if not notifications:
            parts.append("<p>No notifications yet.</p>")
        for payload in notifications:
            group = ", ".join(f"{k}={v}" for k, v in sorted((payload.get("groupLabels") or {}).items()))
            parts.append(
                f"<section><h2>{_e(str(payload.get('status', '?')))}: {_e(payload.get('path', '').rsplit('/', 1)[-1])}"
                f" <span class=small>received {_e(_when(payload.get('received')))}; group {_e(group or '(none)')}"
                "</span></h2><table><tr><th>status</th><th>alert</th><th>subject</th><th>started</th>"
                "<th>resolved</th><th>what it says</th><th>links</th></tr>"
            )
            for alert in payload["alerts"]:
                parts.append(_alert_row(alert))
            parts.append("</table></section>")
        parts.append("</body></html>")
        return "".join(parts)


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:22px}
h2{font-size:16px;margin:22px 0 6px}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f4f4f4}
.small{color:#666;font-size:12px;font-weight:normal}.firing{color:#b30000;font-weight:bold}.resolved{color:#2a7a2a}
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _when(value: object) -> str:
    """A unix time, or Alertmanager's RFC 3339 time, as UTC to the second ("" for none or the zero time)."""
    if isinstance(value, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    text = str(value or "")
    return "" if not text or text.startswith("0001-") else text.replace("T", " ")[:19] + " UTC"


def _alert_row(alert: dict) -> str:
    labels, annotations = alert.get("labels", {}), alert.get("annotations", {})
    status = str(alert.get("status", "?"))
    subject = _subject(labels)
    says = _e(annotations.get("summary", ""))
    verdict = _verdict(labels, annotations)
    if verdict:
        says += f"<br><span class=small>{_e(verdict)}</span>"
    links = " ".join(
        f"<a href='{_e(annotations[key])}'>{name}</a>"
        for key, name in (("runbook_url", "runbook"), ("dashboard_url", "dashboard"))
        if str(annotations.get(key, "")).startswith(("http://", "https://"))
    )
    ended = _when(alert.get("endsAt")) if status == "resolved" else ""
    return (
        f"<tr><td class={_e(status)}>{_e(status)}</td><td>{_e(labels.get('alertname', '?'))}</td>"
        f"<td>{_e(subject)}</td><td>{_e(_when(alert.get('startsAt')))}</td><td>{_e(ended)}</td>"
        f"<td>{says}</td><td>{links}</td></tr>"
    )


def _subject(labels: dict) -> str:
    """What an alert is about: namespace/pod, else its node, GPU and reason labels."""
    if labels.get("pod"):
        return f"{labels.get('namespace')}/{labels.get('pod')}"
    return " ".join(f"{k}={labels[k]}" for k in ("node", "gpu", "xid", "reason", "collector") if labels.get(k))


def describe(alert: dict, path: str) -> str:
    """One line: status, where it was routed, the alert and what the analyzer says."""
    labels, annotations = alert.get("labels", {}), alert.get("annotations", {})
    subject = _subject(labels)
    line = f"[{alert.get('status', '?')}] {path.rsplit('/', 1)[-1]}: {labels.get('alertname', '?')} {subject}"
    line += f" | {_verdict(labels, annotations) or annotations.get('summary', '')}"
    return line


def _verdict(labels: dict, annotations: dict) -> str:
    """'class (confidence): fix' of an alert that carries the analyzer's verdict, else "". A class ticket
    has its class as a label; the page, as an annotation (a label would restart its `for:` when the
    verdict changes)."""
    cause = labels.get("bottleneck") or annotations.get("bottleneck")
    if not (cause and annotations.get("recommendation")):
        return ""
    return f"{cause} ({annotations.get('confidence', '?')}): {annotations['recommendation']}"


def register(commands: Subcommands) -> None:
    from gpulens.core import flags

    p = commands.add_parser(
        "alert-receiver", help="a webhook receiver that shows Alertmanager's notifications (for the demo)"
    )
    flags.add(p, "--web.listen-address", dest="listen_address", default="127.0.0.1:9850", help="host:port to listen on")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import signal

    try:
        host, port = parse_listen_address(args.listen_address)
        receiver = AlertReceiver(host or "0.0.0.0", port)
    except ConfigError as e:
        print(f"gpulens alert-receiver: {e}", file=sys.stderr)
        return 2
    log.info("receiving Alertmanager webhooks on %s/alerts; notifications at %s/", receiver.url, receiver.url)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    receiver.stop()
    return 0

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
import collections
import html
import json
import logging
import re
import sys
import threading
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gpulens.core.config import ConfigError
from gpulens.core.flags import Subcommands
from gpulens.core.times import for_people
from gpulens.core.web import WebConfig, parse_listen_address, serve

log = logging.getLogger("gpulens.receiver")

#: Notifications kept; older ones are dropped (a demo runs for hours at most).
KEEP = 1000
#: Bytes of webhook bodies kept, at most: past it the oldest notifications are dropped, so that large
#: webhooks (the server takes bodies of up to 1 MiB) cannot take more than a few times this in memory.
KEEP_BYTES = 8 * 1024 * 1024
#: An RFC 3339 time as Alertmanager writes startsAt and endsAt (Go's time.Time: up to nanoseconds).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
_STATUSES = ("firing", "resolved")


class NotAWebhook(ValueError):
    """A body that is not an Alertmanager webhook payload (version 4): the message names the field."""


@dataclass(frozen=True)
class Alert:
    """One alert of a notification, as Alertmanager's webhook sends it."""

    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str = ""
    ends_at: str = ""

    @property
    def subject(self) -> str:
        """What the alert is about: namespace/pod, else its workload (namespace/Kind/name), else its node, GPU
        and reason labels."""
        if self.labels.get("pod"):
            namespace = self.labels.get("namespace")
            return f"{namespace}/{self.labels['pod']}" if namespace else self.labels["pod"]
        if self.labels.get("owner"):
            return self.labels["owner"]
        return " ".join(
            f"{k}={self.labels[k]}" for k in ("node", "gpu", "xid", "reason", "collector") if self.labels.get(k)
        )

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": self.starts_at,
            "endsAt": self.ends_at,
        }


@dataclass(frozen=True)
class Notification:
    """One webhook: where Alertmanager routed it (the path), when it arrived (unix seconds), its status,
    group, the annotations its alerts share, its alerts, and its body's size (what it counts against
    KEEP_BYTES)."""

    path: str
    received: float
    status: str
    group_labels: dict[str, str]
    common_annotations: dict[str, str]
    alerts: list[Alert]
    size: int

    @classmethod
    def parse(cls, path: str, body: bytes, received: float) -> Notification:
        """The notification a body holds; NotAWebhook naming the first field that is not what Alertmanager
        sends (the fields gpulens shows: status, groupLabels, commonAnnotations, and each alert's status,
        labels, annotations, startsAt and endsAt; others are ignored)."""
        try:
            payload = json.loads(body)
        except ValueError as e:
            raise NotAWebhook(f"not JSON ({e})") from None
        if not isinstance(payload, dict):
            raise NotAWebhook("not a JSON object")
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise NotAWebhook("alerts: expected a list of alerts")
        return cls(
            path,
            received,
            _status(payload.get("status"), "status"),
            _strings(payload.get("groupLabels", {}), "groupLabels"),
            _strings(payload.get("commonAnnotations", {}), "commonAnnotations"),
            [_alert(alert, f"alerts[{i}]") for i, alert in enumerate(alerts)],
            len(body),
        )

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "received": self.received,
            "status": self.status,
            "groupLabels": self.group_labels,
            "commonAnnotations": self.common_annotations,
            "alerts": [alert.to_dict() for alert in self.alerts],
        }


def _alert(value: object, where: str) -> Alert:
    if not isinstance(value, dict):
        raise NotAWebhook(f"{where}: expected an object")
    labels = _strings(value.get("labels"), f"{where}.labels")
    return Alert(
        _status(value.get("status"), f"{where}.status"),
        labels,
        _strings(value.get("annotations", {}), f"{where}.annotations"),
        _time(value.get("startsAt", ""), f"{where}.startsAt"),
        _time(value.get("endsAt", ""), f"{where}.endsAt"),
    )


def _status(value: object, where: str) -> str:
    if value not in _STATUSES:
        raise NotAWebhook(f"{where}: expected firing or resolved, got {_shown(value)}")
    return str(value)


def _strings(value: object, where: str) -> dict[str, str]:
    """A map of label or annotation names to values, all strings."""
    if not isinstance(value, dict):
        raise NotAWebhook(f"{where}: expected an object of strings, got {_shown(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise NotAWebhook(f"{where}.{key}: expected a string, got {_shown(item)}")
    return value


def _time(value: object, where: str) -> str:
    if value == "":
        return ""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise NotAWebhook(f"{where}: expected an RFC 3339 time, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    text = json.dumps(value) if value is not None else "nothing"
    return text if len(text) <= 60 else text[:60] + "..."


class AlertReceiver:
    """Receives Alertmanager webhooks on POST /alerts/<receiver> (the demo routes `pages` and
    `tickets` there) and keeps them, newest last, within KEEP and KEEP_BYTES. Serves from the moment it
    is made. It checks what it is sent: a webhook it could not show is refused (400 naming the field),
    never kept to break its pages."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.notifications: collections.deque[Notification] = collections.deque()
        self._kept_bytes = 0
        self._lock = threading.Lock()
        routes = {
            "/": lambda _query: (200, "text/html; charset=utf-8", self.page().encode()),
            "/text": lambda _query: (200, "text/plain; charset=utf-8", self.text().encode()),
            "/api/v1/notifications": lambda _query: (
                200,
                "application/json",
                json.dumps([n.to_dict() for n in self.snapshot()]).encode(),
            ),
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
            notification = Notification.parse(path, body, time.time())
        except NotAWebhook as e:
            return 400, "text/plain; charset=utf-8", f"not an Alertmanager webhook payload: {e}\n".encode()
        self.add(notification)
        return 200, "text/plain", b"ok\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, notification: Notification) -> None:
        with self._lock:
            self.notifications.append(notification)
            self._kept_bytes += notification.size
            while len(self.notifications) > KEEP or (self._kept_bytes > KEEP_BYTES and len(self.notifications) > 1):
                self._kept_bytes -= self.notifications.popleft().size
        for alert in notification.alerts:
            log.info("%s", describe(alert, notification.path))

    def snapshot(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)

    def firing(self) -> dict[tuple[str, str, str], Alert]:
        """The alerts firing now, per (alertname, namespace/pod or node, receiver path), from the
        latest notification that mentioned each."""
        current: dict[tuple[str, str, str], Alert] = {}
        for notification in self.snapshot():
            for alert in notification.alerts:
                key = (alert.labels.get("alertname", ""), alert.subject, notification.path)
                if alert.status == "firing":
                    current[key] = alert
                else:
                    current.pop(key, None)
        return current

    def text(self) -> str:
        lines = [describe(alert, n.path) for n in self.snapshot() for alert in n.alerts]
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
        for n in notifications:
            group = ", ".join(f"{k}={v}" for k, v in sorted(n.group_labels.items()))
            parts.append(
                f"<section><h2>{_e(n.status)}: {_e(n.path.rsplit('/', 1)[-1])}"
                f" <span class=small>received {_e(_when(n.received))}; group {_e(group or '(none)')}"
                "</span></h2><div class=scroll><table><tr><th>status</th><th>alert</th><th>subject</th><th>started</th>"
                "<th>resolved</th><th>what it says</th><th>links</th></tr>"
            )
            for alert in n.alerts:
                parts.append(_alert_row(alert))
            parts.append("</table></div></section>")
        parts.append("</body></html>")
        return "".join(parts)


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:22px}
h2{font-size:16px;margin:22px 0 6px}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f4f4f4}
td{overflow-wrap:anywhere}.scroll{overflow-x:auto}
.small{color:#666;font-size:12px;font-weight:normal}.firing{color:#b30000;font-weight:bold}.resolved{color:#2a7a2a}
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _when(value: float | str) -> str:
    """A unix time, or Alertmanager's RFC 3339 time, as UTC to the second ("" for none or the zero time)."""
    if isinstance(value, float):
        return for_people(value)
    return "" if not value or value.startswith("0001-") else value.replace("T", " ")[:19] + " UTC"


def _alert_row(alert: Alert) -> str:
    says = _e(alert.annotations.get("summary", ""))
    verdict = _verdict(alert)
    if verdict:
        says += f"<br><span class=small>{_e(verdict)}</span>"
    links = " ".join(
        f"<a href='{_e(alert.annotations[key])}'>{name}</a>"
        for key, name in (("runbook_url", "runbook"), ("dashboard_url", "dashboard"))
        if alert.annotations.get(key, "").startswith(("http://", "https://"))
    )
    ended = _when(alert.ends_at) if alert.status == "resolved" else ""
    return (
        f"<tr><td class={_e(alert.status)}>{_e(alert.status)}</td><td>{_e(alert.labels.get('alertname', '?'))}</td>"
        f"<td>{_e(alert.subject)}</td><td>{_e(_when(alert.starts_at))}</td><td>{_e(ended)}</td>"
        f"<td>{says}</td><td>{links}</td></tr>"
    )


def describe(alert: Alert, path: str) -> str:
    """One line: status, where it was routed, the alert and what the analyzer says."""
    line = f"[{alert.status}] {path.rsplit('/', 1)[-1]}: {alert.labels.get('alertname', '?')} {alert.subject}"
    return line + f" | {_verdict(alert) or alert.annotations.get('summary', '')}"


def _verdict(alert: Alert) -> str:
    """'class (confidence): fix' of an alert that carries the analyzer's verdict, else "". A class ticket
    has its class as a label; the page, as an annotation (a label would restart its `for:` when the
    verdict changes)."""
    cause = alert.labels.get("bottleneck") or alert.annotations.get("bottleneck")
    if not (cause and alert.annotations.get("recommendation")):
        return ""
    return f"{cause} ({alert.annotations.get('confidence', '?')}): {alert.annotations['recommendation']}"


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

"""A webhook receiver for Alertmanager that a demo user can watch: it keeps every notification,
logs one line per alert, and shows them at / (text) and /api/v1/notifications (JSON).

`gpulens demo` runs it in-process; the compose demo runs it as `gpulens alert-receiver`. Alertmanager's
webhook payload (version 4) is documented at
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("gpulens.receiver")

#: Notifications kept; older ones are dropped (a demo runs for hours at most).
KEEP = 1000


class AlertReceiver:
    """Receives Alertmanager webhooks on POST /alerts/<receiver> (the demo routes `pages` and
    `tickets` there) and keeps them, newest last."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.notifications: list[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    payload = json.loads(self.rfile.read(length))
                    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
                        raise ValueError("no 'alerts' list")
                except ValueError as e:
                    self._reply(400, f"not an Alertmanager webhook payload: {e}\n".encode(), "text/plain")
                    return
                payload["path"] = self.path
                receiver.add(payload)
                self._reply(200, b"ok\n", "text/plain")

            def do_GET(self):
                if self.path == "/api/v1/notifications":
                    self._reply(200, json.dumps(receiver.snapshot()).encode(), "application/json")
                elif self.path == "/":
                    self._reply(200, receiver.text().encode(), "text/plain; charset=utf-8")
                else:
                    self._reply(404, b"not found: try / or /api/v1/notifications\n", "text/plain")

            def _reply(self, status: int, body: bytes, content_type: str):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # one line per alert is logged by add() instead
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="alert-receiver", daemon=True)

    def start(self) -> "AlertReceiver":
        self._thread.start()
        return self

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


def describe(alert: dict, path: str) -> str:
    """One line: status, where it was routed, the alert and what the analyzer says."""
    labels, annotations = alert.get("labels", {}), alert.get("annotations", {})
    subject = f"{labels.get('namespace')}/{labels.get('pod')}" if labels.get("pod") else \
        " ".join(f"{k}={labels[k]}" for k in ("node", "gpu", "xid", "reason", "collector") if labels.get(k))
    line = f"[{alert.get('status', '?')}] {path.rsplit('/', 1)[-1]}: {labels.get('alertname', '?')} {subject}"
    if annotations.get("bottleneck"):
        line += f" | {annotations['bottleneck']} ({annotations.get('confidence', '?')}): " \
                f"{annotations.get('recommendation', '')}"
    else:
        line += f" | {annotations.get('summary', '')}"
    return line


def register(commands) -> None:
    from gpulens.core import flags

    p = commands.add_parser("alert-receiver", help="a webhook receiver that shows Alertmanager's notifications "
                                                   "(for the demo)")
    flags.add(p, "--web.listen-address", dest="listen_address", default="127.0.0.1:9850",
              help="host:port to listen on")
    p.set_defaults(run=run)


def run(args) -> int:
    from gpulens.core.web import parse_listen_address
    from gpulens.core.config import ConfigError

    try:
        host, port = parse_listen_address(args.listen_address)
        receiver = AlertReceiver(host or "0.0.0.0", port)
    except (ConfigError, OSError) as e:
        print(f"gpulens alert-receiver: {e}", file=sys.stderr)
        return 2
    log.info("receiving Alertmanager webhooks on %s/alerts; notifications at %s/", receiver.url, receiver.url)
    try:
        receiver.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0

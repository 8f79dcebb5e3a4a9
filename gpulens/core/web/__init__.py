"""HTTP serving for gpulens' exporter, analyzer and the demo's receiver, split by concern as the Prometheus
exporter-toolkit splits its web package:

- config.py: `--web.config.file` in exporter-toolkit's format (its web_config.go), and `--web.listen-address`;
- tls.py: its `tls_server_config` as Python's TLS context, and the client SANs allowed (tls_config.go);
- auth.py: basic auth against bcrypt hashes, and the rate limit;
- connections.py: the connections' limits (head size and time, slots) and who is shed to make room;
- server.py: serve(), the handler of /metrics, /healthz, /readyz, the index page and the owner's routes.
"""

from gpulens.core.web.config import WebConfig, parse_listen_address
from gpulens.core.web.connections import SHED_REASONS
from gpulens.core.web.server import PostHandler, Route, serve

__all__ = ["SHED_REASONS", "PostHandler", "Route", "WebConfig", "parse_listen_address", "serve"]

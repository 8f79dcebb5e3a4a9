"""What the analyzer reads, and the trace frame it reads it into: trace files, a store's HTTP API (gpulens'
and dcgm-exporter's series, cAdvisor, kube-state-metrics, the serving engines), exporters directly, and the
window a live analyzer keeps. Imports nothing of judging or outputs (lint-imports)."""

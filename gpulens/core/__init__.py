"""The core: what more than one part of gpulens needs, knowing none of the parts.

Configuration and flags, the web server, collector status, thresholds, the GPU catalogue, the metric
table, the PromQL mixin, and the formats the parts exchange. The exporter, analyzer, dashboards and
alerts stand on it and never import each other (docs/architecture.md; import-linter enforces it).
"""

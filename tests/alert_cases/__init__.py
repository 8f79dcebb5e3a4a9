"""The generated alert rules' `promtool test rules` cases, one module an area (as kubernetes-mixin keeps
its promtool tests): each names its group of cases `TESTS`, and tests/test_alerts.py runs them all."""

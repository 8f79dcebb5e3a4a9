"""The simulator: GPU fleets running named workloads, for the demo, the tests and `gpulens eval`.

Workloads are pure functions of time (workloads.py), so the exporter serves them live
(gpulens.exporter.sources.simulated) and the analyzer's evaluator replays hours of them in
milliseconds; fleets (fleet.py) put them on nodes, GPUs and pods. Stands on the core only.
"""

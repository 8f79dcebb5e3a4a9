"""What the analyzer concludes from a trace frame: per-pod features, the class each window shows with its
evidence, verdicts over hours or days, and the cluster's share (waits, stranded GPUs). Imports inputs'
records, nothing of outputs (lint-imports)."""

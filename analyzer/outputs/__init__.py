"""What the analyzer makes of its verdicts, and the runs that make them: the plan, the waste sums, the
terminal tables, the HTML report, the live service and its page, reports over a span and their shards, and
the classifier's own evaluation. Nothing below imports these (lint-imports)."""

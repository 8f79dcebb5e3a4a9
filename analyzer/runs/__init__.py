"""How the analyzer runs: a report over a span read from a store in pieces, processes and shards
(report.py, span.py, shards.py), and the live service's cycle and page (service.py, livepage.py). Each
puts inputs/, judging/ and outputs/ to work; the command line (analyzer/cli/) only parses flags and calls
them."""

"""Exact time accounting, proven through a real Prometheus scraping the real exporter.

A GPU that is busy 250 ms of every second, scraped every 2 s, shows either 0% or 100% in any one
scrape of a gauge. The sampler's counters must still give rate() = 0.25 busy and 0.75 idle.
"""

import threading
import time

import pytest

from tests import captures
from tests.helpers import Prometheus, start_nvml_exporter, wait_until

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow

PERIOD_SECONDS = 1.0
BUSY_SECONDS = 0.25


def test_rate_of_busy_and_idle_seconds_is_the_true_duty_cycle(fake_nvml, tmp_path):
    gpu = captures.t4_with_processes()[0]
    gpu["proc0.sm_util"] = 0
    fake_nvml.write([gpu])
    exporter, url = start_nvml_exporter(fake_nvml, interval="0.05")
    stop = threading.Event()

    def alternate():
        """Busy for 250 ms, idle for 750 ms, over and over: faster than Prometheus scrapes."""
        next_switch = time.monotonic()
        while not stop.is_set():
            for util, seconds in ((100, BUSY_SECONDS), (0, PERIOD_SECONDS - BUSY_SECONDS)):
                fake_nvml.write([gpu | {"util_gpu": util, "proc0.sm_util": util}])
                next_switch += seconds
                stop.wait(max(0.0, next_switch - time.monotonic()))

    toggler = threading.Thread(target=alternate)
    toggler.start()
    prometheus = Prometheus(tmp_path, [url.removeprefix("http://")], scrape_interval="2s")
    try:
        wait_until(
            lambda: prometheus.query('count_over_time(up{job="gpulens"}[1m]) >= 10'), 60, interval=1, what="ten scrapes"
        )
        busy = float(prometheus.query("rate(gpulens_gpu_busy_seconds_total[16s])")[0]["value"][1])
        idle = float(prometheus.query("rate(gpulens_gpu_idle_seconds_total[16s])")[0]["value"][1])
        process = float(prometheus.query("rate(gpulens_process_busy_seconds_total[16s])")[0]["value"][1])
        print(f"busy={busy:.4f} idle={idle:.4f} process={process:.4f}")
        assert abs(busy - 0.25) < 0.04, busy
        assert abs(idle - 0.75) < 0.04, idle
        assert abs(process - 0.25) < 0.04, process
        assert prometheus.query('up{job="gpulens"}')[0]["value"][1] == "1"
    finally:
        stop.set()
        toggler.join()
        prometheus.stop()
        exporter.stop()

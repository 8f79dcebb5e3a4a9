"""Verdicts that change between evaluations: one alert, not one per change."""

from tests.alert_cases.common import ANALYZER, gpu, low_sm, no_waste, verdict_of


def _every_other(period: int, minutes: int, first: bool) -> str:
    """promtool values: 1 in alternate `period`-minute spells (the first spell if `first`), each spell's end
    marked stale as the analyzer's series end, so that the store holds one verdict at a time."""
    values, on_before = [], False
    for minute in range(minutes):
        on = ((minute // period) % 2 == 0) == first
        values.append("1" if on else "stale" if on_before else "_")
        on_before = on
    return " ".join(values)


FLAPPING = {"data_starvation": "Raise DataLoader num_workers.", "host_stall": "Save checkpoints asynchronously."}
#: A pod whose SMs stay at 10% while the analyzer's verdict flips between two causes every 10 minutes: the
#: page fires on activity alone, after its 30 minutes (low from the first rate at 1 minute), and its
#: annotations carry the verdict of the minute it is evaluated at (host_stall from 30 to 40 minutes).
FLAPPING_TESTS = {
    "interval": "1m",
    "input_series": [
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(0)}}}", "values": "0+6x80"},
        {
            "series": f"gpulens_gpu_pod_info{{{gpu(0, namespace='nlp', pod='flappy', container='main')}}}",
            "values": "1x80",
        },
        *(
            {
                "series": f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="nlp",pod="flappy",node="n1",'
                f'bottleneck="{cause}",secondary="",evidence="{cause} seen",recommendation="{fix}"}}',
                "values": _every_other(10, 81, first=cause == "data_starvation"),
            }
            for cause, fix in FLAPPING.items()
        ),
    ],
    "alert_rule_test": [
        {"eval_time": "29m", "alertname": "GpulensPodLowSmActivity", "exp_alerts": []},
        {
            "eval_time": "31m",
            "alertname": "GpulensPodLowSmActivity",
            "exp_alerts": [
                low_sm(
                    "nlp",
                    "flappy",
                    "10%",
                    verdict_of("unknown", "host_stall seen", FLAPPING["host_stall"]),
                    "host_stall",
                    "host_stall",
                    "unknown",
                    FLAPPING["host_stall"],
                    no_waste("nlp", "host_stall"),
                )
            ],
        },
    ],
}

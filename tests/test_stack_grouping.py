"""A hundred low-activity serving replicas in one namespace make one page, with their cause, end to end: simulated
exporters, the analyzer, a real Prometheus with the generated rules and a real Alertmanager with the
generated routing, delivering to the demo's webhook receiver. Only the alert timings are shortened
(seconds instead of half an hour); the grouping, the 30 s group wait and the rules are as generated.
"""

import pytest

from gpulens.core.bottlenecks import RECOMMENDATIONS
from tests.helpers import REPO, active_groups, start_demo_stack, wait_until

pytestmark = pytest.mark.slow

FLEET = REPO / "tests" / "fixtures" / "fleets" / "serving-100.yaml"
#: The page waits longer than the analyzer needs for its first verdicts (about 15 s here: 10 samples a GPU
#: at 1 s scrapes), as 30 minutes do on a real fleet, so the pages carry the cause rather than `unknown`.
TIMINGS = """alert_rate_window: 20s
alert_low_sm_for: 40s
alert_verdict_for: 40s
min_samples: 10
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = start_demo_stack(
        tmp_path_factory.mktemp("grouping"), TIMINGS, fleet_file=str(FLEET), speed=2, window=60, interval=2
    )
    yield stack
    stack.stop()


def test_a_hundred_low_activity_replicas_make_one_page_with_their_cause(stack):
    def serving_pages() -> list[dict]:
        return [
            n
            for n in stack.receiver.snapshot()
            if n.path == "/alerts/pages" and n.group_labels.get("namespace") == "serving"
        ]

    wait_until(serving_pages, 300, interval=2, what="a page for namespace serving")
    # Anything sent apart from that notification would be a second page: Alertmanager holds one group.
    serving = [g for g in active_groups(f"http://{stack.plan.alertmanager}") if g[1].get("namespace") == "serving"]
    assert serving == [("pages", {"alertname": "GpulensPodLowSmActivity", "namespace": "serving"}, 100)], serving
    pages = serving_pages()
    assert len(pages) == 1, f"{len(pages)} pages for namespace serving; the receiver got:\n{stack.receiver.text()}"
    [page] = pages
    assert page.group_labels == {"namespace": "serving", "alertname": "GpulensPodLowSmActivity"}
    assert sorted(a.labels["pod"] for a in page.alerts) == sorted(f"llm-replica-{i}" for i in range(100))
    # What every replica shares reaches the notification's common annotations: the cause and the fix. The
    # waste is the namespace's for that cause on each alert, as of when Prometheus last sent it: replicas
    # that began firing at different evaluations were sent at different times, so its figure may differ.
    common = page.common_annotations
    assert common["bottleneck"] == "wrong_gpu_type", common
    assert common["recommendation"] == RECOMMENDATIONS["wrong_gpu_type"], common
    for alert in page.alerts:
        assert alert.annotations["waste"].startswith("Pods of serving whose cause is wrong_gpu_type waste ")

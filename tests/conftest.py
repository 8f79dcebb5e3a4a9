import pytest

from gpulens.alerts import cli as alerts_cli
from gpulens.core.mixin import MixinConfig
from tests import helpers
from tests.helpers import FakeNvml, build_fake_nvml


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files under tests/golden/ from the current output",
    )


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory):
    """The fake libnvidia-ml.so.1, compiled once per test session."""
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml")).parent


@pytest.fixture
def fake_nvml(fake_nvml_library, tmp_path):
    return FakeNvml(fake_nvml_library, tmp_path / "nvml-state")


@pytest.fixture(scope="session", autouse=True)
def process_logs(tmp_path_factory):
    """Logs of the gpulens processes the tests start go under pytest's temporary folder."""
    helpers.PROCESS_LOGS = tmp_path_factory.mktemp("processes")
    return helpers.PROCESS_LOGS


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The files `gpulens alerts` writes with the default settings and the budget cases' budgets
    (tests/test_alerts.py, test_alert_routing.py)."""
    from tests.alert_cases.budgets import BUDGETS

    out = tmp_path_factory.mktemp("alerts")
    for name, text in alerts_cli.generate(MixinConfig(budgets=BUDGETS)).items():
        (out / name).write_text(text)
    return out

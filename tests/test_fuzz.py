"""Every parser and config loader, fuzzed with hypothesis: whatever the input, the answer is a result or
the project's own error (TraceError for data files, ConfigError for configs), never another exception.

Examples are derived from the test's name (derandomize), so CI runs the same ones every time and main
cannot turn red by chance; run with --hypothesis-seed=random to look further.
"""

import io
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.alerts import rules
from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs import readers
from gpulens.analyzer.inputs.readers import TraceError
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.history import analyze, sample_interval
from gpulens.analyzer.outputs.plan import make_plan
from gpulens.analyzer.outputs.use import Use
from gpulens.core import catalog, dcgm
from gpulens.core.config import ConfigError, finite_json
from gpulens.core.mixin import MixinConfig
from gpulens.core.thresholds import Thresholds
from gpulens.core.trace import ALL_COLUMNS
from gpulens.core.web import WebConfig
from gpulens.exporter.sources.simulated import SimulatedSource
from gpulens.simulator.fleet import load_fleet

#: Hypothesis runs hundreds of inputs a property: the full lane's, not the edit-test loop's.
pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text that looks like the formats: their own words and numbers, separators, quotes, units, junk.
WORDS = st.sampled_from(
    [
        *ALL_COLUMNS,
        "GPU-1",
        "0",
        "1",
        "-1",
        "0.5",
        "85",
        "1e300",
        "inf",
        "-inf",
        "nan",
        "NaN",
        "",
        " ",
        '"',
        '""',
        "[N/A]",
        "N/A",
        "0x0000000000000004",
        "0xzz",
        "2024/01/01 10:00:00.000",
        "2025-11-21T10:00:00Z",
        "MiB",
        "%",
        "150 %",
        "-3 MiB",
        "\ufeff",
        "\x00",
        "é",
        "1.2.3",
        "9" * 40,
    ]  # fmt: skip
)
FIELDS = st.one_of(WORDS, st.text(max_size=12))
LINES = st.lists(st.lists(FIELDS, max_size=8).map(",".join), max_size=12)


#: Where the examples' files go: a folder in pytest's temporary tree (pytest removes it), set per module.
_INPUTS: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _inputs(tmp_path_factory):
    _INPUTS[:] = [tmp_path_factory.mktemp("fuzz-inputs")]
    yield
    _INPUTS.clear()


def _file(suffix: str, content: bytes) -> Path:
    """`content` in a file of its own (readers name the file in errors), replacing the last example's."""
    path = _INPUTS[0] / f"input{suffix}"
    path.write_bytes(content)
    return path


#: Ten minutes of one busy GPU and one idle one, for the configs fuzzed below to be used on.
TRACE = pd.DataFrame(
    {
        "timestamp": [1_762_646_400.0 + 15 * k for k in range(40) for _ in range(2)],
        "gpu": ["GPU-0", "GPU-1"] * 40,
        "gpu_model": ["NVIDIA H100 80GB HBM3"] * 80,
        "namespace": ["ml"] * 80,
        "pod": ["train", "notebook"] * 40,
        "sm_active": [0.9, 0.0] * 40,
        "memory_used_bytes": [40e9, 2e9] * 40,
        "memory_total_bytes": [85e9] * 80,
    }
)


def _judged(frame: pd.DataFrame, thresholds: Thresholds | None = None, prices: dict | None = None) -> None:
    """What the fuzzed input loads is used as a report uses it: judged, planned and written as JSON, with
    every figure finite and no waste below zero."""
    t, frame = thresholds or Thresholds(), fr.normalize(frame)
    verdicts = analyze(frame, t, prices)
    for v in verdicts:
        assert math.isfinite(v.wasted_gpu_seconds) and v.wasted_gpu_seconds >= 0, v
        assert math.isfinite(v.wasted_cost) and v.wasted_cost >= 0, v
    keys = UnitKeys.of(frame) if len(frame) else None
    use = Use.of_trace(frame, sample_interval(frame, keys) if keys else 1.0, t, keys)
    plan = make_plan(verdicts, use, t, prices or {})
    finite_json({"verdicts": [v.to_dict() for v in verdicts], **plan.to_dict()})


def _read(path: Path) -> None:
    try:
        frame = readers.read_files([path])
    except TraceError:
        return
    # What is read is what a GPU can report: nothing infinite, no ratio outside 0-1.
    assert not frame.select_dtypes("number").isin([math.inf, -math.inf]).any().any()
    assert ((frame["gpu_util"].dropna() >= 0) & (frame["gpu_util"].dropna() <= 1)).all()
    _judged(frame)


@FUZZ
@given(header=st.lists(st.sampled_from(ALL_COLUMNS), max_size=8), lines=LINES)
def test_trace_csv(header, lines):
    _read(_file(".csv", (",".join(["timestamp", "gpu", *header]) + "\n" + "\n".join(lines)).encode()))


@FUZZ
@given(header=st.lists(st.sampled_from(ALL_COLUMNS[2:]), min_size=1, max_size=8, unique=True), data=st.data())
def test_trace_csv_values(header, data):
    # Rows of the header's shape, so that the fuzzing reaches the checks of every value.
    plausible = st.floats(0, 1).map(repr)
    numbers = st.one_of(
        plausible, plausible, st.floats().map(repr), st.integers().map(str), st.sampled_from(["", "inf", "nan"])
    )
    stamps = st.one_of(st.integers(0, 2**31), st.floats()).map(repr)
    row = st.tuples(stamps, st.sampled_from(["GPU-1", "GPU-2"]), *[numbers] * len(header)).map(",".join)
    rows = data.draw(st.lists(row, min_size=1, max_size=6))
    _read(_file(".csv", (",".join(["timestamp", "gpu", *header]) + "\n" + "\n".join(rows)).encode()))


@FUZZ
@given(content=st.binary(max_size=300))
def test_any_bytes_as_any_format(content):
    prefixes = [b"timestamp,gpu,gpu_util\n", b"timestamp, uuid, utilization.gpu [%]\n", b"EntityId,GRACT,TimeStamp\n"]
    for prefix in [b"", *prefixes, b"# HELP DCGM_FI_DEV_GPU_UTIL x\n"]:
        _read(_file(".csv", prefix + content))
    _read(_file(".parquet", content))


SMI_HEADER = (
    "timestamp, name, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W], "
    "clocks.sm [MHz], clocks_event_reasons.active"
)


@FUZZ
@given(lines=LINES)
def test_nvidia_smi(lines):
    _read(_file(".csv", (SMI_HEADER + "\n" + "\n".join(lines)).encode()))


@FUZZ
@given(lines=LINES)
def test_dcgmi_dmon(lines):
    _read(_file(".csv", ("EntityId,GRACT,SMACT,FBUSD,FBTTL,GPUTL,TimeStamp\n" + "\n".join(lines)).encode()))


LABEL_VALUES = st.one_of(st.sampled_from(["GPU-1", "0", "7", "²", "", 'a"b', "a\\nb", "}"]), st.text(max_size=6))
SAMPLE = st.tuples(
    st.sampled_from([name for f in dcgm.FIELDS for name in f.names] + ["DCGM_FI_DEV_FB_FREE", "other_metric"]),
    st.dictionaries(st.sampled_from(["UUID", "gpu", "GPU_I_ID", "modelName", "pod", "namespace", "x"]), LABEL_VALUES),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["ERROR", "", "1e", "9223372036854775794"])
    ),
)


def _exposition(samples) -> str:
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization."]
    for name, labels, value in samples:
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


@FUZZ
@given(samples=st.lists(SAMPLE, max_size=10), junk=st.lists(st.text(max_size=30), max_size=3))
def test_dcgm_exporter_scrape(samples, junk):
    text = _exposition(samples) + "\n".join(junk)
    parsed = dcgm.parse_exposition(text)  # the exporter's live path: never raises
    dcgm.devices_from_rows(parsed.rows)
    _read(_file(".prom", text.encode()))


@FUZZ
@given(
    frame=st.fixed_dictionaries(
        {"timestamp": st.sampled_from(["f", "i", "s", "dt", "dtz", "b"])},
        optional={
            c: st.sampled_from(["f", "i", "s", "b", "n"]) for c in ["gpu", "gpu_util", "memory_used_bytes", "pod", "x"]
        },
    ),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=5),
)
def test_parquet(frame, values):
    def column(kind):
        n = len(values)
        return {
            "f": values,
            "i": [int(v) if math.isfinite(v) and abs(v) < 2**62 else 0 for v in values],
            "s": [str(v) for v in values],
            "b": [v > 0 for v in values],
            "n": [None] * n,
            "dt": pd.to_datetime([abs(v) % 4e9 if math.isfinite(v) else 0 for v in values], unit="s"),
            "dtz": pd.to_datetime([abs(v) % 4e9 if math.isfinite(v) else 0 for v in values], unit="s", utc=True),
        }[kind]

    buffer = io.BytesIO()
    pd.DataFrame({name: column(kind) for name, kind in frame.items()}).to_parquet(buffer)
    _read(_file(".parquet", buffer.getvalue()))


# --- configs ---------------------------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10), st.sampled_from(["5m", "1h30m", "TLS12", "NoClientCert", "deny", "$2y$04$" + "a" * 53]),
)  # fmt: skip
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)
    ),
    max_leaves=12,
)


def _keyed(keys: list[str]):
    """Mappings with the format's own keys (and some others), so the fuzzing reaches past the first check."""
    return st.dictionaries(st.sampled_from([*keys, "unknown"]), DOCUMENTS, max_size=6)


def _load(loader, document) -> None:
    path = _file(".yaml", yaml.safe_dump(document, allow_unicode=True).encode())
    try:
        loader(str(path))
    except ConfigError:
        pass


THRESHOLD_KEYS = list(Thresholds.__dataclass_fields__)


@FUZZ
@given(document=st.one_of(DOCUMENTS, _keyed(THRESHOLD_KEYS)))
def test_thresholds_file(document):
    try:
        thresholds = Thresholds.load(str(_file(".yaml", yaml.safe_dump(document).encode())))
    except ConfigError:
        return
    for name, value in vars(thresholds).items():  # what loads is finite: no alert rule `< nan`
        assert not isinstance(value, float) or math.isfinite(value), name
    _judged(TRACE, thresholds)
    text = yaml.safe_dump(rules.rule_groups(MixinConfig(thresholds=thresholds)))
    assert "nan" not in text.lower().split() and "inf" not in text.lower().split()


@FUZZ
@given(document=st.one_of(DOCUMENTS, st.dictionaries(st.text(max_size=8), SCALARS)))
def test_prices_file(document):
    try:
        prices = catalog.load_prices(str(_file(".yaml", yaml.safe_dump(document).encode())))
    except ConfigError:
        return
    _judged(TRACE, prices=prices)


@FUZZ
@given(
    document=st.one_of(
        DOCUMENTS,
        st.fixed_dictionaries(
            {},
            optional={
                "tls_server_config": _keyed(
                    [
                        "cert_file",
                        "key_file",
                        "client_auth_type",
                        "min_version",
                        "max_version",
                        "cipher_suites",
                        "client_allowed_sans",
                        "curve_preferences",
                    ]
                ),  # fmt: skip
                "http_server_config": _keyed(["http2", "headers"]),
                "basic_auth_users": st.dictionaries(st.text(max_size=5), SCALARS, max_size=3),
                "rate_limit": _keyed(["interval", "burst"]),
            },
        ),
    )
)
def test_web_config_file(document):
    _load(WebConfig.load, document)


@FUZZ
@given(
    document=st.one_of(
        DOCUMENTS,
        st.fixed_dictionaries(
            {"nodes": st.lists(_keyed(["name", "model", "gpus", "profiling", "workloads"]), max_size=3)},
            optional={"seed": SCALARS},
        ),
    )
)
def test_fleet_file(document):
    try:
        nodes = load_fleet(document)
    except ConfigError:
        return
    for node in nodes:  # what loads is simulated: one sample of each node
        source = SimulatedSource(node)
        source.start()
        source.sample()
        source.close()


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_as_a_yaml_config(text):
    path = _file(".yaml", text.encode())
    for loader in (Thresholds.load, catalog.load_prices, WebConfig.load):
        try:
            loader(str(path))
        except ConfigError:
            pass


_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "content, message",
    [
        # A few hundred bytes that expand to 9^9 values: hung report and the exporter, taking GiB.
        (_LAUGHS.encode(), "its aliases expand to more than 100,000 values: write it without nested aliases (*name)"),
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper than gpulens reads: flatten it"),
        (b"alert_low_sm: 0.3 # r\xe9sum\xe9\n", "not UTF-8 text (byte 21): save it as UTF-8"),
        # 100,000 rules took 18 s to parse and were refused for aliases they did not have.
        (
            b"workload_kinds:\n" + b"  - {kind: serving, labels: {app: chat}}\n" * 7000,
            "larger than 256 KiB, which no gpulens setting needs (2,000 workload_kinds rules take about 100 KiB): "
            "match pods by fewer, broader rules (a label many pods share, an image pattern)",
        ),
        (
            b"a: [" + b"1," * 120_000 + b"1]\n",
            "holds more than 100,000 values, which no gpulens setting needs: write it shorter",
        ),
    ],
    ids=["alias bomb", "deep nesting", "latin-1", "too large", "too many values"],
)
def test_a_yaml_config_that_would_hang_or_crash_is_refused_in_one_line(tmp_path, content, message):
    (tmp_path / "t.yaml").write_bytes(content)
    for loader, flag in ((Thresholds.load, "--thresholds"), (catalog.load_prices, "--prices")):
        with pytest.raises(ConfigError) as error:
            loader(str(tmp_path / "t.yaml"))
        assert str(error.value) == f"{flag} {tmp_path / 't.yaml'}: {message}"


def test_aliases_that_expand_to_little_are_read_as_yaml_reads_them(tmp_path):
    (tmp_path / "t.yaml").write_text("A100: &price 1.5\nH100: *price\n")
    assert catalog.load_prices(str(tmp_path / "t.yaml")) == {"A100": 1.5, "H100": 1.5}


@pytest.mark.parametrize(
    "text, message",
    [
        ("alert_low_sm: .nan\n", "alert_low_sm: expected a ratio from 0 to 1, got nan"),
        ("idle_seconds: -5\n", "idle_seconds: expected a number of at least 0, got -5"),
        ("healthy_sm: 80\n", "healthy_sm: expected a ratio from 0 to 1, got 80"),
        ("min_samples: 2.5\n", "min_samples: expected a whole number of at least 1, got 2.5"),
        ("alert_low_smm: 0.3\n", "unknown key(s) alert_low_smm; did you mean alert_low_sm?"),
        ("- 0.3\n", "expected a mapping of threshold: value with keys min_samples"),
        # Numbers that would overflow the arrays they go into, durations promtool would refuse in a rule.
        (
            "min_samples: 99999999999999999999999\n",
            "min_samples: expected a whole number of at least 1, at most 9,007,199,254,740,992, got "
            "99999999999999999999999",
        ),
        (
            "alert_low_sm_for: 300y\n",
            "alert_low_sm_for: expected a Prometheus duration such as 30s, 5m or 1h, at most 10y, got '300y'",
        ),
        ("min_samples: " + "9" * 5000 + "\n", "holds a number of thousands of digits: no setting takes one"),
    ],
)
def test_thresholds_must_be_finite_and_in_range(tmp_path, text, message):
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(ConfigError) as error:
        Thresholds.load(str(tmp_path / "t.yaml"))
    assert str(error.value).startswith(f"--thresholds {tmp_path / 't.yaml'}: {message}")


@pytest.mark.parametrize(
    "text, message",
    [
        ("H100: .nan\n", "H100: expected a price in USD per GPU-hour of at least 0, got nan"),
        ("H100: -2\n", "H100: expected a price in USD per GPU-hour of at least 0, got -2"),
        ("H100: '4.0'\n", "H100: expected a price in USD per GPU-hour of at least 0, got '4.0'"),
    ],
)
def test_prices_must_be_finite_and_not_negative(tmp_path, text, message):
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(ConfigError) as error:
        catalog.load_prices(str(tmp_path / "p.yaml"))
    assert str(error.value) == f"--prices {tmp_path / 'p.yaml'}: {message}"
    (tmp_path / "p.yaml").write_text("H100: 4\nL4: 0.8\n")
    assert catalog.load_prices(str(tmp_path / "p.yaml")) == {"H100": 4.0, "L4": 0.8}


# --- the kubelet's pod list, decoded by field number -----------------------------------------

NAMES = st.text(max_size=12)
PODS = st.lists(
    st.tuples(
        NAMES,  # namespace
        NAMES,  # pod
        st.lists(
            st.tuples(
                NAMES,  # container
                st.lists(
                    st.tuples(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"]), st.lists(NAMES)),
                    max_size=3,
                ),
                st.lists(st.integers(0, 2**31), max_size=3),  # cpu_ids: a varint field the decoder reads past
            ),
            max_size=3,
        ),
    ),
    max_size=5,
)


@FUZZ
@given(pods=PODS)
def test_the_kubelets_pod_list_decodes_as_protobuf_encodes_it(pods):
    # Encoded by protobuf's own runtime from tests/podresources.proto, plus a field the subset leaves out.
    from gpulens.core.pods import PodRef
    from gpulens.exporter.attribution.kubelet import DEFAULT_RESOURCE_NAMES, Allocation, _allocations
    from tests import podresources_pb2 as pb

    response = pb.ListPodResourcesResponse()
    expected = []
    for namespace, name, containers in pods:
        pod = response.pod_resources.add(name=name, namespace=namespace)
        for container, devices, cpu_ids in containers:
            c = pod.containers.add(name=container)
            for resource, ids in devices:
                c.devices.add(resource_name=resource, device_ids=ids)
                if resource != "cpu":
                    expected += [Allocation(PodRef(namespace, name, container), resource, d) for d in ids]
            # The kubelet's ContainerResources also has cpu_ids = 3 (int64s): here as varints (wire type 0),
            # which the subset does not know and protobuf keeps as unknown fields, for the decoder to skip.
            c.MergeFromString(b"".join(_varint_field(3, i) for i in cpu_ids))
    assert list(_allocations(response.SerializeToString(), DEFAULT_RESOURCE_NAMES)) == expected


def _varint_field(number: int, value: int) -> bytes:
    key, out = number << 3, bytearray()
    for v in (key, value):
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                break
    return bytes(out)


@FUZZ
@given(content=st.binary(max_size=200))
def test_any_bytes_as_the_kubelets_pod_list(content):
    from gpulens.exporter.attribution.kubelet import _allocations

    try:
        list(_allocations(content, ("*",)))
    except ValueError:
        pass  # the client's KubeletError names it


def test_answers_and_reports_write_json_without_nan_or_infinity():
    """Python's json writes NaN and Infinity, which JSON parsers refuse: every answer writes null."""
    import json

    from gpulens.core.config import finite_json

    document = {"mean": math.inf, "waste": [1.5, -math.inf, math.nan], "nested": ({"confidence": math.nan},)}
    text = finite_json(document)
    assert text == '{"mean": null, "waste": [1.5, null, null], "nested": [{"confidence": null}]}'
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))["waste"][0] == 1.5


def test_every_threshold_written_as_a_file_is_read_back_as_it_was(tmp_path):
    """Thresholds.to_yaml() of the defaults, and of the demo's at its five-fold speed, read back by --thresholds
    as they were: no default is one the file's own schema refuses (pipeline_bubble_standard_errors, 2.0, was read
    as a ratio, at most 1)."""
    from dataclasses import asdict

    path = tmp_path / "t.yaml"
    for thresholds in (Thresholds(), Thresholds().at_speed(5)):
        path.write_text(thresholds.to_yaml("heading"))
        assert asdict(Thresholds.load(str(path))) == asdict(thresholds)
    fast = Thresholds().at_speed(5)
    assert (fast.stall_long_seconds, fast.offload_pcie_bytes_per_second) == (2.0, 5e9)
    assert fast.idle_seconds == Thresholds().idle_seconds  # a span watched, in real time

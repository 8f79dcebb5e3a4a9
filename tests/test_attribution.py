"""Pod attribution through real protocol parts: a fake kubelet serving the real pod-resources gRPC
protocol on a unix socket, a fixture /proc and /var/log, and the fake libnvidia-ml."""

import contextlib
import hashlib
import socket
import subprocess
import sys
import threading
import time

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import requests

from gpulens.core.pods import PodRef
from gpulens.exporter.attribution.cgroups import Cgroup, ContainerIndex, parse_cgroup, read_cgroup
from gpulens.exporter.attribution.kubelet import (
    Allocation,
    DeviceRef,
    KubeletError,
    PodResourcesClient,
    parse_device_id,
    resource_matches,
)
from tests import captures
from tests.fake_kubelet import FakeKubelet
from tests.helpers import REPO, samples, start_nvml_exporter, value, wait_until

NODE = REPO / "tests" / "fixtures" / "node"
PROC, VAR_LOG = str(NODE / "proc"), str(NODE / "var" / "log")
UUID = "4b3e1c2a-1111-2222-3333-444455556666"


def container_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


@pytest.mark.parametrize(
    "device_id, ref",
    [
        (f"GPU-{UUID}", DeviceRef(uuid=f"GPU-{UUID}")),
        (f"GPU-{UUID}::3", DeviceRef(uuid=f"GPU-{UUID}")),
        (f"MIG-{UUID}", DeviceRef(uuid=f"MIG-{UUID}")),
        (f"MIG-GPU-{UUID}/3/0", DeviceRef(parent_uuid=f"GPU-{UUID}", gpu_instance_id=3)),
        ("nvidia0", DeviceRef(gpu="0")),
        ("nvidia1/gi3", DeviceRef(gpu="1/gi3")),
        ("nvidia2/vgpu4", DeviceRef(gpu="2")),
        ("weird-7", None),
        (f"GPU-{UUID}-extra", None),
    ],
)
def test_device_ids_of_real_device_plugins(device_id, ref):
    assert parse_device_id(device_id) == ref


def test_resource_names_with_families():
    patterns = ("nvidia.com/gpu", "nvidia.com/mig-*")
    assert resource_matches("nvidia.com/mig-1g.10gb", patterns)
    assert resource_matches("nvidia.com/gpu", patterns)
    assert not resource_matches("nvidia.com/gpu.shared", patterns)
    assert not resource_matches("amd.com/gpu", patterns)


@pytest.mark.parametrize(
    "pid, cgroup",
    [
        (4101, Cgroup(container_id("trainer"), "3f1b2c4d-5e6f-4a1b-8c2d-0123456789ab")),  # containerd, v2, systemd
        (4201, Cgroup(container_id("bert-a"), "7c2d9e10-aaaa-4bbb-8ccc-0123456789ab")),  # CRI-O, v2, systemd
        (4301, Cgroup(container_id("bert-b"), "91e0f3a2-1b2c-4d3e-9f40-0123456789ab")),  # containerd, v1, cgroupfs
        (4401, Cgroup(container_id("mig-a"), "a0b1c2d3-e4f5-4061-8273-0123456789ab")),  # Docker, v1, systemd
        (4402, Cgroup(container_id("mig-b"), "b1c2d3e4-f506-4172-8384-0123456789ab")),  # containerd, v2, cgroupfs
        (4501, Cgroup()),  # a login session
        (4601, Cgroup(container_id("plain-docker"), "")),  # plain Docker, no Kubernetes
        (99999, Cgroup()),  # exited
    ],
)
def test_cgroups_of_each_runtime(pid, cgroup):
    assert read_cgroup(PROC, pid) == cgroup


def test_crio_conmon_is_not_the_container():
    text = f"0::/kubepods.slice/kubepods-pod{UUID.replace('-', '_')}.slice/crio-conmon-{'f' * 64}.scope\n"
    assert parse_cgroup(text) == Cgroup()


def test_container_index_from_the_kubelets_log_links():
    index = ContainerIndex(VAR_LOG)
    index.refresh()
    assert index.pod_of(read_cgroup(PROC, 4101)) == PodRef("vision", "trainer-0", "trainer")
    assert index.pod_of(read_cgroup(PROC, 4301)) == PodRef("nlp", "bert-b-0", "bert")
    # No link for this container: the pod's log directory names it, and its only container.
    assert index.pod_of(read_cgroup(PROC, 4402)) == PodRef("research", "mig-b-0", "worker")
    assert index.pod_of(read_cgroup(PROC, 4601)) is None


def test_generated_grpc_code_is_current(tmp_path):
    # The fake kubelet's messages and service, generated from tests/podresources.proto.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{REPO}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            "tests/podresources.proto",
        ],
        check=True,
        cwd=REPO,
    )
    for name in ("podresources_pb2.py", "podresources_pb2_grpc.py"):
        assert (tmp_path / "tests" / name).read_text() == (REPO / "tests" / name).read_text(), f"regenerate {name}"


# --- the pod-resources client against grpcio's own server -----------------------------------


@pytest.mark.slow
def test_the_client_reads_a_large_node_past_http2s_first_flow_control_window(tmp_path):
    # 500 pods of 8 GPUs each: an answer of ~100 KB, past the 64 KiB a stream may send before the
    # client acknowledges what it received.
    pods = {
        ("serving", f"replica-{i}"): {"server": [("nvidia.com/gpu", [f"GPU-{i:04x}{g:04x}-0000" for g in range(8)])]}
        for i in range(500)
    }
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"), pods).start()
    try:
        allocations = PodResourcesClient(kubelet.socket_path).list_allocations()
    finally:
        kubelet.stop()
    assert len(allocations) == 4000
    assert allocations[-1] == Allocation(
        PodRef("serving", "replica-499", "server"), "nvidia.com/gpu", "GPU-01f30007-0000"
    )


@pytest.mark.slow
def test_the_client_names_each_failure_and_its_fix(tmp_path):
    def error(socket_path: str) -> str:
        with pytest.raises(KubeletError) as failure:
            PodResourcesClient(socket_path, timeout=1.0).list_allocations()
        return str(failure.value)

    def error_from_server(socket_path: str, answer) -> str:
        """The client's error against a server at `socket_path` that handles its connection with `answer`."""
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(socket_path)
            server.listen()

            def serve_one():
                connection, _ = server.accept()
                with connection, contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    answer(connection)  # the client may hang up first: it has its error

            thread = threading.Thread(target=serve_one)
            thread.start()
            message = error(socket_path)
            thread.join()
        return message

    absent = str(tmp_path / "absent.sock")
    fix = (
        "mount /var/lib/kubelet/pod-resources into the exporter, or set --kubelet.socket "
        "(--kubelet.socket='' outside Kubernetes)"
    )
    assert error(absent) == f"the kubelet pod-resources socket {absent} does not exist; {fix}"

    # A socket file nobody listens on: the kubelet is restarting.
    stale = str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(stale)
    assert error(stale) == f"cannot reach the kubelet on {stale} (Connection refused); {fix}"

    # Something that is not a gRPC server: an HTTP/1.1 server behind the socket.
    def answer_http1(connection):
        connection.recv(1024)
        connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    other = str(tmp_path / "http.sock")
    message = error_from_server(other, answer_http1)
    assert message == f"{other} does not speak gRPC over HTTP/2: its answer begins b'HTTP/1.1 400 Bad'"

    # An HTTP/2 server that cancels the call: a kubelet going down while it answers.
    def cancel_the_call(connection):
        peer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        peer.initiate_connection()
        connection.sendall(peer.data_to_send())
        while data := connection.recv(65535):
            for event in peer.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    peer.reset_stream(event.stream_id, h2.errors.ErrorCodes.CANCEL)
            connection.sendall(peer.data_to_send())

    cancelling = str(tmp_path / "cancel.sock")
    message = error_from_server(cancelling, cancel_the_call)
    assert message == (
        f"the kubelet reset the call on {cancelling} (HTTP/2 error CANCEL): "
        "is it restarting? The next refresh asks again"
    )

    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"), {}).start()
    try:
        kubelet.failure = (grpc.StatusCode.PERMISSION_DENIED, "pod-resources: caller not allowed")
        assert error(kubelet.socket_path) == (
            f"the kubelet pod-resources API failed on {kubelet.socket_path}: "
            "PERMISSION_DENIED pod-resources: caller not allowed"
        )
        kubelet.failure = None
        assert PodResourcesClient(kubelet.socket_path).list_allocations() == []
    finally:
        kubelet.stop()


# --- end to end ------------------------------------------------------------------------------


def node_gpus():
    """GPU 0: an H100 with the trainer, a host process and a plain Docker process; GPU 1: a T4
    time-sliced between two pods; GPU 2: the A100 of the MIG capture, instances in three pods."""
    h100 = captures.h100_under_load()
    for key in [k for k in h100 if k.startswith("proc")]:
        del h100[key]
    h100.update(
        {
            "proc0.pid": 4101,
            "proc0.name": "python3",
            "proc0.memory": 30 * 2**30,
            "proc0.sm_util": 80,
            "proc1.pid": 4501,
            "proc1.name": "nvidia-smi",
            "proc1.memory": 2**20,
            "proc1.sm_util": 0,
            "proc2.pid": 4601,
            "proc2.name": "bench",
            "proc2.memory": 2**30,
            "proc2.sm_util": 5,
        }
    )
    t4 = captures.t4_with_processes()[0]
    for key in [k for k in t4 if k.startswith("proc")]:
        del t4[key]
    t4.update(
        {
            "proc0.pid": 4201,
            "proc0.name": "python",
            "proc0.memory": 3 * 2**30,
            "proc0.sm_util": 30,
            "proc1.pid": 4301,
            "proc1.name": "python",
            "proc1.memory": 5 * 2**30,
            "proc1.sm_util": 45,
        }
    )
    a100 = captures.a100_mig()[0]
    a100.update(
        {
            "proc0.pid": 4401,
            "proc0.name": "jupyter",
            "proc0.memory": 2**30,
            "proc0.gi": 3,
            "proc1.pid": 4402,
            "proc1.name": "worker",
            "proc1.memory": 2 * 2**30,
            "proc1.gi": 4,
        }
    )
    return [h100, t4, a100]


def kubelet_pods(gpus):
    h100, t4, a100 = (g["uuid"] for g in gpus)
    migs = [a100_mig_uuid(gpus[2], i) for i in range(3)]
    return {
        ("vision", "trainer-0"): {"trainer": [("nvidia.com/gpu", [h100])]},
        ("nlp", "bert-a-0"): {"bert": [("nvidia.com/gpu", [f"{t4}::0"])]},
        ("nlp", "bert-b-0"): {"bert": [("nvidia.com/gpu", [f"{t4}::1"])]},
        ("research", "mig-a-0"): {"notebook": [("nvidia.com/mig-1g.20gb", [migs[0]])]},
        ("research", "mig-b-0"): {"worker": [("nvidia.com/mig-1g.20gb", [migs[1]])]},
        ("research", "mig-c-0"): {"worker": [("nvidia.com/mig-1g.20gb", [migs[2]])]},
        ("default", "nginx-0"): {"nginx": []},  # pods without GPUs are in the list too
    }


def a100_mig_uuid(a100, i):
    return a100[f"mig{i}.uuid"]


@pytest.fixture
def attributed_exporter(fake_nvml, tmp_path):
    gpus = node_gpus()
    fake_nvml.write(gpus)
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"), kubelet_pods(gpus)).start()
    exporter, url = start_nvml_exporter(
        fake_nvml,
        "--kubelet.socket",
        kubelet.socket_path,
        "--kubelet.refresh-interval",
        "0.3",
        "--path.procfs",
        PROC,
        "--path.var-log",
        VAR_LOG,
    )
    yield gpus, kubelet, exporter, url
    exporter.stop()
    kubelet.stop()


def scrape(url):
    return samples(requests.get(url + "/metrics", timeout=5).text)


def pod_info(parsed):
    return sorted(
        (dict(labels)["gpu"], dict(labels)["namespace"], dict(labels)["pod"], dict(labels)["container"])
        for (name, labels) in parsed
        if name == "gpulens_gpu_pod_info"
    )


@pytest.mark.slow
def test_the_analyzer_judges_each_mig_instance_in_its_pod_and_not_the_gpu_that_holds_them(attributed_exporter):
    """Read by the analyzer from the exporter over HTTP: each MIG instance is a unit in its pod, named as NVML
    names it ("<GPU> MIG 1g.20gb", what its cost and size follow: catalog.gpu_share_of); the A100 in MIG mode
    that holds them, with board readings and no activity, is no unit of its own."""
    from gpulens.analyzer.inputs.live import ExporterInput

    gpus, _, _, url = attributed_exporter
    a100 = gpus[2]
    source = ExporterInput([("node-1", url + "/metrics")])
    try:
        source.poll()
        frame = source.window_frame()
    finally:
        source.close()
    units = frame.drop_duplicates("gpu").set_index("gpu")
    assert a100["uuid"] not in units.index
    for i, pod in enumerate(("mig-a-0", "mig-b-0", "mig-c-0")):
        instance = units.loc[a100_mig_uuid(a100, i)]
        assert (instance["gpu_model"], instance["pod"]) == (a100[f"mig{i}.name"], pod)
    assert a100["mig0.name"] == f"{a100['name']} MIG 1g.20gb"


@pytest.mark.slow
def test_every_gpu_instance_and_process_is_in_its_pod(attributed_exporter):
    gpus, kubelet, exporter, url = attributed_exporter
    parsed = scrape(url)
    assert pod_info(parsed) == [
        ("0", "vision", "trainer-0", "trainer"),
        ("1", "nlp", "bert-a-0", "bert"),
        ("1", "nlp", "bert-b-0", "bert"),
        ("2/gi3", "research", "mig-a-0", "notebook"),
        ("2/gi4", "research", "mig-b-0", "worker"),
        ("2/gi5", "research", "mig-c-0", "worker"),
    ]
    assert value(parsed, "gpulens_gpu_pods", gpu="1") == 2  # time-sliced between two pods
    assert value(parsed, "gpulens_gpu_pods", gpu="2/gi6") == 0  # a MIG instance no pod holds
    # The shared T4 split by pod: memory and SM share of each pod's processes.
    t4_pod = {"gpu": "1", "namespace": "nlp"}
    assert value(parsed, "gpulens_pod_gpu_memory_used_bytes", pod="bert-a-0", **t4_pod) == 3 * 2**30
    assert value(parsed, "gpulens_pod_gpu_memory_used_bytes", pod="bert-b-0", **t4_pod) == 5 * 2**30
    assert value(parsed, "gpulens_pod_gpu_utilization_ratio", pod="bert-a-0", **t4_pod) == 0.30
    assert value(parsed, "gpulens_pod_gpu_utilization_ratio", pod="bert-b-0", **t4_pod) == 0.45

    # Integrated per pod: 0.45 of each second for bert-b, 0.30 for bert-a.
    def busy() -> tuple[float, float]:
        later = scrape(url)
        pods = ("bert-a-0", "bert-b-0")
        return tuple(value(later, "gpulens_pod_gpu_busy_seconds_total", pod=p, **t4_pod) or 0.0 for p in pods)

    busy_a, busy_b = wait_until(lambda: (b := busy())[1] > 0.3 and b, 10, what="0.3 s of bert-b busy")
    assert busy_b / busy_a == pytest.approx(0.45 / 0.30, rel=0.01)
    # Processes carry their pod; a host process none; a plain Docker one its container ID only.
    assert (
        value(
            parsed,
            "gpulens_process_info",
            pid="4101",
            namespace="vision",
            pod="trainer-0",
            container="trainer",
            container_id=container_id("trainer"),
        )
        == 1
    )
    assert value(parsed, "gpulens_process_info", pid="4402", gpu="2/gi4", pod="mig-b-0") == 1
    assert value(parsed, "gpulens_process_info", pid="4501", pod="", container_id="") == 1
    assert value(parsed, "gpulens_process_info", pid="4601", pod="", container_id=container_id("plain-docker")) == 1
    # Device series keep identity labels only.
    assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 631.95
    assert all("pod" not in dict(labels) for name, labels in parsed if name == "gpulens_gpu_power_watts")
    assert value(parsed, "gpulens_exporter_collector_success", collector="kubelet") == 1
    assert value(parsed, "gpulens_exporter_kubelet_unmapped_device_ids", reason="unknown_format") == 0


@pytest.mark.slow
def test_pods_come_and_go_within_one_refresh(attributed_exporter):
    gpus, kubelet, exporter, url = attributed_exporter
    pods = kubelet_pods(gpus)
    del pods[("vision", "trainer-0")]
    pods[("vision", "trainer-1")] = {"trainer": [("nvidia.com/gpu", [gpus[0]["uuid"]])]}  # the GPU moves
    del pods[("research", "mig-c-0")]
    kubelet.set_pods(pods)

    def moved():
        rows = pod_info(scrape(url))
        return ("0", "vision", "trainer-1", "trainer") in rows and rows

    rows = wait_until(moved, 5, interval=0.1, what="the GPU to move to trainer-1")
    assert ("0", "vision", "trainer-0", "trainer") not in rows
    assert not any(r[0] == "2/gi5" for r in rows)
    parsed = scrape(url)
    assert value(parsed, "gpulens_gpu_pods", gpu="2/gi5") == 0
    # trainer-0's process still runs on the GPU until it exits, so its pod series stay with it.
    assert value(parsed, "gpulens_pod_gpu_memory_used_bytes", pod="trainer-0") == 30 * 2**30
    assert value(parsed, "gpulens_pod_gpu_busy_seconds_total", pod="mig-c-0") is None


@pytest.mark.slow
def test_unknown_device_ids_are_counted_and_logged_once(attributed_exporter):
    gpus, kubelet, exporter, url = attributed_exporter
    pods = kubelet_pods(gpus)
    pods[("odd", "vendor-plugin-0")] = {"main": [("nvidia.com/gpu", ["weird-7", f"GPU-{UUID}"])]}
    kubelet.set_pods(pods)
    wait_until(
        lambda: value(scrape(url), "gpulens_exporter_kubelet_unmapped_device_ids", reason="unknown_format") == 1,
        5,
        what="the unknown ID to be counted",
    )
    parsed = scrape(url)
    assert value(parsed, "gpulens_exporter_kubelet_unmapped_device_ids", reason="no_such_device") == 1
    calls = kubelet.list_calls
    wait_until(lambda: kubelet.list_calls >= calls + 3, 10, what="three more refreshes")
    assert exporter.log.count("device ID 'weird-7'") == 1
    assert len(pod_info(scrape(url))) == 6  # the rest is attributed as before


@pytest.mark.slow
def test_socket_absent_then_appearing(fake_nvml, tmp_path):
    gpus = node_gpus()
    fake_nvml.write(gpus)
    socket_path = str(tmp_path / "kubelet.sock")
    exporter, url = start_nvml_exporter(
        fake_nvml,
        "--kubelet.socket",
        socket_path,
        "--kubelet.refresh-interval",
        "0.3",
        "--path.procfs",
        PROC,
        "--path.var-log",
        VAR_LOG,
    )
    kubelet = FakeKubelet(socket_path, kubelet_pods(gpus))
    try:
        parsed = scrape(url)
        assert value(parsed, "gpulens_exporter_collector_success", collector="kubelet") == 0
        assert value(parsed, "gpulens_gpu_up", gpu="0") == 1
        assert pod_info(parsed) == []
        assert [k for k in parsed if k[0] == "gpulens_gpu_pods"] == []  # unknown, not zero
        # Processes are still placed by their cgroups.
        assert value(parsed, "gpulens_process_info", pid="4101", pod="trainer-0") == 1
        failed = {"collector": "kubelet"}
        wait_until(
            lambda: value(scrape(url), "gpulens_exporter_collector_failures_total", **failed) >= 3,
            10,
            what="three failed reads of the absent socket",
        )
        assert exporter.log.count(f"the kubelet pod-resources socket {socket_path} does not exist") == 1
        kubelet.start()
        wait_until(lambda: len(pod_info(scrape(url))) == 6, 5, what="attribution to recover")
        assert value(scrape(url), "gpulens_exporter_collector_success", collector="kubelet") == 1
        assert exporter.log.count("pod attribution restored") == 1
    finally:
        exporter.stop()
        kubelet.stop()


@pytest.mark.slow
def test_a_hanging_kubelet_never_slows_the_scrape(fake_nvml, tmp_path):
    gpus = node_gpus()
    fake_nvml.write(gpus)
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"), kubelet_pods(gpus)).start()
    exporter, url = start_nvml_exporter(
        fake_nvml,
        "--kubelet.socket",
        kubelet.socket_path,
        "--kubelet.refresh-interval",
        "0.2",
        "--kubelet.timeout",
        "0.5",
        "--path.procfs",
        PROC,
        "--path.var-log",
        VAR_LOG,
    )
    try:
        kubelet.delay_seconds = 5.0
        wait_until(
            lambda: value(scrape(url), "gpulens_exporter_collector_success", collector="kubelet") == 0,
            5,
            what="the kubelet call to time out",
        )
        for _ in range(5):
            started = time.monotonic()
            requests.get(url + "/metrics", timeout=2)
            assert time.monotonic() - started < 0.5
        assert "the kubelet did not answer within 0.5 s" in exporter.log
    finally:
        exporter.stop()
        kubelet.stop()

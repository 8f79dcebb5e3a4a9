"""The metric table: every series gpulens exports, declared once.

This table is public API. It drives the exporter's rendering, the generated metric reference
(`docs/metrics.md`), and later the dashboards and alert rules. A rename here breaks every user's
dashboards, so names follow Prometheus conventions from the start:

- the `gpulens_` prefix, base units (bytes, seconds, watts, joules, celsius, hertz), ratios 0-1;
- `_total` only on counters, `_info` for metadata (value 1, identity in labels);
- labels are lowercase identity only. Host and driver come from target labels and `gpulens_driver_info`.

Per-device series carry `gpu` and `uuid`. A "device" is a full GPU (`gpu="0"`, `uuid="GPU-..."`) or a
MIG instance (`gpu="0/gi3"`, `uuid="MIG-..."`), so one PromQL expression covers both.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.core import activity
from gpulens.core.activity import IDLE_ACTIVITY

PREFIX = "gpulens_"
DEVICE_LABELS = ("gpu", "uuid")
POD_LABELS = ("gpu", "uuid", "namespace", "pod", "container")
# namespace/pod/container are "" for a process in no known pod (outside Kubernetes, or no kubelet).
PROCESS_LABELS = ("gpu", "uuid", "pid", "namespace", "pod", "container")

#: Units a metric name may end in, in Prometheus base units.
BASE_UNITS = ("ratio", "bytes", "seconds", "watts", "joules", "celsius", "hertz")


@dataclass(frozen=True, eq=False)  # eq=False: specs hash and compare by identity, in C
class MetricSpec:
    """One exported metric family.

    `name` is the full name as users query it (counters end in `_total`). `unit` is one of
    BASE_UNITS or "" for counts, states and info metrics. `source` names where the value comes from
    (the NVML call or DCGM field) and how it is converted. `labels` are all label names in order.
    """

    name: str
    type: str  # "gauge" | "counter" | "histogram" (labels without `le`, which the exposition adds)
    unit: str
    help: str
    labels: tuple[str, ...]
    source: str
    # Only for documentation: which part of the exporter produces the series.
    group: str = "gpu"

    @property
    def family_name(self) -> str:
        """The name prometheus_client wants: counters without `_total`, info without `_info`."""
        if self.type == "counter":
            return self.name[: -len("_total")]
        return self.name


ALL: list[MetricSpec] = []


def _spec(
    name: str,
    type_: str,
    unit: str,
    help_: str,
    source: str,
    labels: tuple[str, ...] = DEVICE_LABELS,
    group: str = "gpu",
) -> MetricSpec:
    spec = MetricSpec(PREFIX + name, type_, unit, help_, tuple(labels), source, group)
    ALL.append(spec)
    return spec


# --- identity --------------------------------------------------------------------------------
DRIVER_INFO = _spec(
    "driver_info",
    "gauge",
    "",
    "NVIDIA driver and NVML library versions on this node; value is always 1.",
    "nvmlSystemGetDriverVersion, nvmlSystemGetNVMLVersion",
    labels=("driver_version", "nvml_version"),
    group="identity",
)
GPUS_EXPECTED = _spec(
    "gpus_expected",
    "gauge",
    "",
    "Full GPUs the exporter expects on this node: every GPU the driver has enumerated since the exporter "
    "started. A GPU that leaves the enumeration (fell off the bus, unbound) stays expected and is reported "
    "as gpulens_gpu_up 0 under its own UUID.",
    "nvmlDeviceGetCount, nvmlDeviceGetUUID",
    labels=(),
    group="identity",
)
GPUS_VISIBLE = _spec(
    "gpus_visible",
    "gauge",
    "",
    "Expected GPUs that answer: enumerated, and readable in the last sample.",
    "nvmlDeviceGetCount, nvmlDeviceGetUUID",
    labels=(),
    group="identity",
)
GPU_INFO = _spec(
    "gpu_info",
    "gauge",
    "",
    "Identity of each GPU and MIG instance; value is always 1. Join on uuid to add model or "
    "MIG profile to any per-device series. For MIG instances parent_uuid names the physical GPU.",
    "nvmlDeviceGetName, nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMigMode, nvmlDeviceGetGpuInstanceId",
    labels=DEVICE_LABELS + ("model", "pci_bus_id", "mig_mode", "mig_profile", "parent_uuid"),
    group="identity",
)
GPU_UP = _spec(
    "gpu_up",
    "gauge",
    "",
    "1 if the last sample of this device succeeded, 0 if the device failed (for example fell off "
    "the bus: NVML_ERROR_GPU_IS_LOST). A failed device keeps only this series.",
    "result of sampling the device",
    group="identity",
)

# --- activity --------------------------------------------------------------------------------
UTILIZATION = _spec(
    "gpu_utilization_ratio",
    "gauge",
    "ratio",
    "Fraction of the last sample period (1/6 s to 1 s) in which at least one kernel ran "
    "(nvidia-smi utilization.gpu / 100). One tiny kernel keeps it at 1: use SM activity to judge "
    "how much of the GPU works. Not supported on MIG instances.",
    "nvmlDeviceGetUtilizationRates().gpu / 100",
)
MEMORY_CONTROLLER_UTILIZATION = _spec(
    "gpu_memory_controller_utilization_ratio",
    "gauge",
    "ratio",
    "Fraction of the last sample period in which device memory was read or written "
    "(nvidia-smi utilization.memory / 100). This is not memory capacity.",
    "nvmlDeviceGetUtilizationRates().memory / 100",
)
GRAPHICS_ENGINE_ACTIVE = _spec(
    "gpu_graphics_engine_active_ratio",
    "gauge",
    "ratio",
    "Fraction of time the graphics or compute engine was active (DCGM GR_ENGINE_ACTIVE). "
    "The per-instance activity signal on MIG.",
    "NVML GPM NVML_GPM_METRIC_GRAPHICS_UTIL / 100; DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)
SM_ACTIVE = _spec(
    "gpu_sm_active_ratio",
    "gauge",
    "ratio",
    "Fraction of time at least one warp was resident on an SM, averaged over all SMs. Warps waiting "
    "on memory count. NVIDIA: >= 0.8 is necessary for effective use, < 0.5 likely ineffective. "
    "Omitted where neither GPM (Hopper+) nor DCGM profiling provides it.",
    "NVML GPM NVML_GPM_METRIC_SM_UTIL / 100; DCGM_FI_PROF_SM_ACTIVE",
)
SM_OCCUPANCY = _spec(
    "gpu_sm_occupancy_ratio",
    "gauge",
    "ratio",
    "Resident warps as a fraction of the theoretical maximum, averaged over SMs.",
    "NVML GPM NVML_GPM_METRIC_SM_OCCUPANCY / 100; DCGM_FI_PROF_SM_OCCUPANCY",
)
TENSOR_ACTIVE = _spec(
    "gpu_tensor_active_ratio",
    "gauge",
    "ratio",
    "Fraction of cycles any tensor pipe was active.",
    "NVML GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL / 100; DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
)
DRAM_ACTIVE = _spec(
    "gpu_dram_active_ratio",
    "gauge",
    "ratio",
    "Fraction of cycles moving data to or from device memory; about 0.8 is the practical peak.",
    "NVML GPM NVML_GPM_METRIC_DRAM_BW_UTIL / 100; DCGM_FI_PROF_DRAM_ACTIVE",
)
FP64_ACTIVE = _spec(
    "gpu_fp64_active_ratio",
    "gauge",
    "ratio",
    "Fraction of cycles the FP64 pipe was active.",
    "NVML GPM NVML_GPM_METRIC_FP64_UTIL / 100; DCGM_FI_PROF_PIPE_FP64_ACTIVE",
)
FP32_ACTIVE = _spec(
    "gpu_fp32_active_ratio",
    "gauge",
    "ratio",
    "Fraction of cycles the FP32 pipe was active.",
    "NVML GPM NVML_GPM_METRIC_FP32_UTIL / 100; DCGM_FI_PROF_PIPE_FP32_ACTIVE",
)
FP16_ACTIVE = _spec(
    "gpu_fp16_active_ratio",
    "gauge",
    "ratio",
    "Fraction of cycles the FP16 pipe was active.",
    "NVML GPM NVML_GPM_METRIC_FP16_UTIL / 100; DCGM_FI_PROF_PIPE_FP16_ACTIVE",
)

# Counters the sampler integrates at a fixed rate, so that rate() over any window is the true
# average however rarely Prometheus scrapes (see exporter/sampler.py).
BUSY_SECONDS = _spec(
    "gpu_busy_seconds_total",
    "counter",
    "seconds",
    "Seconds in which a kernel ran: the integral of the device's activity (utilization, or "
    "graphics-engine activity on MIG instances). rate() gives the true average busy fraction.",
    "sampler: sum of activity x sample interval",
)
SM_ACTIVE_SECONDS = _spec(
    "gpu_sm_active_seconds_total",
    "counter",
    "seconds",
    "Integral of SM activity over time. rate() gives the true average SM activity ratio.",
    "sampler: sum of gpu_sm_active_ratio x sample interval",
)
IDLE_SECONDS = _spec(
    "gpu_idle_seconds_total",
    "counter",
    "seconds",
    f"Seconds in which the device did no work (activity under {IDLE_ACTIVITY}).",
    f"sampler: sum of sample intervals with activity < {IDLE_ACTIVITY}",
)

# The shape of activity between scrapes (see core/activity.py): what a scrape's average hides.
_BUCKETS = ", ".join(f"{b:g}" for b in activity.BUCKETS[:-1])
ACTIVITY = _spec(
    "gpu_activity_ratio",
    "histogram",
    "ratio",
    "Distribution of the device's activity over every sample the driver kept (utilization every 1/6 s "
    "to 1 s; one sample per sampler tick where the driver keeps none, and on MIG instances the graphics-"
    'engine activity). rate(_bucket{le="0.1"}) / rate(_count) is the share of time at or below 10% '
    "over any window, however rarely Prometheus scrapes: bursts and gaps survive the scrape's average. "
    f"Buckets: {_BUCKETS}, +Inf.",
    "nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) / 100, each sample once; else the tick's activity",
)
ACTIVITY_TRANSITIONS = _spec(
    "gpu_activity_transitions_total",
    "counter",
    "",
    f"Times the device's activity crossed {activity.BUSY_LEVEL:g} between consecutive samples (busy to "
    "idle or back). Several a minute: work in bursts (training steps waiting for input, or requests).",
    "sampler: consecutive samples of gpulens_gpu_activity_ratio on either side of 0.5",
)
STEADY_BURSTS = _spec(
    "gpu_steady_bursts_total",
    "counter",
    "",
    f"Bursts of activity (rises through {activity.BUSY_LEVEL:g}) that started within a factor "
    f"{activity.STEADY_FACTOR:g} of the previous burst's period. Training steps repeat at a steady period, "
    "requests arrive at random: 2 x rate(this) / rate(gpulens_gpu_activity_transitions_total) is near 1 "
    "for steps and about 0.2 for Poisson arrivals.",
    "sampler: period between burst starts vs the one before",
)

# --- memory ----------------------------------------------------------------------------------
MEMORY_USED = _spec(
    "gpu_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory in use by processes and contexts.",
    "nvmlDeviceGetMemoryInfo_v2().used",
)
MEMORY_TOTAL = _spec(
    "gpu_memory_total_bytes", "gauge", "bytes", "Installed device memory.", "nvmlDeviceGetMemoryInfo_v2().total"
)
MEMORY_RESERVED = _spec(
    "gpu_memory_reserved_bytes",
    "gauge",
    "bytes",
    "Device memory reserved by the driver and firmware. Usable capacity is total - reserved.",
    "nvmlDeviceGetMemoryInfo_v2().reserved",
)

# --- interconnect ----------------------------------------------------------------------------
PCIE_TRANSMIT = _spec(
    "gpu_pcie_transmit_bytes_total",
    "counter",
    "bytes",
    "Bytes the GPU sent over PCIe (device to host).",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_COUNT_TX_BYTES)",
)
PCIE_RECEIVE = _spec(
    "gpu_pcie_receive_bytes_total",
    "counter",
    "bytes",
    "Bytes the GPU received over PCIe (host to device).",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_COUNT_RX_BYTES)",
)
NVLINK_TRANSMIT = _spec(
    "gpu_nvlink_transmit_bytes_total",
    "counter",
    "bytes",
    "Data bytes sent over all NVLinks of the GPU.",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX) x 1024 (KiB)",
)
NVLINK_RECEIVE = _spec(
    "gpu_nvlink_receive_bytes_total",
    "counter",
    "bytes",
    "Data bytes received over all NVLinks of the GPU.",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) x 1024 (KiB)",
)
NVLINK_LINKS = _spec(
    "gpu_nvlink_links",
    "gauge",
    "",
    "Number of NVLinks of the GPU; 0 on PCIe-only GPUs.",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)",
)
NVLINK_LINKS_DOWN = _spec(
    "gpu_nvlink_links_down",
    "gauge",
    "",
    "NVLinks of the GPU that are down: inactive, or active with traffic disabled (a link asleep in low "
    "power is up). Any above 0 slows or breaks the GPU's peer traffic; the exporter's log names the links.",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_GET_STATE, scopeId=link) on Hopper and newer, "
    "nvmlDeviceGetNvLinkState(link) before",
)
NVLINK_ERRORS = _spec(
    "gpu_nvlink_errors_total",
    "counter",
    "",
    "NVLink errors over all links of the GPU since the driver loaded, by type: crc_flit and crc_data "
    "(matter at 100/s and more, DCGM), replay (a retransmission) and recovery (the link retrained).",
    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL)",
    labels=DEVICE_LABELS + ("type",),
    group="errors",
)
PCIE_LINK_GENERATION = _spec(
    "gpu_pcie_link_generation",
    "gauge",
    "",
    "Current PCIe link generation. Below gpu_pcie_link_max_generation under load means a slow slot.",
    "nvmlDeviceGetCurrPcieLinkGeneration",
)
PCIE_LINK_MAX_GENERATION = _spec(
    "gpu_pcie_link_max_generation",
    "gauge",
    "",
    "Maximum PCIe link generation of the GPU and system.",
    "nvmlDeviceGetMaxPcieLinkGeneration",
)
PCIE_LINK_WIDTH = _spec(
    "gpu_pcie_link_width", "gauge", "", "Current PCIe link width in lanes.", "nvmlDeviceGetCurrPcieLinkWidth"
)
PCIE_LINK_MAX_WIDTH = _spec(
    "gpu_pcie_link_max_width", "gauge", "", "Maximum PCIe link width in lanes.", "nvmlDeviceGetMaxPcieLinkWidth"
)
TOPOLOGY = _spec(
    "gpu_topology_info",
    "gauge",
    "",
    "How two GPUs of this node connect; value is always 1. level is their closest common ancestor on "
    "PCIe: internal, single_switch, multiple_switches, host_bridge (one root complex), numa_node (across "
    "root complexes of one CPU socket), system (across sockets). p2p is how peer-to-peer reads travel: "
    "nvlink, pcie, none (through host memory) or unknown. Read at discovery.",
    "nvmlDeviceGetTopologyCommonAncestor; nvmlDeviceGetP2PStatus(NVML_P2P_CAPS_INDEX_NVLINK, then _READ)",
    labels=("gpu", "uuid", "peer_uuid", "level", "p2p"),
)

# --- clocks, power, thermal --------------------------------------------------------------------
SM_CLOCK = _spec(
    "gpu_sm_clock_hertz", "gauge", "hertz", "Current SM clock.", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM) x 1e6 (MHz)"
)
SM_CLOCK_MAX = _spec(
    "gpu_sm_clock_max_hertz",
    "gauge",
    "hertz",
    "Maximum SM clock.",
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM) x 1e6 (MHz)",
)
MEMORY_CLOCK = _spec(
    "gpu_memory_clock_hertz",
    "gauge",
    "hertz",
    "Current memory clock.",
    "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) x 1e6 (MHz)",
)
POWER = _spec("gpu_power_watts", "gauge", "watts", "Power draw.", "nvmlDeviceGetPowerUsage / 1000 (mW)")
POWER_LIMIT = _spec(
    "gpu_power_limit_watts", "gauge", "watts", "Enforced power limit.", "nvmlDeviceGetEnforcedPowerLimit / 1000 (mW)"
)
ENERGY = _spec(
    "gpu_energy_joules_total",
    "counter",
    "joules",
    "Energy consumed since the driver loaded.",
    "nvmlDeviceGetTotalEnergyConsumption / 1000 (mJ)",
)
TEMPERATURE = _spec(
    "gpu_temperature_celsius",
    "gauge",
    "celsius",
    "GPU core temperature.",
    "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
)
CLOCK_EVENT_ACTIVE = _spec(
    "gpu_clock_event_active",
    "gauge",
    "",
    "1 while the clock event (throttle) reason is active. reason is one of gpu_idle, "
    "applications_clocks_setting, sw_power_cap, hw_slowdown, sync_boost, sw_thermal, hw_thermal, "
    "hw_power_brake, display_clocks. A brief sw_power_cap is normal boost behaviour.",
    "nvmlDeviceGetCurrentClocksEventReasons bitmask",
    labels=DEVICE_LABELS + ("reason",),
)
CLOCK_EVENT_SECONDS = _spec(
    "gpu_clock_event_seconds_total",
    "counter",
    "seconds",
    "Seconds each clock event (throttle) reason was active, integrated by the sampler. "
    "rate() gives the fraction of time throttled for that reason.",
    "sampler: sum of sample intervals with the reason bit set",
    labels=DEVICE_LABELS + ("reason",),
)

CLOCK_VIOLATION_SECONDS = _spec(
    "gpu_clock_violation_seconds_total",
    "counter",
    "seconds",
    "Seconds the clocks were held below what was asked for, by reason: power, thermal, sync_boost, "
    "board_limit, low_util, reliability (DCGM's violation counters).",
    "DCGM_FI_DEV_*_VIOLATION / 1e9 (ns)",
    labels=DEVICE_LABELS + ("reason",),
)

# --- errors ----------------------------------------------------------------------------------
XID_ERRORS = _spec(
    "gpu_xid_errors_total",
    "counter",
    "",
    "XID errors reported by the driver, by XID code. Every event counts, repeated ones too.",
    "nvmlEventSetWait_v2 with nvmlEventTypeXidCriticalError",
    labels=DEVICE_LABELS + ("xid",),
    group="errors",
)
#: XIDs the application causes (NVIDIA's XID catalogue, docs.nvidia.com/deploy/xid-errors): 13 graphics
#: engine exception (an illegal address, an assert in a kernel), 31 GPU memory page fault, 43 the GPU
#: stopped processing (a user application fault), 45 preemptive cleanup (the process was killed). The
#: workload owner's business; every other XID is the node owner's (hardware, driver or NVLink trouble).
APPLICATION_XIDS = (13, 31, 43, 45)
#: What the hardware XIDs seen most often mean (NVIDIA's XID catalogue), for evidence a person reads.
HARDWARE_XIDS = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "the GPU fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def is_hardware_xid(code: float) -> bool:
    """Whether an XID code points at the GPU, its driver or its links rather than the application: any
    code above 0 that is not one of APPLICATION_XIDS (codes NVIDIA has not catalogued yet included)."""
    return code > 0 and code not in APPLICATION_XIDS


def describe_xid(code: float) -> str:
    """'XID 79 (the GPU fell off the bus)', or 'XID 150' for a code without a description here."""
    meaning = HARDWARE_XIDS.get(int(code))
    return f"XID {code:.0f}" + (f" ({meaning})" if meaning else "")


ECC_ERRORS = _spec(
    "gpu_ecc_errors_total",
    "counter",
    "",
    "ECC errors since the GPU was first used (aggregate counter), by type corrected/uncorrected.",
    "nvmlDeviceGetTotalEccErrors(type, NVML_AGGREGATE_ECC)",
    labels=DEVICE_LABELS + ("type",),
    group="errors",
)
REMAPPED_ROWS = _spec(
    "gpu_remapped_rows",
    "gauge",
    "",
    "Memory rows remapped so far, by cause correctable/uncorrectable (Ampere+).",
    "nvmlDeviceGetRemappedRows",
    labels=DEVICE_LABELS + ("cause",),
    group="errors",
)
ROW_REMAP_PENDING = _spec(
    "gpu_row_remap_pending",
    "gauge",
    "",
    "1 if a row remap is pending and the GPU needs a reset to apply it.",
    "nvmlDeviceGetRemappedRows().isPending",
    group="errors",
)
ROW_REMAP_FAILED = _spec(
    "gpu_row_remap_failed",
    "gauge",
    "",
    "1 if a row remap failed: the GPU should be taken out of service.",
    "nvmlDeviceGetRemappedRows().failureOccurred",
    group="errors",
)

# --- processes -------------------------------------------------------------------------------
PROCESS_INFO = _spec(
    "process_info",
    "gauge",
    "",
    "A compute process holding the device; value is always 1. pid is the host PID; container_id is "
    'the container runtime\'s ID from /proc/<pid>/cgroup (also outside Kubernetes), or "".',
    "nvmlDeviceGetComputeRunningProcesses_v3, nvmlSystemGetProcessName, /proc/<pid>/cgroup",
    labels=PROCESS_LABELS + ("command", "container_id"),
    group="process",
)
PROCESS_MEMORY_USED = _spec(
    "process_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory held by the process.",
    "nvmlDeviceGetComputeRunningProcesses_v3().usedGpuMemory",
    labels=PROCESS_LABELS,
    group="process",
)
PROCESS_UTILIZATION = _spec(
    "process_utilization_ratio",
    "gauge",
    "ratio",
    "The process's share of SM time in the last sample period.",
    "nvmlDeviceGetProcessUtilization().smUtil / 100",
    labels=PROCESS_LABELS,
    group="process",
)
PROCESS_BUSY_SECONDS = _spec(
    "process_busy_seconds_total",
    "counter",
    "seconds",
    "Integral of the process's SM share over time; rate() gives its true average share.",
    "sampler: sum of process_utilization_ratio x sample interval",
    labels=PROCESS_LABELS,
    group="process",
)
PROCESS_IDLE_SECONDS = _spec(
    "process_idle_seconds_total",
    "counter",
    "seconds",
    f"Seconds the process held the device without using it (share under {IDLE_ACTIVITY}).",
    f"sampler: sum of sample intervals with process_utilization_ratio < {IDLE_ACTIVITY}",
    labels=PROCESS_LABELS,
    group="process",
)

# --- pods --------------------------------------------------------------------------------------
GPU_POD_INFO = _spec(
    "gpu_pod_info",
    "gauge",
    "",
    "The kubelet assigned this GPU or MIG instance to this pod's container; value is always 1. A "
    "time-sliced GPU has one series per pod. Join on uuid to put pod labels on any device series: "
    "gpulens_gpu_sm_active_ratio * on(uuid) group_left(namespace, pod) gpulens_gpu_pod_info.",
    "kubelet pod-resources API v1 List",
    labels=POD_LABELS,
    group="pod",
)
GPU_PODS = _spec(
    "gpu_pods",
    "gauge",
    "",
    "Number of pods the kubelet assigned this device to; 0 means no pod holds it (memory used on such "
    "a GPU is a finished job's leftovers). Absent when the kubelet cannot be read.",
    "kubelet pod-resources API v1 List",
    group="pod",
)
POD_MEMORY_USED = _spec(
    "pod_gpu_memory_used_bytes",
    "gauge",
    "bytes",
    "Device memory held by the pod's processes on this device.",
    "sum of gpulens_process_memory_used_bytes by pod (PID to pod through /proc/<pid>/cgroup)",
    labels=POD_LABELS,
    group="pod",
)
POD_UTILIZATION = _spec(
    "pod_gpu_utilization_ratio",
    "gauge",
    "ratio",
    "The pod's share of the device's SM time in the last sample period; on a GPU shared by several "
    "pods (time-slicing, MPS) this is how the device is split among them.",
    "sum of gpulens_process_utilization_ratio by pod",
    labels=POD_LABELS,
    group="pod",
)
POD_BUSY_SECONDS = _spec(
    "pod_gpu_busy_seconds_total",
    "counter",
    "seconds",
    "Integral of the pod's SM share on this device; rate() gives its true average share.",
    "sampler: sum of gpulens_pod_gpu_utilization_ratio x sample interval",
    labels=POD_LABELS,
    group="pod",
)

POD_ACTIVITY = _spec(
    "pod_gpu_activity_ratio",
    "histogram",
    "ratio",
    "Distribution of the pod's share of the device over every per-process sample the driver kept "
    "(the sum of its processes' SM shares at each sample): gpulens_gpu_activity_ratio for one pod on a "
    "GPU it may share (time-slicing, MPS). Absent where the driver has no per-process utilization (MIG).",
    "nvmlDeviceGetProcessUtilization().smUtil / 100, summed by pod per sample timestamp",
    labels=POD_LABELS,
    group="pod",
)

# --- the exporter itself ---------------------------------------------------------------------
BUILD_INFO = _spec(
    "exporter_build_info",
    "gauge",
    "",
    "gpulens version; value is always 1.",
    "gpulens",
    labels=("version", "source"),
    group="self",
)
COLLECTOR_SUCCESS = _spec(
    "exporter_collector_success",
    "gauge",
    "",
    "1 if the collector's last run succeeded. A collector that cannot reach its source reports 0 "
    "and the rest of the scrape is still served.",
    "sampler",
    labels=("collector",),
    group="self",
)
COLLECTOR_DURATION = _spec(
    "exporter_collector_duration_seconds",
    "gauge",
    "seconds",
    "How long the collector's last run took.",
    "sampler",
    labels=("collector",),
    group="self",
)
COLLECTOR_FAILURES = _spec(
    "exporter_collector_failures_total",
    "counter",
    "",
    "Runs of the collector that failed for a reason foreseen (its source unreachable, slow or answering "
    "what gpulens refuses), so that failures between two scrapes are not lost.",
    "sampler",
    labels=("collector",),
    group="self",
)
COLLECTOR_ERRORS = _spec(
    "exporter_collector_errors_total",
    "counter",
    "",
    "Unexpected failures (bugs) of the collector's loop: the sampler's under the source's name (nvml, dcgm, "
    "simulated), the kubelet reader's, the dcgm-exporter reader's. Each is logged once with its traceback "
    "and retried after a backoff doubling up to 120 s: the loop never ends.",
    "sampler",
    labels=("collector",),
    group="self",
)
KUBELET_UNMAPPED = _spec(
    "exporter_kubelet_unmapped_device_ids",
    "gauge",
    "",
    "GPU device IDs in the kubelet's last answer that gpulens could not map to a device on this node, "
    "by reason: unknown_format (a device plugin naming scheme gpulens does not know) or "
    "no_such_device (no GPU or MIG instance with that ID here).",
    "kubelet pod-resources API v1 List",
    labels=("reason",),
    group="self",
)
METRIC_SOURCE = _spec(
    "exporter_metric_source_devices",
    "gauge",
    "",
    "How many devices' values of each metric came from each source (nvml, dcgm, simulated): where "
    "NVML lacks a field (SM activity before Hopper) and a dcgm-exporter is configured, DCGM fills it.",
    "sampler",
    labels=("metric", "source"),
    group="self",
)
HTTP_CONNECTIONS_SHED = _spec(
    "http_connections_shed_total",
    "counter",
    "",
    "Connections the HTTP server closed to protect its scrapes and probes, by reason: full (all slots "
    "taken: the oldest idle or unfinished connection made room for a new one), busy (every slot busy "
    "answering: the new connection closed), slow_head (a request head took over 10 s). Served by the "
    "exporter and the analyzer alike; a rise is a flood or a slowloris, not a scraper's fault.",
    "HTTP server",
    labels=("reason",),
    group="self",
)
SAMPLE_AGE = _spec(
    "exporter_sample_age_seconds",
    "gauge",
    "seconds",
    "Age of the latest complete sample at scrape time. Grows when the source hangs: the scrape "
    "then serves the last complete sample rather than waiting.",
    "sampler",
    labels=(),
    group="self",
)
SAMPLE_INTERVAL = _spec(
    "exporter_sample_interval_seconds",
    "gauge",
    "seconds",
    "Configured interval of the fixed-rate sampler (--sampler.interval).",
    "configuration",
    labels=(),
    group="self",
)

# --- the analyzer (gpulens analyzer) ----------------------------------------------------------------
# The analyzer serves the whole fleet from one place, so `node` here is the pod's node, an identity
# of the pod, not the host of the scrape target.
ANALYZER_POD_LABELS = ("namespace", "pod", "node")
POD_BOTTLENECK = _spec(
    "pod_bottleneck",
    "gauge",
    "",
    "StateSet: 1 for the pod's current bottleneck class, 0 for the others. bottleneck is a pod class of "
    "gpulens (docs/signals.md).",
    "analyzer verdict",
    labels=ANALYZER_POD_LABELS + ("bottleneck",),
    group="analyzer",
)
GPU_WITHOUT_POD = _spec(
    "gpu_without_pod",
    "gauge",
    "",
    "StateSet of each GPU (or MIG instance) no pod holds, in data that attributes GPUs to pods: 1 for its "
    "class, 0 for the other. bottleneck is a GPU class of gpulens (docs/signals.md): capacity nobody holds, or "
    'a process the kubelet did not assign using it. Its waste is in gpulens_wasted_* with namespace "".',
    "analyzer verdict",
    labels=("node", "gpu", "bottleneck"),
    group="analyzer",
)
POD_BOTTLENECK_CONFIDENCE = _spec(
    "pod_bottleneck_confidence",
    "gauge",
    "",
    "How sure the analyzer is of the pod's bottleneck: a score from 0 to 1.",
    "analyzer verdict",
    labels=ANALYZER_POD_LABELS,
    group="analyzer",
)
POD_BOTTLENECK_INFO = _spec(
    "pod_bottleneck_info",
    "gauge",
    "",
    "The pod's verdict in words, value always 1, for alert annotations: the evidence that decided it "
    "(signals and the thresholds they crossed), secondary findings, and the fix to try.",
    "analyzer verdict",
    labels=ANALYZER_POD_LABELS + ("bottleneck", "secondary", "evidence", "recommendation"),
    group="analyzer",
)
POD_BOTTLENECK_TIME = _spec(
    "pod_bottleneck_time_ratio",
    "gauge",
    "ratio",
    "Share of the analyzer's history (--analysis.history, a day by default) the pod spent in each "
    "bottleneck class, of the time its samples covered; only classes it was in appear.",
    "analyzer history",
    labels=ANALYZER_POD_LABELS + ("bottleneck",),
    group="analyzer",
)
POD_SM_ACTIVE = _spec(
    "pod_sm_active_ratio",
    "gauge",
    "ratio",
    "The pod's mean activity over the analysis window: SM activity, or graphics-engine activity or "
    "utilization where SM activity is not available.",
    "analyzer window",
    labels=ANALYZER_POD_LABELS,
    group="analyzer",
)
POD_IDLE = _spec(
    "pod_idle_ratio",
    "gauge",
    "ratio",
    "Fraction of the window the pod's GPUs did no work.",
    "analyzer window",
    labels=ANALYZER_POD_LABELS,
    group="analyzer",
)
POD_GPUS = _spec(
    "pod_gpus",
    "gauge",
    "",
    "GPUs (or MIG instances) the pod holds.",
    "analyzer window",
    labels=ANALYZER_POD_LABELS,
    group="analyzer",
)
POD_WORKLOAD = _spec(
    "pod_workload_info",
    "gauge",
    "",
    "What the pod is, value always 1: workload_kind is notebook, serving, job or unknown, and engine the serving "
    'engine (vllm, tgi, triton, sglang, or "" where none is known), from its owners, labels and images as '
    "kube-state-metrics exports them and the kinds rules of --analysis.config (docs/workloads.md). Join it on "
    "namespace and pod to split any gpulens_pod_* series by kind. One series a pod.",
    "analyzer: kube_pod_owner, kube_replicaset_owner, kube_job_owner, kube_pod_labels, kube_pod_container_info",
    labels=ANALYZER_POD_LABELS + ("workload_kind", "engine"),
    group="analyzer",
)
POD_LAST_SAMPLE = _spec(
    "pod_last_sample_timestamp_seconds",
    "gauge",
    "seconds",
    "Unix time the pod's newest sample in the analyzer's window ends. A pod whose samples stopped while "
    "others' went on (its node stopped reporting, or it ended) keeps only this series: its gpulens_pod_* "
    "verdict series end, and the API marks its verdict stale.",
    "analyzer window",
    labels=ANALYZER_POD_LABELS,
    group="analyzer",
)
WASTED_GPU_SECONDS = _spec(
    "wasted_gpu_seconds_total",
    "counter",
    "seconds",
    "GPU-seconds allocated but not worked ((1 - activity) x time), by namespace and bottleneck class.",
    "analyzer: each cycle adds the window's waste rate x the cycle's length",
    labels=("namespace", "bottleneck"),
    group="analyzer",
)
WASTED_COST = _spec(
    "wasted_cost_dollars_total",
    "counter",
    "",
    "Money the wasted GPU-seconds cost at the configured price per GPU-hour (USD by default), by "
    "namespace and bottleneck class.",
    "analyzer: wasted GPU-hours x price of the GPU model",
    labels=("namespace", "bottleneck"),
    group="analyzer",
)
WORKLOAD_LABELS = ("namespace", "owner_kind", "owner", "team", "bottleneck")
WORKLOAD_WASTED_GPU_SECONDS = _spec(
    "workload_wasted_gpu_seconds_total",
    "counter",
    "seconds",
    "The same GPU-seconds by workload: the pods' owner as kube-state-metrics resolves it (owner_kind is "
    "Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod or another controller's kind; \"\" and the pod's "
    "name as owner where kube-state-metrics is not scraped), and the team from --team-label. A series per "
    "workload and class it has been in: far fewer than pods for replicated workloads.",
    "analyzer: each cycle adds the window's waste rate x the cycle's length; owners from kube_pod_owner, "
    "kube_replicaset_owner, kube_job_owner; team from kube_pod_labels",
    labels=WORKLOAD_LABELS,
    group="analyzer",
)
WORKLOAD_WASTED_COST = _spec(
    "workload_wasted_cost_dollars_total",
    "counter",
    "",
    "Money the wasted GPU-seconds cost, by workload and team (see gpulens_workload_wasted_gpu_seconds_total).",
    "analyzer: wasted GPU-hours x price of the GPU model",
    labels=WORKLOAD_LABELS,
    group="analyzer",
)
#: A workload's devices of one model, as showback charges them (docs/showback.md): a series a workload and GPU model.
SHOWBACK_LABELS = ("namespace", "owner_kind", "owner", "team", "gpu_model")
WORKLOAD_ALLOCATED_GPU_SECONDS = _spec(
    "workload_allocated_gpu_seconds_total",
    "counter",
    "seconds",
    "Device-seconds the workload's pods held devices of this model (a GPU's, or a MIG instance's: gpu_model names "
    'its profile), whatever they did: what showback charges. GPUs no pod holds count with namespace and owner "". '
    "Owners and team as gpulens_workload_wasted_gpu_seconds_total's.",
    "analyzer: each cycle adds the time its new samples cover x the devices held",
    labels=SHOWBACK_LABELS,
    group="analyzer",
)
WORKLOAD_ALLOCATED_COST = _spec(
    "workload_allocated_cost_dollars_total",
    "counter",
    "",
    "What those device-seconds cost at the price in use (OpenCost's for the node, --prices, the catalogue; a MIG "
    "instance at its share of its GPU): rate() x 86400 is the workload's spend a day, what budgets follow.",
    "analyzer: allocated device-hours x the device's price",
    labels=SHOWBACK_LABELS,
    group="analyzer",
)
WORKLOAD_WORKED_GPU_SECONDS = _spec(
    "workload_worked_gpu_seconds_total",
    "counter",
    "seconds",
    "Of the allocated device-seconds with an activity signal, the time worked (SM activity where profiling fields "
    "are read, else utilization; the share of time with work for sparse use). Divided by "
    "gpulens_workload_allocated_gpu_seconds_total: the share of the GPU time paid for that worked. Time without "
    "an activity signal (power and memory only) counts in neither this nor gpulens_workload_judged_gpu_seconds_total.",
    "analyzer: each cycle adds the allocated device-seconds x the window's worked share",
    labels=SHOWBACK_LABELS,
    group="analyzer",
)
WORKLOAD_JUDGED_GPU_SECONDS = _spec(
    "workload_judged_gpu_seconds_total",
    "counter",
    "seconds",
    "Of the allocated device-seconds, those with an activity signal: the denominator of the worked share.",
    "analyzer: each cycle adds the allocated device-seconds where the window read an activity signal",
    labels=SHOWBACK_LABELS,
    group="analyzer",
)
#: A workload the plan changes: its namespace, its owner as reports name it (namespace/Kind/name), its team,
#: and the action. One series a workload with an action: bounded by the workloads, not the pods.
PLAN_LABELS = ("namespace", "owner", "team", "action")
PLAN_SAVING = _spec(
    "plan_monthly_saving_dollars",
    "gauge",
    "",
    "What the right-sizing plan's action on the workload saves a month (30 days), at the prices in use (OpenCost, "
    "--prices, the catalogue), from its use over the analyzer's history (gpulens report: the same plan over "
    "any span). Absent until the history holds plan_projection_min_seconds (a day) of samples: a month is not "
    "projected from minutes.",
    "analyzer plan",
    labels=PLAN_LABELS,
    group="analyzer",
)
PLAN_GPUS = _spec(
    "plan_gpus",
    "gauge",
    "",
    "GPUs the workload holds now, and would after the plan's action (state now or after; a share of one GPU "
    "for a MIG slice or time-slicing).",
    "analyzer plan",
    labels=PLAN_LABELS + ("state",),
    group="analyzer",
)
#: A workload's changes (docs/changes.md): its namespace, owner and team as the plan's series name them, and what
#: changed (replicas, autoscaler_min_replicas, autoscaler_max_replicas, gpus_per_pod, ended). One series a
#: workload and kind of change it went through in the analyzer's history, its latest: bounded by the workloads.
CHANGE_LABELS = ("namespace", "owner", "team", "what")
CHANGE_OUTCOMES = ("held", "regressed", "too_early")
CHANGE_TIME = _spec(
    "change_timestamp_seconds",
    "gauge",
    "seconds",
    "Unix time the workload's latest change of this kind in the analyzer's history was first seen "
    "(kube-state-metrics' step, or the GPU samples' bin, it was first seen at).",
    "analyzer changes",
    labels=CHANGE_LABELS,
    group="analyzer",
)
CHANGE_OUTCOME = _spec(
    "change_outcome",
    "gauge",
    "",
    "What became of that change: 1 for its outcome, 0 for the others (held: nothing it protects got worse; "
    "regressed: its queue or latency rose past their spread before it, or a culled notebook's user came back "
    "within the cull timeout; too_early: its windows are under change_window_min_seconds). Its reason: the "
    "analyzer's /api/v1/changes.",
    "analyzer changes",
    labels=CHANGE_LABELS + ("outcome",),
    group="analyzer",
)
CHANGE_DAILY_SAVING = _spec(
    "change_daily_saving_dollars",
    "gauge",
    "",
    "What that change saved a day for the work done after it (negative: it cost more), over equal windows "
    "before and after: a fixed size costed as it ran before, a size an autoscaler sets at the before's cost per "
    "unit of work. Absent while it is too early to tell.",
    "analyzer changes",
    labels=CHANGE_LABELS,
    group="analyzer",
)
#: The cluster's share (analyzer/judging/scheduling.py, docs/cluster.md): by node pool and GPU model, and for the pods
#: waiting, by the reason of their wait now. Bounded by pools x models x 5 reasons, not by pods.
CLUSTER_LABELS = ("pool", "gpu_model")
CLUSTER_FREE_GPUS = _spec(
    "cluster_free_gpus",
    "gauge",
    "",
    "GPUs free now on the pool's schedulable nodes: allocatable less the requests of their pods (kube-state-metrics).",
    "analyzer: kube_node_status_allocatable, kube_node_spec_unschedulable, kube_pod_container_resource_requests, "
    "kube_pod_status_phase, kube_node_labels",
    labels=CLUSTER_LABELS,
    group="analyzer",
)
CLUSTER_LARGEST_FREE_GPUS = _spec(
    "cluster_largest_free_gpus",
    "gauge",
    "",
    "The most GPUs free now on one node of the pool: the largest pod it can start.",
    "analyzer: as gpulens_cluster_free_gpus",
    labels=CLUSTER_LABELS,
    group="analyzer",
)
CLUSTER_STRANDED_GPUS = _spec(
    "cluster_stranded_gpus",
    "gauge",
    "",
    "GPUs free now in the pool while a pod that may use them waits for more than any one node has free "
    "(fragmentation): enough in total, spread over nodes.",
    "analyzer: as gpulens_cluster_free_gpus",
    labels=CLUSTER_LABELS,
    group="analyzer",
)
CLUSTER_WAITING_PODS = _spec(
    "cluster_waiting_pods",
    "gauge",
    "",
    "GPU pods waiting now for a node, by the pool and model they were judged against (empty where they name "
    "none) and the reason of their wait now: fragmented, pool_full, too_large, no_node or room.",
    "analyzer: kube_pod_container_resource_requests (no node), kube_pod_status_phase, kube_pod_nodeselectors",
    labels=CLUSTER_LABELS + ("reason",),
    group="analyzer",
)
CLUSTER_WAITING_GPUS = _spec(
    "cluster_waiting_gpus",
    "gauge",
    "",
    "GPUs the pods waiting now ask for (see gpulens_cluster_waiting_pods).",
    "analyzer: as gpulens_cluster_waiting_pods",
    labels=CLUSTER_LABELS + ("reason",),
    group="analyzer",
)
CLUSTER_WAITING_LONGEST = _spec(
    "cluster_waiting_longest_seconds",
    "gauge",
    "seconds",
    "How long the longest-waiting of the pods waiting now has waited (since kube_pod_created).",
    "analyzer: as gpulens_cluster_waiting_pods, with kube_pod_created",
    labels=CLUSTER_LABELS + ("reason",),
    group="analyzer",
)
ANALYZER_LAST_SUCCESS = _spec(
    "analyzer_last_success_timestamp_seconds",
    "gauge",
    "seconds",
    "Unix time of the last analysis cycle that read its input and produced verdicts.",
    "analyzer",
    labels=(),
    group="analyzer",
)
ANALYZER_VERDICT_AGE = _spec(
    "analyzer_verdict_age_seconds",
    "gauge",
    "seconds",
    "Age of the verdicts served. Grows while the input (Prometheus, exporters) is down: the last "
    "verdicts are kept, marked stale, never replaced by guesses.",
    "analyzer",
    labels=(),
    group="analyzer",
)
ANALYZER_CYCLE_DURATION = _spec(
    "analyzer_cycle_duration_seconds",
    "gauge",
    "seconds",
    "How long the last analysis cycle took.",
    "analyzer",
    labels=(),
    group="analyzer",
)
ANALYZER_INPUT_ERRORS = _spec(
    "analyzer_input_errors_total",
    "counter",
    "",
    "Failed reads of the analyzer's input, by input (prometheus, exporter).",
    "analyzer",
    labels=("input",),
    group="analyzer",
)
ANALYZER_INPUT_IMPOSSIBLE_VALUES = _spec(
    "analyzer_input_impossible_values_total",
    "counter",
    "",
    "Values the analyzer's input answered that no GPU can report (NaN is missing, not impossible; infinite, "
    "negative, a ratio over 1, more memory than the GPU has, 1e308 watts), by input: left out of the "
    "verdicts as if not sampled, and the first logged once with its GPU, node and time.",
    "analyzer",
    labels=("input",),
    group="analyzer",
)

ANALYZER_INPUT_UP = _spec(
    "analyzer_input_up",
    "gauge",
    "",
    "1 if the analyzer's last read of this target of its input (a Prometheus, an exporter) succeeded, else "
    "0. Target is the URL without credentials.",
    "analyzer",
    labels=("input", "target"),
    group="analyzer",
)
ANALYZER_INPUT_READ_BYTES = _spec(
    "analyzer_input_read_bytes_total",
    "counter",
    "bytes",
    "Bytes of the answers the analyzer read from this target of its input (a Prometheus' query answers, an "
    "exporter's scrapes): what its cycles cost the store and the network. Target is the URL without "
    "credentials.",
    "analyzer",
    labels=("input", "target"),
    group="analyzer",
)
ANALYZER_INPUT_LAST_SUCCESS = _spec(
    "analyzer_input_last_success_timestamp_seconds",
    "gauge",
    "seconds",
    "Unix time of the analyzer's last successful read of this target of its input; absent until one.",
    "analyzer",
    labels=("input", "target"),
    group="analyzer",
)
ANALYZER_ERRORS = _spec(
    "analyzer_errors_total",
    "counter",
    "",
    "Unexpected failures of the analyzer's loop, by stage (input: an answer the input reader did not "
    "foresee; analysis: classifying or keeping history). Each is logged once with its traceback and "
    "retried: the loop never ends. Failures to reach the input are gpulens_analyzer_input_errors_total.",
    "analyzer",
    labels=("stage",),
    group="analyzer",
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in ALL}

#: NVML clock event reason bits (nvml.h nvmlClocksEventReason*), in bit order.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}

#: nvmlGpuTopologyLevel_t values and the label values gpulens gives them.
TOPOLOGY_LEVELS: dict[int, str] = {
    0: "internal",
    10: "single_switch",
    20: "multiple_switches",
    30: "host_bridge",
    40: "numa_node",
    50: "system",
}

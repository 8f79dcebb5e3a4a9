"""The bottleneck classes: gpulens' verdict vocabulary, one typed record per class.

Every list of class names and every set of them (what is a problem, what needs profiling fields, the
colours of the HTML report, the fix the verdicts and runbooks quote) derives from BOTTLENECKS, so adding a
class touches this table and its signature (analyzer/judging/classify.py). The names are public API: label values
of gpulens_pod_bottleneck and keys of the analyzer's JSON, in this order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

#: What the right-sizing plan (analyzer/outputs/plan.py) does with a unit of the class: nothing to change ("none":
#: a smaller GPU all the same where its use fits one), fix its code, input or placement ("fix": before or after a
#: smaller GPU, as Bottleneck.fix_before_size says), release its GPUs ("release"), give it a smaller share of a GPU
#: or fewer replicas ("resize"), repair the GPU or find the process first ("repair"), or no action because the
#: data does not say what would help ("not_planned").
PlanAction = Literal["none", "fix", "release", "resize", "repair", "not_planned"]
#: Whether a class's signature needs profiling fields (SM, DRAM activity): "needed" (it cannot hold
#: without them), "helps" (it holds on utilization, with its confidence capped and the evidence saying
#: so), "not needed" (utilization alone settles it).
Profiling = Literal["needed", "helps", "not needed"]


@dataclass(frozen=True)
class Bottleneck:
    """One verdict class."""

    name: str
    #: The fix to try: the verdicts carry it and the alert runbooks quote it.
    fix: str
    #: Its colour in the HTML report (colour-blind-safe where it matters: idle, serving and healthy differ
    #: in hue and lightness).
    colour: str
    #: A problem to fix: counted among the pods with a problem, and a pod's headline over a span.
    problem: bool
    profiling: Profiling
    #: A phase a running job can pass into (and out of), rather than what the pod or its placement is:
    #: the evaluation starts such scenarios mid-window after healthy training.
    phase: bool
    #: What the plan proposes for it.
    plan: PlanAction
    #: Whether the GPU time it leaves unused counts as waste: the time a problem costs. Not a healthy pod's
    #: headroom (the capacity it leaves unused is no cause to fix), nor time the data cannot judge.
    waste: bool = True
    #: What it judges: a pod, or a GPU that no pod holds (its own kind of row, keyed by node and GPU).
    unit: Literal["pod", "gpu"] = "pod"
    #: Why its fix comes before a smaller GPU that the unit's use fits today (Verdict.size), where it does: the
    #: plan then proposes the fix, and the size after it. "": the size is proposed first wherever it saves
    #: money (the class's own fix, or one that runs as fast on the smaller GPU).
    fix_before_size: str = ""


#: The causes of host_stall, each with its own fix: the verdict quotes the one its evidence shows.
STALL_CAUSES = {
    "checkpoint": "Checkpoints: long stalls at a steady period while one rank saves. Save asynchronously "
    "(torch.distributed.checkpoint.async_save, or a background thread), less often, sharded from every rank, or "
    "to faster storage (local NVMe, then upload).",
    "input": "One rank's input: short stalls every step on the rank named while the others wait for it. Check "
    "its DataLoader workers and CPU, its node's disk and network, and whether its data shard is larger.",
    "straggler": "A straggler: one rank works through every step while the others wait for it. If its clocks "
    "are lower, its GPU is slow (throttled, power-capped: see its node); if not, give it less work (even the "
    "shards, the pipeline stages) or move it off a busy host.",
    "offload": "CPU offload: the GPU waits on parameters or activations fetched from host memory over PCIe. "
    "Offload less (keep the parameters on the GPU and offload only the optimizer state), prefetch further ahead "
    "(FSDP backward_prefetch and forward_prefetch, DeepSpeed overlap_comm), or give the job more GPU memory or "
    "more GPUs so that it needs no offload.",
    "host_thread": "One host thread drives the GPU: the pod's CPU sits at one core while the GPU works little, "
    "waiting for the next launch (a generate() loop per token, per-item pre- or post-processing, a DataLoader "
    "with num_workers=0). Batch the work (batched generation, a serving engine such as vLLM, TGI or Triton), "
    "cut the launches (CUDA graphs, torch.compile), and move the rest of the loop to worker processes, not "
    "threads, which the GIL holds to one core.",
    "pipeline": "Pipeline bubbles: the pod's GPUs are pipeline stages that take turns, each waiting for its "
    "neighbours longer than its schedule needs (GPipe's bubble is (p-1)/(m+p-1) of a step for p stages and m "
    "micro-batches). Raise the micro-batches per step (gradient accumulation, chunks: m >= 4p), use an "
    "interleaved 1F1B schedule (Megatron-LM's virtual pipeline stages), or use fewer stages (more tensor or data "
    "parallelism).",
    "peer": "Waiting on a peer outside this pod: every GPU of the pod spins in collectives at low power. Look at "
    "the job's other pods (a rank that checkpoints, a straggler, a slower node) and the network between nodes.",
    "uneven": "Uneven work: one GPU far busier than another. Without power (or links) the data cannot say which "
    "waits for which: check that every rank gets the same work, and read the GPUs' power.",
}

#: The host_stall causes whose work runs as fast, or nearly, on a smaller GPU: one host thread's launches set
#: its pace, not the GPU's size, so the smaller GPU comes first and the fix after (each fix raises its use).
SIZE_FIRST_CAUSES = frozenset({"host_thread"})

#: What would settle the cause of unexplained low activity: its fix says so, and the plan after a resize.
UNEXPLAINED_SETTLES = (
    "add what would settle it: the pod's CPU use and limit (cAdvisor, kube-state-metrics), gpulens' exporter on "
    "its node (every second between scrapes), and its serving engine's request metrics (vLLM, Triton)"
)

#: The fix of insufficient_data where samples keep coming (Prometheus, the exporters), and where they
#: cannot (a file: it holds what it holds).
INSUFFICIENT_LIVE = (
    "Not enough samples to judge yet: wait for a longer window, or check that the exporter and Prometheus "
    "scrape this GPU."
)
INSUFFICIENT_FILE = (
    "Not enough samples in the files to judge: a verdict needs {min_samples} per GPU in its window "
    "(min_samples). Record for longer, or more often (nvidia-smi -l, dcgmi dmon -d, more saved scrapes)."
)

BOTTLENECKS: tuple[Bottleneck, ...] = (
    Bottleneck(
        "healthy",
        fix="Nothing to fix: the GPU is doing useful work.",
        colour="#4daf4a",
        problem=False,
        profiling="helps",
        phase=False,
        plan="none",
        waste=False,
    ),
    Bottleneck(
        "idle",
        fix="Release the GPU: stop the idle notebook or job, let an idle-culler reclaim it, or scale an unused "
        "serving replica to zero; if memory is held with no work, find the leftover process (nvidia-smi, "
        "DataLoader workers of a killed job).",
        colour="#e41a1c",
        problem=True,
        profiling="not needed",
        phase=True,
        plan="release",
    ),
    Bottleneck(
        "overprovisioned_serving",
        fix="This replica serves requests in bursts and waits in between: do not just "
        "release it, give it less GPU. Run fewer replicas and autoscale on request rate or queue depth "
        "(KEDA, Knative, with scale-to-zero where cold starts are acceptable), or share the GPU: MIG slices "
        "or time-slicing for several such replicas.",
        colour="#ff7f00",
        problem=True,
        profiling="helps",
        phase=True,
        plan="resize",
    ),
    Bottleneck(
        "data_starvation",
        fix="Feed the GPU faster: raise DataLoader num_workers, set pin_memory=True and "
        "prefetch_factor, move decoding and augmentation to the GPU (DALI), cache the dataset "
        "on local NVMe, and give the pod more CPU if it sits at its limit.",
        colour="#377eb8",
        problem=True,
        profiling="helps",
        phase=True,
        plan="fix",
        fix_before_size="fed faster it uses more of its GPU, which a smaller one would cap",
    ),
    Bottleneck(
        "unexplained",
        fix="The GPU does little work, and this data does not say why: no signature of a cause holds (see the "
        "evidence for the causes left open and what would tell them apart). Whatever the cause, give it the size "
        "its use needs (the verdict's size: a MIG slice or a smaller GPU where its peak fits one). To find the "
        f"cause before changing code, {UNEXPLAINED_SETTLES}.",
        colour="#80b1d3",
        problem=True,
        profiling="helps",
        phase=True,
        plan="resize",
    ),
    Bottleneck(
        "memory_bandwidth",
        fix="The kernels wait on device memory: use mixed precision (bf16/fp16) to halve traffic, "
        "fuse element-wise ops (torch.compile), raise arithmetic intensity with larger batches, "
        "or choose a GPU with more memory bandwidth.",
        colour="#984ea3",
        problem=True,
        profiling="needed",
        phase=True,
        plan="fix",
        fix_before_size="its kernels wait on memory, and a smaller GPU has less memory bandwidth",
    ),
    Bottleneck(
        "memory_fragmentation",
        fix="Memory fills up and the job dies: set PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True, call torch.cuda.empty_cache() between phases and leave a "
        "pause between jobs, free tensors you keep references to, or lower the batch size.",
        colour="#a65628",
        problem=True,
        profiling="helps",
        phase=True,
        plan="fix",
        fix_before_size="its memory fills until the job dies: it needs headroom until the fix holds",
    ),
    Bottleneck(
        "interconnect",
        fix="Communication dominates: overlap all-reduce with compute (DDP bucket size, "
        "gradient accumulation), compress or shard gradients (FSDP), or run on GPUs joined by "
        "NVLink; check the PCIe link runs at its full generation and width.",
        colour="#f781bf",
        problem=True,
        profiling="helps",
        phase=True,
        plan="fix",
        fix_before_size="with communication overlapped it uses more of its GPUs and their links",
    ),
    Bottleneck(
        "throttling",
        fix="The GPU slows itself down: check cooling and airflow (thermal), the power supply and "
        "power brake (HW slowdown), and move the pod off the hot node until it is fixed.",
        colour="#999999",
        problem=True,
        profiling="helps",
        phase=True,
        plan="repair",
    ),
    Bottleneck(
        "wrong_gpu_type",
        fix="This workload uses a fraction of a high-end GPU: move it to a smaller GPU (L4, T4) or "
        "a MIG slice (1g.10gb), or pack several such pods onto one GPU with time-slicing.",
        colour="#dede00",
        problem=True,
        profiling="helps",
        phase=False,
        plan="resize",
    ),
    Bottleneck(
        "poor_placement",
        fix="The pod's GPUs cannot exchange at NVLink speed. Across sockets or "
        "root complexes without NVLink: fix the pod's placement (GPUs on one NVLink island or one socket, "
        "topology-aware scheduling). NVLink idle while PCIe carries the exchange: unset NCCL_P2P_DISABLE and "
        "NCCL_P2P_LEVEL, and let every rank's container see its peers. NVLinks down or failing: cordon the node "
        "and have the GPUs or NVSwitch serviced.",
        colour="#17becf",
        problem=True,
        profiling="helps",
        phase=False,
        plan="fix",
        fix_before_size="on GPUs that exchange at NVLink speed it uses more of them",
    ),
    Bottleneck(
        "host_stall",
        fix="The GPU waits on its host or on a peer, not on its own work: " + " ".join(STALL_CAUSES.values()),
        colour="#e7298a",
        problem=True,
        profiling="helps",
        phase=False,
        plan="fix",
        fix_before_size="the stall mended, it uses more of its GPU, which a smaller one would cap",
    ),
    Bottleneck(
        "unallocated",
        fix="No pod holds this GPU: capacity nobody uses, not a pod to fix. If pods wait for GPUs, see why the "
        "scheduler does not place them here (taints, node selectors and affinity, the namespaces' GPU quotas, a "
        "device plugin that does not advertise it); if none wait, shrink the node pool or let the cluster "
        "autoscaler remove the node.",
        colour="#bdbdbd",
        problem=False,
        profiling="not needed",
        phase=False,
        plan="none",
        unit="gpu",
    ),
    Bottleneck(
        "held_without_pod",
        fix="No pod holds this GPU, yet memory is used or kernels run on it: a process the kubelet did not "
        "assign. Find it on the node (nvidia-smi --query-compute-apps=pid,used_memory): a leftover DataLoader "
        "worker of a killed job, a process started on the host, or a container that requested no GPU but sees "
        "all of them (NVIDIA_VISIBLE_DEVICES=all); stop it, or give its workload a GPU request.",
        colour="#7f2704",
        problem=True,
        profiling="not needed",
        phase=False,
        plan="repair",
        unit="gpu",
    ),
    Bottleneck(
        "insufficient_data",
        fix=INSUFFICIENT_LIVE,
        colour="#d9d9d9",
        problem=False,
        profiling="not needed",
        phase=False,
        plan="not_planned",
        waste=False,
    ),
)
BY_NAME = {b.name: b for b in BOTTLENECKS}
CLASSES = tuple(b.name for b in BOTTLENECKS)
#: The classes code outside their rules decides on by name (a ledger books a quiet replica as idle, the plan
#: sizes an unexplained unit and releases a GPU nobody holds): named here once, so that tests/test_classes.py
#: can hold every other module to a few literals of a class name. Each is a BOTTLENECKS record's name.
IDLE, HEALTHY, INSUFFICIENT_DATA, UNEXPLAINED = "idle", "healthy", "insufficient_data", "unexplained"
UNALLOCATED, HELD_WITHOUT_POD, OVERPROVISIONED_SERVING = "unallocated", "held_without_pod", "overprovisioned_serving"
HOST_STALL, DATA_STARVATION, MEMORY_FRAGMENTATION = "host_stall", "data_starvation", "memory_fragmentation"
THROTTLING, WRONG_GPU_TYPE = "throttling", "wrong_gpu_type"
RECOMMENDATIONS = {b.name: b.fix for b in BOTTLENECKS}
#: The classes that are a problem to fix (not healthy, not "cannot tell", not capacity nobody holds).
PROBLEMS = frozenset(b.name for b in BOTTLENECKS if b.problem)
#: The classes of a pod (gpulens_pod_bottleneck's values), and of a GPU no pod holds.
POD_CLASSES = tuple(b.name for b in BOTTLENECKS if b.unit == "pod")
GPU_CLASSES = tuple(b.name for b in BOTTLENECKS if b.unit == "gpu")
#: The classes by what the plan proposes for them.
PLANNED = {action: frozenset(b.name for b in BOTTLENECKS if b.plan == action) for action in get_args(PlanAction)}
#: The classes whose unused GPU time counts as waste.
WASTEFUL = frozenset(b.name for b in BOTTLENECKS if b.waste)

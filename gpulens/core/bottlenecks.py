"""The bottleneck classes: gpulens' verdict vocabulary and the fix to try for each.

The class names are public API: label values of gpulens_pod_bottleneck and keys of the analyzer's
JSON. The recommendation texts are the one home of "what to do": the analyzer's verdicts carry them,
and the alert runbooks quote them.
"""

from __future__ import annotations

CLASSES = (
    "healthy",
    "idle",
    "overprovisioned_serving",
    "data_starvation",
    "memory_bandwidth",
    "memory_fragmentation",
    "interconnect",
    "throttling",
    "wrong_gpu_type",
    "poor_placement",
    "insufficient_data",
)

RECOMMENDATIONS = {
    "healthy": "Nothing to fix: the GPU is doing useful work.",
    "idle": "Release the GPU: stop the idle notebook or job, let an idle-culler reclaim it, or scale an unused "
    "serving replica to zero; if memory is held with no work, find the leftover process (nvidia-smi, "
    "DataLoader workers of a killed job).",
    "overprovisioned_serving": "This replica serves requests in bursts and waits in between: do not just "
    "release it, give it less GPU. Run fewer replicas and autoscale on request rate or queue depth "
    "(KEDA, Knative, with scale-to-zero where cold starts are acceptable), or share the GPU: MIG slices "
    "or time-slicing for several such replicas.",
    "data_starvation": "Feed the GPU faster: raise DataLoader num_workers, set pin_memory=True and "
    "prefetch_factor, move decoding and augmentation to the GPU (DALI), cache the dataset "
    "on local NVMe, and give the pod more CPU if it sits at its limit.",
    "memory_bandwidth": "The kernels wait on device memory: use mixed precision (bf16/fp16) to halve traffic, "
    "fuse element-wise ops (torch.compile), raise arithmetic intensity with larger batches, "
    "or choose a GPU with more memory bandwidth.",
    "memory_fragmentation": "Memory fills up and the job dies: set PYTORCH_CUDA_ALLOC_CONF="
    "expandable_segments:True, call torch.cuda.empty_cache() between phases and leave a "
    "pause between jobs, free tensors you keep references to, or lower the batch size.",
    "interconnect": "Communication dominates: overlap all-reduce with compute (DDP bucket size, "
    "gradient accumulation), compress or shard gradients (FSDP), or run on GPUs joined by "
    "NVLink; check the PCIe link runs at its full generation and width.",
    "throttling": "The GPU slows itself down: check cooling and airflow (thermal), the power supply and "
    "power brake (HW slowdown), and move the pod off the hot node until it is fixed.",
    "wrong_gpu_type": "This workload uses a fraction of a high-end GPU: move it to a smaller GPU (L4, T4) or "
    "a MIG slice (1g.10gb), or pack several such pods onto one GPU with time-slicing.",
    "poor_placement": "The pod's GPUs cannot exchange at NVLink speed, or work unevenly. Across sockets or "
    "root complexes without NVLink: fix the pod's placement (GPUs on one NVLink island or one socket, "
    "topology-aware scheduling). NVLink idle while PCIe carries the exchange: unset NCCL_P2P_DISABLE and "
    "NCCL_P2P_LEVEL, and let every rank's container see its peers. NVLinks down or failing: cordon the node "
    "and have the GPUs or NVSwitch serviced. Uneven: check that every rank gets work.",
    "insufficient_data": "Not enough samples to judge yet: wait for a longer window, or check that the "
    "exporter and Prometheus scrape this GPU.",
}

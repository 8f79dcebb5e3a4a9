"""Workload profiles: what a GPU shows while a named kind of workload runs on it.

Each profile is a pure function of time that returns what NVML (or DCGM) would report, averaged over
the sample window the way the driver averages (utilization is "fraction of the last period in which a
kernel ran"). Because profiles are functions of time, not of a running loop, the analyzer's evaluator
can replay hours of a profile in milliseconds, and a live exporter sees the same shapes in real time.

The shapes follow docs/signals.md:

healthy_training     SM active ~0.88, tensor pipes busy, memory steady, clocks at max.
data_starvation      each iteration a compute burst then a gap waiting for input: SM activity swings
                     between ~0.85 and ~0; PCIe host-to-device spikes at each burst start.
memory_bandwidth     DRAM active ~0.78 (near the practical peak 0.8) while tensor/FP pipes idle;
                     SM active stays fairly high because warps waiting on memory count as active.
memory_fragmentation memory climbs in a sawtooth of allocation churn to the limit, the process is
                     OOM-killed and restarts (new PID), and the cycle repeats.
idle                 allocated, a process holds a CUDA context, no kernel runs; clocks at idle.
memory_held          memory in use and no process at all (a job's leftovers).
interconnect         NVLink (or PCIe where there is none) near link capacity, SM and tensor low.
thermal_throttling   busy, hot, hw/sw thermal clock-event bits set, SM clock ~60% of max.
light_inference      sparse small requests on a big GPU: activity ~0.1, a few GB of memory.
poor_placement       one job on GPUs that share no NVLink and sit across CPU sockets; one GPU much
                     busier than the other, heavy PCIe traffic for the exchange.
exchange_over_pcie   a multi-GPU job whose ranks exchange over PCIe through host memory, its GPUs evenly
                     half used: NCCL peer-to-peer turned off (NCCL_P2P_DISABLE) on GPUs joined by NVLink,
                     or GPUs under different PCIe root complexes with no NVLink between them.
nvlink_faults        training on GPUs whose NVLinks fail: on the job's first GPU four links are down and
                     the rest retransmit (replay), retrain (recovery) and see CRC errors; peer traffic
                     crawls over what is left.
checkpointing        data-parallel training whose first rank writes a checkpoint synchronously (15-25 s) after
                     every 15-40 s of steps: it runs no kernel meanwhile, and the other ranks wait in the next
                     collective at 100% utilization and a fifth of their power (NCCL spins a kernel).
straggler            data-parallel training with one slow rank (the second GPU): it works through every step
                     while the others finish early and wait for it, at full utilization and lower power.
collective_wait      training whose ranks wait in collectives most of the time on a peer outside the pod (a
                     rank on another node): full utilization at a fifth of the power, 2-3 s of work
                     every 8-12 s.
host_bound_loop      a loop that launches short kernels from one host thread (a token-by-token generate()
                     in Python, small batches one at a time): kernels of a few ms 15-30% of the time, steadily
                     at any sample interval, the model held, power low, the pod's CPU below its limit. No
                     signature of a cause shows in the GPU's telemetry: the analyzer says `unexplained`.
unallocated          no workload at all.

Day-scale profiles (time of day is unix time modulo 24 h, UTC):
serving              a model server holding its model in memory; requests arrive at random (Poisson),
                     more by day than by night, and each keeps the GPU at ~0.95 for 2-4 s; mean duty
                     2-10% (the public shape of a Stable Diffusion serving fleet).
idle_replica         a serving replica holding a 17-20 GiB model that almost nobody calls: a 1 s
                     request every few hours.
llm_serving          a continuous-batching LLM server (vLLM) holding 90% of memory, requests by time of day
                     sharing the GPU up to what its KV cache holds: at the peak its KV cache is 80-95% full
                     while its SMs are under 40% active (decoding is bound by memory bandwidth).
notebook             interactive work for 1-3 hours a day (cells of 5-60 s), memory kept all day.
sparse_notebook      a kernel kept all day that runs a short cell (2-8 s) every 10-40 minutes: busy
                     well under 1% of any hour.
training_finished    healthy training that ends at a time of day and keeps its GPU (and, half the
                     time, its memory) afterwards.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import dataclass, field

from gpulens.core.catalog import GpuModel
from gpulens.core.pods import PodRef

#: CPU limit of every simulated pod, in cores.
CPU_LIMIT_CORES = 4.0


@dataclass
class Activity:
    """What a workload does to one GPU over one sample window. Ratios are 0-1; memory_fraction is
    of usable memory; link rates are bytes per second; clock_fraction is SM clock / max."""

    busy: float = 0.0
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor: float = 0.0
    dram: float = 0.0
    fp16: float = 0.0
    fp32: float = 0.0
    fp64: float = 0.0
    memory_fraction: float = 0.0
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: float = 0.0
    nvlink_rx: float = 0.0
    power_fraction: float = 0.0  # 0 = idle power, 1 = power limit
    temperature_celsius: float = 32.0
    clock_fraction: float = 1.0
    reasons: int = 0
    process: bool = False
    restarts: int = 0  # how many times the process was replaced (it gets a new PID)
    #: XID events per second, and their code; the source counts them like NVML's event watcher.
    xid_rate: float = 0.0
    xid: int = 0
    #: The GPU no longer answers (NVML_ERROR_GPU_IS_LOST): the exporter keeps only gpulens_gpu_up 0.
    lost: bool = False
    #: CPU use of the pod's containers as a fraction of its CPU limit (the simulated kubelet's cAdvisor).
    cpu_fraction: float = 0.3
    #: NVLinks down, and NVLink errors per second (CRC flit + data, replay, recovery), on GPUs with NVLink.
    nvlink_links_down: int = 0
    nvlink_crc_rate: float = 0.0
    nvlink_replay_rate: float = 0.0
    nvlink_recovery_rate: float = 0.0


def duty(t: float, window: float, period: float, on: float, phase: float = 0.0) -> float:
    """Fraction of [t - window, t] inside the 'on' part of a square wave (on for `on` seconds of
    every `period`, shifted by `phase`). Exact, so no aliasing against the sampler."""

    def cumulative(x: float) -> float:
        x += phase
        return math.floor(x / period) * on + min(x % period, on)

    return (cumulative(t) - cumulative(t - window)) / window


@dataclass
class SimGpu:
    """One simulated GPU and the workload on it."""

    index: int
    uuid: str
    model: GpuModel
    profile: str
    profiling: bool  # SM/tensor/DRAM activity available (GPM on Hopper, or DCGM beside it)
    numa_node: int
    seed: int
    #: The PCIe root complex it hangs off, and its NVLink island (None: a PCIe-only model), on its node.
    pcie_root: int = 0
    nvlink_group: int | None = None
    pod: PodRef | None = None  # the pod the workload runs in
    role: int = 0  # position within a multi-GPU job (0 = first GPU)
    base_pid: int = 0
    params: dict[str, float] = field(default_factory=dict)
    #: What its serving engine's configuration is drawn from: its pod's controller ("seed:namespace/Kind/name")
    #: where it has one, so that a Deployment's replicas run one model with one KV cache, as they do; "" for a
    #: pod of its own (drawn per GPU).
    engine_config: str = ""
    #: Busy intervals of day-scale profiles, by day number, generated on first use.
    schedules: dict[int, Schedule] = field(default_factory=dict)
    #: When its pod runs, in simulated seconds after `started` (a fleet file's `from` and `until`): a replica
    #: scaled away, a notebook culled, a job's next run on other GPUs. Outside, the GPU holds no pod.
    runs: tuple[float, float] = (0.0, math.inf)
    #: Its engine's requests come `times` as fast from `at` seconds after `started` on, each step until the next
    #: ((at, times), in order; a fleet file's `traffic`): a busier replica, the load of replicas scaled away
    #: taken by those left. Before the first, at the profile's own rate.
    traffic: tuple[tuple[float, float], ...] = ()
    #: Unix seconds (simulated) the fleet started: what `runs` and `traffic` count from. Set by what plays
    #: the fleet (the simulated exporter, the simulated cluster); 0 counts from 1970, when every pod runs.
    started: float = 0.0
    #: The MIG profile its one instance has ("3g.40gb"; a fleet file's `mig`), "" for a whole GPU: the GPU is
    #: MIG-enabled and its pod holds the instance, which does the workload's work in its share of the GPU.
    mig: str = ""

    @property
    def mig_uuid(self) -> str:
        """Its MIG instance's UUID ("" for a whole GPU): NVML's "MIG-<uuid>", stable for the GPU."""
        return f"MIG-{uuid_module.uuid5(uuid_module.NAMESPACE_OID, self.uuid)}" if self.mig else ""

    @property
    def held_uuid(self) -> str:
        """The device its pod holds (the kubelet's device ID): its MIG instance, else the GPU."""
        return self.mig_uuid or self.uuid

    def running(self, t: float) -> bool:
        """Whether its pod runs at `t` (simulated unix seconds)."""
        return self.pod is not None and self.runs[0] <= t - self.started < self.runs[1]

    def allocated(self, t: float) -> bool:
        """Whether the kubelet gives its GPU to its pod at `t`: while it runs, and POD_RELEASE_SECONDS after, as a
        kubelet frees a pod's devices once its containers are gone, after their processes exited and freed the
        GPU's memory (never before: a GPU would show memory held by no pod)."""
        return self.pod is not None and self.runs[0] <= t - self.started < self.runs[1] + POD_RELEASE_SECONDS

    def requests_per_second(self, t: float, base: float) -> float:
        """Its engine's arrival rate at `t`: `base`, times the factor of its traffic's step at `t`."""
        times = [factor for at, factor in self.traffic if t - self.started >= at]
        return base * (times[-1] if times else 1.0)

    def requests_between(self, start: float, end: float, base: float, most: float = math.inf) -> float:
        """The requests expected from `start` to `end` (simulated unix seconds): the integral of its rate, at
        most `most` a second (what it can finish)."""
        edges = sorted({start, end, *(min(max(self.started + at, start), end) for at, _ in self.traffic)})
        return sum((b - a) * min(self.requests_per_second(a, base), most) for a, b in itertools.pairwise(edges))

    def connection(self, other: SimGpu) -> tuple[str, str]:
        """How this GPU reaches `other` on their node: (PCIe common ancestor, P2P path), as NVML names them
        (core/topology.py). Root complexes sit behind one PCIe switch each; P2P without NVLink stays
        within a root complex."""
        same_root = self.pcie_root == other.pcie_root
        level = "single_switch" if same_root else "numa_node" if self.numa_node == other.numa_node else "system"
        nvlink = self.nvlink_group is not None and self.nvlink_group == other.nvlink_group
        return level, "nvlink" if nvlink else "pcie" if same_root else "none"

    def noise(self, t: float, scale: float, salt: int = 0) -> float:
        """Deterministic noise in [-scale, scale], the same for the same GPU, time and salt."""
        r = random.Random(f"{self.seed}:{self.index}:{salt}:{int(t * 4)}").random()
        return (2 * r - 1) * scale


DAY = 86400.0
#: Simulated seconds a kubelet keeps a GPU allocated to a pod whose processes have exited (SimGpu.allocated).
POD_RELEASE_SECONDS = 10.0


class Schedule:
    """One day of busy intervals (requests served one after another), and the busy time in any span."""

    def __init__(self, starts: list[float], ends: list[float]):
        self.starts, self.ends = starts, ends
        self.before = [0.0]  # busy seconds before interval i
        for a, b in zip(starts, ends, strict=True):
            self.before.append(self.before[-1] + b - a)

    def busy_until(self, x: float) -> float:
        """Busy seconds from the day's start to x."""
        i = bisect.bisect_right(self.ends, x)
        partial = min(max(x - self.starts[i], 0.0), self.ends[i] - self.starts[i]) if i < len(self.starts) else 0.0
        return self.before[i] + partial

    @classmethod
    def requests(
        cls,
        rng: random.Random,
        day_start: float,
        rate: Callable[[float], float],
        peak: float,
        service: Callable[[], float],
    ) -> Schedule:
        """Poisson arrivals at `rate(seconds of day)` per second (at most `peak`), thinned, each served for
        `service()` seconds after the previous one ends."""
        starts: list[float] = []
        ends: list[float] = []
        t = rng.expovariate(peak)
        while t < DAY:
            if rng.random() * peak < rate(t):
                start = max(day_start + t, ends[-1] if ends else 0.0)
                starts.append(start)
                ends.append(start + service())
            t += rng.expovariate(peak)
        return cls(starts, ends)


def _busy(g: SimGpu, t: float, w: float, make: Callable[[SimGpu, random.Random, float], Schedule]) -> float:
    """Fraction of [t - w, t] inside the GPU's busy intervals (days are generated when first needed)."""

    if w <= 0:
        return 0.0
    busy = 0.0
    # A day's schedule counts busy time from its own start, so compare both ends on the same days;
    # a request that started before midnight ends after it.
    for d in range(math.floor((t - w) / DAY) - 1, math.floor(t / DAY) + 1):
        if d not in g.schedules:
            g.schedules[d] = make(g, random.Random(f"{g.seed}:{g.index}:{d}"), d * DAY)
        busy += g.schedules[d].busy_until(t) - g.schedules[d].busy_until(t - w)
    return busy / w


def _daytime(seconds: float) -> float:
    """Request rate by time of day, relative to the day's mean: a peak at 14:00 UTC, a fifth at night."""
    bump = math.exp(-(((seconds / 3600.0 - 14.0) / 4.5) ** 2))
    return 0.2 + 0.8 * bump / 0.332  # 0.332: the bump's mean over a day


def _request_schedule(g: SimGpu, rng: random.Random, day_start: float) -> Schedule:
    mean_rate = g.params["load"] / g.params["service"]
    return Schedule.requests(
        rng,
        day_start,
        lambda s: mean_rate * _daytime(s),
        mean_rate * 2.7,
        lambda: rng.uniform(0.7, 1.3) * g.params["service"],
    )


def _serving(g: SimGpu, t: float, w: float) -> Activity:
    return _serving_activity(g, _busy(g, t, w, _request_schedule))


def _serving_activity(g: SimGpu, on: float) -> Activity:
    """A model server busy `on` of the last sample's time."""
    return Activity(
        busy=on,
        sm_active=0.9 * on,
        sm_occupancy=0.5 * on,
        tensor=0.6 * on,
        dram=0.45 * on,
        fp16=0.4 * on,
        fp32=0.05 * on,
        memory_fraction=g.params["model_memory"] + 0.04 * on,
        pcie_rx=0.01 * on * g.model.pcie_bytes_per_second,
        pcie_tx=0.01 * on * g.model.pcie_bytes_per_second,
        power_fraction=0.05 + 0.85 * on,
        temperature_celsius=40 + 25 * on,
        clock_fraction=0.5 + 0.5 * min(1.0, 10 * on),
        process=True,
        cpu_fraction=0.05 + 0.3 * on,
    )


def _idle_replica(g: SimGpu, t: float, w: float) -> Activity:
    # The same server with a 1 s request every few hours: a model nobody calls.
    a = _serving(g, t, w)
    a.memory_fraction = g.params["idle_model_memory"] + 0.04 * a.busy
    return a


#: Hours of the (UTC) day a diurnal replica serves in; it gets no request outside them.
DIURNAL_HOURS = (7.0, 22.0)


def _diurnal_schedule(g: SimGpu, rng: random.Random, day_start: float) -> Schedule:
    """Requests of service seconds each, at random in DIURNAL_HOURS, none at night: `load` of the day busy."""
    first, last = DIURNAL_HOURS
    rate = g.params["load"] / g.params["service"] * 24 / (last - first)
    return Schedule.requests(
        rng,
        day_start,
        lambda s: rate if first * 3600 <= s < last * 3600 else 0.0,
        rate,
        lambda: rng.uniform(0.7, 1.3) * g.params["service"],
    )


def _diurnal_replica(g: SimGpu, t: float, w: float) -> Activity:
    """A serving replica that serves by day and rests at night (no request from 22:00 to 07:00), busy 1-1.5% of
    a day: its nights outweigh its days."""
    return _serving_activity(g, _busy(g, t, w, _diurnal_schedule))


def _alternating(
    rng: random.Random, day_start: float, work: tuple[float, float], rest: tuple[float, float]
) -> Schedule:
    """A day of work and rests in turn, each lasting seconds drawn from its range, from a rest's start."""
    starts: list[float] = []
    ends: list[float] = []
    t = day_start + rng.uniform(0, rest[1])
    while t < day_start + DAY:
        starts.append(t)
        ends.append(t + rng.uniform(*work))
        t = ends[-1] + rng.uniform(*rest)
    return Schedule(starts, ends)


def _notebook_cells_schedule(g: SimGpu, rng: random.Random, day_start: float) -> Schedule:
    """A notebook training in cells all day: each cell runs 5-15 minutes, each pause 5-10 minutes."""
    return _alternating(rng, day_start, (300, 900), (300, 600))


def _notebook_cells(g: SimGpu, t: float, w: float) -> Activity:
    """A Kubeflow notebook training in cells (5-15 min at 60-90% SM, the level its own) with 5-10 min pauses."""
    on = _busy(g, t, w, _notebook_cells_schedule)
    a = _notebook_activity(g, on)
    level = 0.6 + (g.params["burst"] - 1.1)  # 0.6-0.9, from a draw every profile makes
    a.sm_active, a.tensor = level * on, 0.6 * level * on
    a.power_fraction = (0.15 + 0.8 * level) * on
    return a


def _not_started() -> Activity:
    """A GPU before its pod's process starts: no context, clocks at idle."""
    return Activity(temperature_celsius=32, clock_fraction=0.12, reasons=0x1, cpu_fraction=0.01)


def _never_served(g: SimGpu, t: float, w: float) -> Activity:
    """A vLLM replica started at `started` (seconds of the day) that serves nothing: its weights load over
    60 s (16 GB), its KV cache takes memory to gpu_memory_utilization (0.9) at 90 s, CUDA graphs are
    captured at 80% for 20 s, then a health check runs a 50 ms kernel every 10 s (0.5% of the time)."""
    since = (t % DAY) - g.params["started"]
    if since < 0:
        return _not_started()
    weights = 16e9 / g.model.memory_total_bytes
    memory = weights * min(1.0, since / 60) if since < 90 else 0.9
    warm_up = max(0.0, min(since, 110.0) - max(since - w, 90.0)) / w
    checks = 0.05 * (1.0 if int(since) % 10 == 3 else 0.0) if w <= 1 else 0.05 / 10
    busy = min(1.0, warm_up + (checks if since >= 110 else 0.0))
    return Activity(
        busy=busy,
        sm_active=0.9 * busy,
        sm_occupancy=0.4 * busy,
        tensor=0.5 * busy,
        dram=0.3 * busy,
        memory_fraction=memory,
        power_fraction=0.05 + 0.8 * busy,
        temperature_celsius=38 + 25 * busy,
        clock_fraction=0.5 + 0.5 * min(1.0, 10 * busy),
        process=True,
        cpu_fraction=0.05 + 0.3 * busy,
    )


@dataclass(frozen=True)
class EngineLoad:
    """What a serving engine counts at a moment: requests running and waiting in its queue, the share of its
    KV cache in use (0-1), and since its start the requests it finished and their prompt and output tokens."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    requests: float = 0.0
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    #: Seconds a request spends in the engine (queue excluded).
    request_seconds: float = 0.0


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's method: exact, and quick for the means of a few dozen used here)."""
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _daytime_integral(seconds: float) -> float:
    """The integral of _daytime from the day's start to `seconds` of it."""
    scale = 4.5 * 3600
    bump = scale * math.sqrt(math.pi) / 2 * (math.erf((seconds / 3600 - 14) / 4.5) - math.erf(-14 / 4.5))
    return 0.2 * seconds + 0.8 * bump / 0.332


@dataclass(frozen=True)
class LlmEngine:
    """A continuous-batching LLM server (vLLM, SGLang, TGI): requests of `request_seconds` each share the GPU,
    as many at once as its KV cache holds (`capacity`); more wait in its queue. Requests in the engine
    average `mean_load` x capacity over a day, by time of day as _daytime (Little's law: arrivals per second
    are that over request_seconds), so that at the 14:00 peak the KV cache, not SM activity, is what runs
    out: decoding is bound by memory bandwidth, its SMs 12-40% active however full the batch."""

    capacity: int
    request_seconds: float
    mean_load: float
    prompt_tokens: float
    output_tokens: float

    @classmethod
    def of(cls, g: SimGpu) -> LlmEngine:
        """The engine of `g`'s pod: one configuration and one share of the load for all replicas of a
        controller (a load balancer spreads requests evenly), each replica's requests its own draws."""
        # Its own RNG: profile_params' draws, and so every other simulated GPU, stay as they were.
        rng = random.Random(f"{g.engine_config or f'{g.seed}:{g.index}'}:llm")
        return cls(
            capacity=rng.choice((24, 32, 48)),
            request_seconds=rng.uniform(6.0, 12.0),
            mean_load=rng.uniform(0.30, 0.36),
            prompt_tokens=rng.uniform(400, 900),
            output_tokens=rng.uniform(150, 350),
        )

    def in_engine(self, g: SimGpu, t: float) -> int:
        """Requests running or waiting at `t`: a Poisson draw around the expected number, one per 10 s."""
        expected = self.mean_load * self.capacity * _daytime(t % DAY)
        return _poisson(random.Random(f"{g.seed}:{g.index}:llm:{int(t // 10)}"), expected)

    def arrivals(self, t: float) -> float:
        """Requests expected to have arrived from the epoch to `t` (unix seconds)."""
        rate = self.mean_load * self.capacity / self.request_seconds  # per second, relative to _daytime
        return rate * ((t // DAY) * _daytime_integral(DAY) + _daytime_integral(t % DAY))

    def load(self, g: SimGpu, t: float, since: float) -> EngineLoad:
        n = self.in_engine(g, t)
        running = min(n, self.capacity)
        finished = self.arrivals(t) - self.arrivals(since)
        return EngineLoad(
            running,
            n - running,
            running / self.capacity,
            finished,
            finished * self.prompt_tokens,
            finished * self.output_tokens,
            self.request_seconds,
        )


def _llm_serving(g: SimGpu, t: float, w: float) -> Activity:
    engine = LlmEngine.of(g)
    n = engine.in_engine(g, t)
    full = min(n, engine.capacity) / engine.capacity
    working = 1.0 if n else 0.0
    return Activity(
        busy=working,
        sm_active=(0.12 + 0.28 * full) * working,
        sm_occupancy=(0.1 + 0.2 * full) * working,
        tensor=(0.05 + 0.25 * full) * working,
        dram=(0.25 + 0.45 * full) * working,
        fp16=(0.05 + 0.2 * full) * working,
        # vLLM takes gpu_memory_utilization (0.9) of the GPU at start for its weights and KV cache.
        memory_fraction=0.9,
        pcie_rx=0.002 * working * g.model.pcie_bytes_per_second,
        pcie_tx=0.002 * working * g.model.pcie_bytes_per_second,
        power_fraction=0.05 + (0.2 + 0.45 * full) * working,
        temperature_celsius=40 + 25 * full,
        clock_fraction=1.0 if n else 0.5,
        process=True,
        cpu_fraction=0.1 + 0.2 * full,
    )


#: Requests of the light_inference profile: one every 0.5 s, each 60 ms on the GPU.
LIGHT_REQUEST_PERIOD, LIGHT_REQUEST_SECONDS = 0.5, 0.06
#: Tokens of a light_inference request (an embedding of a short text, or a short completion).
LIGHT_PROMPT_TOKENS, LIGHT_OUTPUT_TOKENS = 64.0, 16.0


def engine_load(g: SimGpu, t: float, since: float) -> EngineLoad:
    """What the serving engine of `g`'s pod counts at `t` (simulated unix seconds), from its start at
    `since`: the requests its profile serves (none for a replica that never serves)."""
    if g.profile == "llm_serving":
        return LlmEngine.of(g).load(g, t, since)
    if g.profile == "light_inference":
        on = duty(t, 0.001, LIGHT_REQUEST_PERIOD, LIGHT_REQUEST_SECONDS, g.params["phase"]) > 0.5
        finished = max(0.0, (t - since) / LIGHT_REQUEST_PERIOD)
        return EngineLoad(
            int(on),
            0,
            0.02 * on,
            finished,
            finished * LIGHT_PROMPT_TOKENS,
            finished * LIGHT_OUTPUT_TOKENS,
            LIGHT_REQUEST_SECONDS,
        )
    if g.profile == "vllm_replica":
        # Requests past REPLICA_MOST_RUNNING wait in its queue (vLLM's scheduler admits no more at once).
        present = sum(1 for arrival, finish in _replica_requests(g, t, t) if arrival <= t < finish)
        running, waiting = min(present, REPLICA_MOST_RUNNING), max(0, present - REPLICA_MOST_RUNNING)
        backlog = round(replica_backlog(g, t))
        if backlog:  # overloaded: every slot decodes, and the excess waits
            running, waiting = REPLICA_MOST_RUNNING, waiting + backlog
        # The counter: the requests expected by then (the arrival rate x the time, at most what it finishes a
        # second), as llm_serving counts them.
        finished = g.requests_between(since, max(t, since), REPLICA_REQUESTS_PER_SECOND, REPLICA_CAPACITY)
        return EngineLoad(
            running,
            waiting,
            0.03 * running,  # a short chat turn's KV blocks: 3% of a cache of 60 GB
            finished,
            finished * REPLICA_PROMPT_TOKENS,
            finished * REPLICA_OUTPUT_TOKENS,
            REPLICA_REQUEST_SECONDS,
        )
    if g.profile in ("serving", "idle_replica"):
        running = _busy(g, t, 0.001, _request_schedule) > 0.5
        finished = _finished(g, since, t, _request_schedule)
        return EngineLoad(int(running), 0, 0.05 * running, finished, request_seconds=g.params["service"])
    return EngineLoad()


def _finished(g: SimGpu, since: float, t: float, make: Callable[[SimGpu, random.Random, float], Schedule]) -> int:
    """Requests of a day-scale schedule that ended in (since, t]."""
    count = 0
    for d in range(math.floor(since / DAY) - 1, math.floor(t / DAY) + 1):
        if d not in g.schedules:
            g.schedules[d] = make(g, random.Random(f"{g.seed}:{g.index}:{d}"), d * DAY)
        ends = g.schedules[d].ends
        count += bisect.bisect_right(ends, t) - bisect.bisect_right(ends, since)
    return count


#: The profiles a serving engine runs (the fleet file's `engine:` is refused on others).
ENGINE_PROFILES = ("llm_serving", "light_inference", "vllm_replica", "never_served", "idle_replica", "serving")


def _start_up_of(g: SimGpu) -> tuple[float, float]:
    """A starting training job's seconds of model load (30-60) and of warm-up after it (300-390)."""
    job = random.Random(f"{g.seed}:start")
    return job.uniform(30, 60), job.uniform(300, 390)


def start_up_seconds(g: SimGpu) -> float:
    """How long a training_started job takes to reach its steady state, from its start."""
    return sum(_start_up_of(g))


def _training_started(g: SimGpu, t: float, w: float) -> Activity:
    """A data-parallel training job started at `started` (seconds of the day): its model loads over 30-60 s (to
    30% of memory), then it warms up for 300-390 s (NCCL set-up, compilation, the first steps: bursts of 1.5 s
    every 7 s at SM 0.2 of a step's level, memory held at the model's), then its optimizer state and
    activations take memory to its working set and it trains as healthy_training does."""
    since = (t % DAY) - g.params["started"]
    if since < 0:
        return _not_started()
    load, warm_up = _start_up_of(g)
    if since >= load + warm_up:
        return _healthy(g, t, w)
    on = duty(t, w, 7.0, 1.5) if since >= load else 0.0
    return Activity(
        busy=on,
        sm_active=0.9 * on,
        sm_occupancy=0.4 * on,
        tensor=0.5 * on,
        dram=0.3 * on,
        memory_fraction=0.3 * min(1.0, since / load),
        power_fraction=0.1 + 0.7 * on,
        temperature_celsius=45 + 10 * on,
        process=True,
    )


def _notebook_schedule(g: SimGpu, rng: random.Random, day_start: float) -> Schedule:
    begin, end = g.params["work_from"], g.params["work_until"]
    return Schedule.requests(
        rng, day_start, lambda s: 1 / 90 if begin <= s < end else 0.0, 1 / 90, lambda: rng.uniform(5, 60)
    )


def _sparse_notebook_schedule(g: SimGpu, rng: random.Random, day_start: float) -> Schedule:
    return _alternating(rng, day_start, (2, 8), (600, 2400))


def _notebook(g: SimGpu, t: float, w: float) -> Activity:
    return _notebook_activity(g, _busy(g, t, w, _notebook_schedule))


def _sparse_notebook(g: SimGpu, t: float, w: float) -> Activity:
    return _notebook_activity(g, _busy(g, t, w, _sparse_notebook_schedule))


def _notebook_activity(g: SimGpu, on: float) -> Activity:
    return Activity(
        busy=on,
        sm_active=0.8 * on,
        sm_occupancy=0.4 * on,
        tensor=0.5 * on,
        dram=0.4 * on,
        fp16=0.3 * on,
        fp32=0.1 * on,
        memory_fraction=g.params["memory"] * 0.5,  # the kernel keeps its tensors between cells
        power_fraction=0.8 * on,
        temperature_celsius=38 + 25 * on,
        clock_fraction=0.5 + 0.5 * min(1.0, 10 * on),
        reasons=0 if on else 0x1,
        process=True,
        cpu_fraction=0.02 + 0.3 * on,
    )


def _training_finished(g: SimGpu, t: float, w: float) -> Activity:
    if (t % DAY) < g.params["finish"]:
        return _healthy(g, t, w)
    # The script is done but the pod lives on (a sleep in the entrypoint, a hung rank, a notebook
    # that launched it): its memory stays or is freed, and no kernel runs.
    keeps = g.params["keeps_memory"] >= 0.5
    return Activity(
        memory_fraction=g.params["memory"] if keeps else g.params["context_memory"],
        temperature_celsius=34,
        clock_fraction=0.12,
        reasons=0x1,
        process=keeps,
        cpu_fraction=0.01,
    )


def _healthy(g: SimGpu, t: float, w: float) -> Activity:
    sm = 0.88 + g.noise(t, 0.03)
    return Activity(
        busy=1.0,
        sm_active=sm,
        sm_occupancy=0.48 + g.noise(t, 0.04, 1),
        tensor=0.58 + g.noise(t, 0.05, 2),
        dram=0.42 + g.noise(t, 0.04, 3),
        fp16=0.30,
        fp32=0.12,
        memory_fraction=g.params["memory"],
        pcie_rx=0.04 * g.model.pcie_bytes_per_second,
        pcie_tx=0.01 * g.model.pcie_bytes_per_second,
        nvlink_tx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
        nvlink_rx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
        power_fraction=0.85 + g.noise(t, 0.05, 4),
        temperature_celsius=66 + g.noise(t, 2, 5),
        process=True,
    )


def _data_starvation(g: SimGpu, t: float, w: float) -> Activity:
    period, burst, phase = g.params["period"], g.params["burst"], g.params["phase"]
    on = duty(t, w, period, burst, phase)
    # Host-to-device copies of each batch spike in the first 0.2 s of each burst: a few hundred MB a step (a
    # batch of images as float32), under 1 GB/s on average, unlike a CPU-offloaded job's parameter fetches.
    spike = duty(t, w, period, 0.2, phase)
    pcie = g.model.pcie_bytes_per_second
    return Activity(
        busy=on,
        sm_active=0.86 * on,
        sm_occupancy=0.45 * on,
        tensor=0.55 * on,
        dram=0.40 * on,
        fp16=0.28 * on,
        fp32=0.10 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=0.03 * pcie * spike + 0.0005 * pcie,
        pcie_tx=0.0005 * pcie,
        power_fraction=0.15 + 0.7 * on,
        temperature_celsius=52 + 8 * on,
        reasons=0 if on > 0 else 0x1,
        process=True,
        cpu_fraction=0.97 + g.noise(t, 0.02, 6),
    )  # the input pipeline sits at its CPU limit


def _xid_errors(g: SimGpu, t: float, w: float) -> Activity:
    # Healthy training on a GPU whose driver records row-remapping events (XID 63) twice a minute.
    a = _healthy(g, t, w)
    a.xid, a.xid_rate = 63, 1 / 30
    return a


def _fallen_off_bus(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(lost=True)


def _memory_bandwidth(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        busy=1.0,
        sm_active=0.72 + g.noise(t, 0.03),
        sm_occupancy=0.22,
        tensor=0.03,
        dram=0.79 + g.noise(t, 0.02, 1),
        fp32=0.12,
        fp16=0.02,
        memory_fraction=g.params["memory"],
        pcie_rx=0.02 * g.model.pcie_bytes_per_second,
        power_fraction=0.75,
        temperature_celsius=63,
        process=True,
    )


def _memory_fragmentation(g: SimGpu, t: float, w: float) -> Activity:
    # Memory climbs from 60% to the limit over `cycle` seconds with allocation churn, then the
    # process dies (OOM) and is restarted after `down` seconds of nothing.
    cycle, down = g.params["cycle"], 10.0
    run = t + g.params["phase"]
    generation, position = divmod(run, cycle + down)
    if position >= cycle:
        return Activity(
            memory_fraction=0.0, restarts=int(generation) + 1, reasons=0x1, clock_fraction=0.2, temperature_celsius=45
        )
    churn = 0.03 * math.sin(position * 2 * math.pi / 7.0)
    memory = min(0.6 + 0.39 * position / cycle + churn, 0.995)
    return Activity(
        busy=0.9,
        sm_active=0.62 + g.noise(t, 0.05),
        sm_occupancy=0.35,
        tensor=0.35,
        dram=0.35,
        fp16=0.2,
        fp32=0.1,
        memory_fraction=memory,
        pcie_rx=0.05 * g.model.pcie_bytes_per_second,
        power_fraction=0.6,
        temperature_celsius=60,
        process=True,
        restarts=int(generation),
    )


def _idle(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        memory_fraction=g.params["context_memory"],
        power_fraction=0.0,
        temperature_celsius=33 + g.noise(t, 1),
        clock_fraction=0.12,
        reasons=0x1,
        process=True,
        cpu_fraction=0.01,
    )


def _memory_held(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        memory_fraction=g.params["memory"],
        power_fraction=0.02,
        temperature_celsius=34,
        clock_fraction=0.12,
        reasons=0x1,
        process=False,
    )


def _interconnect(g: SimGpu, t: float, w: float) -> Activity:
    links = g.model.nvlink_links * g.model.nvlink_link_bytes_per_second
    a = Activity(
        busy=0.95,
        sm_active=0.24 + g.noise(t, 0.03),
        sm_occupancy=0.12,
        tensor=0.08,
        dram=0.22,
        fp16=0.05,
        fp32=0.05,
        memory_fraction=g.params["memory"],
        power_fraction=0.45,
        temperature_celsius=55,
        process=True,
    )
    if links:
        a.nvlink_tx = a.nvlink_rx = 0.9 * links
        a.pcie_rx = 0.02 * g.model.pcie_bytes_per_second
    else:
        a.pcie_tx = a.pcie_rx = 0.9 * g.model.pcie_bytes_per_second
    return a


def _thermal_throttling(g: SimGpu, t: float, w: float) -> Activity:
    a = _healthy(g, t, w)
    a.clock_fraction = 0.6 + g.noise(t, 0.03, 9)
    a.temperature_celsius = 89 + g.noise(t, 1.5, 5)
    a.reasons = 0x40 | 0x20  # hw_thermal | sw_thermal
    a.sm_active *= 0.95
    return a


def _light_inference(g: SimGpu, t: float, w: float) -> Activity:
    # Requests of ~60 ms arrive about twice a second.
    on = duty(t, w, 0.5, 0.06, g.params["phase"])
    return Activity(
        busy=min(1.0, on * 1.1),
        sm_active=0.55 * on + 0.01,
        sm_occupancy=0.2 * on,
        tensor=0.2 * on,
        dram=0.1 * on,
        fp16=0.2 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=0.001 * g.model.pcie_bytes_per_second,  # requests in: tens of MB/s
        power_fraction=0.08,
        temperature_celsius=40,
        clock_fraction=0.9,
        process=True,
    )


#: Requests of the vllm_replica profile: arrivals at random (a Poisson process, REPLICA_REQUESTS_PER_SECOND),
#: each decoding for an exponentially distributed time of mean REPLICA_REQUEST_SECONDS, cut at
#: REPLICA_LONGEST_SECONDS (chat turns: most answers short, a few long). At random, their bursts start at no
#: steady period: 28% of bursts within 1.5x of the previous period over an hour, above the analyzer's
#: starvation_steady_share (50%) in under 1% of its minute-long windows.
REPLICA_REQUESTS_PER_SECOND, REPLICA_REQUEST_SECONDS, REPLICA_LONGEST_SECONDS = 1.0, 0.5, 4.0
#: Requests a vllm_replica decodes at once; more wait in its queue (a small max_num_seqs: a large model's).
REPLICA_MOST_RUNNING = 4
#: Tokens of a vllm_replica request (a short chat turn).
REPLICA_PROMPT_TOKENS, REPLICA_OUTPUT_TOKENS = 300.0, 40.0
#: Requests a second a vllm_replica finishes at most: REPLICA_MOST_RUNNING at once, each REPLICA_REQUEST_SECONDS.
REPLICA_CAPACITY = REPLICA_MOST_RUNNING / REPLICA_REQUEST_SECONDS
#: How long a request waits before its client gives up (an OpenAI client's default timeout is 60 s to 10 min;
#: gateways cut sooner): what an overloaded replica's queue holds at most, at its excess rate.
REPLICA_CLIENT_TIMEOUT_SECONDS = 60.0


def replica_backlog(g: SimGpu, t: float) -> float:
    """Requests queued at `t` past what a vllm_replica decodes at its most, where its traffic's step brings more a
    second than REPLICA_CAPACITY: the excess piles up from the step's start, until clients give up
    (REPLICA_CLIENT_TIMEOUT_SECONDS). A step under capacity drains it at once (a simplification: a real queue
    drains at the spare rate)."""
    rate = g.requests_per_second(t, REPLICA_REQUESTS_PER_SECOND)
    if rate <= REPLICA_CAPACITY:
        return 0.0
    since = max([g.started + at for at, _ in g.traffic if g.started + at <= t], default=g.started)
    return (rate - REPLICA_CAPACITY) * min(t - since, REPLICA_CLIENT_TIMEOUT_SECONDS)


def _replica_requests(g: SimGpu, start: float, end: float) -> list[tuple[float, float]]:
    """The (start, end) of the requests that overlap [start, end], in order of arrival: each whole second
    draws its arrivals and their lengths from its own seed, so the same GPU sees the same requests whatever
    the window asked for."""
    requests = []
    for second in range(math.floor(start - REPLICA_LONGEST_SECONDS), math.floor(end) + 1):
        rng = random.Random(f"{g.seed}:{g.index}:requests:{second}")
        rate = g.requests_per_second(second, REPLICA_REQUESTS_PER_SECOND)
        arrivals = sorted(second + rng.random() for _ in range(_poisson(rng, rate)))
        for arrival in arrivals:
            finish = arrival + min(rng.expovariate(1 / REPLICA_REQUEST_SECONDS), REPLICA_LONGEST_SECONDS)
            if finish > start and arrival < end:
                requests.append((arrival, finish))
    return requests


def _replica_busy(g: SimGpu, t: float, w: float) -> float:
    """Share of [t - w, t] in which the replica decodes at least one request (the union of its requests)."""
    covered, reach = 0.0, t - w
    for arrival, finish in _replica_requests(g, t - w, t):
        begin, end = max(arrival, reach), min(finish, t)
        if end > begin:
            covered += end - begin
            reach = end
    return covered / w if w > 0 else 0.0


def _vllm_replica(g: SimGpu, t: float, w: float) -> Activity:
    # vLLM takes gpu_memory_utilization (0.9) of the GPU at start, for its weights and KV cache, whatever the
    # load; decoding is bound by memory bandwidth (DRAM busier than the SMs).
    on = 1.0 if replica_backlog(g, t) else _replica_busy(g, t, w)
    return Activity(
        busy=on,
        sm_active=0.3 * on + 0.01,
        sm_occupancy=0.15 * on,
        tensor=0.12 * on,
        dram=0.4 * on,
        fp16=0.12 * on,
        memory_fraction=0.9,
        pcie_rx=0.001 * g.model.pcie_bytes_per_second,
        power_fraction=0.1 + 0.25 * on,
        temperature_celsius=40 + 8 * on,
        clock_fraction=0.9,
        process=True,
        cpu_fraction=0.15,
    )


def _poor_placement(g: SimGpu, t: float, w: float) -> Activity:
    # The first GPU of the job does the work; the others wait on exchanges over PCIe across sockets.
    level = 0.85 if g.role == 0 else 0.3
    a = Activity(
        busy=1.0 if g.role == 0 else 0.6,
        sm_active=level + g.noise(t, 0.03),
        sm_occupancy=0.4 * level,
        tensor=0.6 * level,
        dram=0.4 * level,
        fp16=0.3 * level,
        memory_fraction=g.params["memory"],
        pcie_tx=0.45 * g.model.pcie_bytes_per_second,
        pcie_rx=0.45 * g.model.pcie_bytes_per_second,
        power_fraction=0.8 * level,
        temperature_celsius=50 + 15 * level,
        process=True,
    )
    return a


def _exchange_over_pcie(g: SimGpu, t: float, w: float) -> Activity:
    # Kernels run all the time (compute, then NCCL's copy kernels waiting on the host), so utilization is
    # high; the SMs work about half of it. Every rank sends and receives the same over PCIe, NVLink idle.
    pcie = g.model.pcie_bytes_per_second
    level = 0.5 + g.noise(t, 0.04)
    return Activity(
        busy=0.97,
        sm_active=level,
        sm_occupancy=0.4 * level,
        tensor=0.6 * level,
        dram=0.4 * level,
        fp16=0.3 * level,
        memory_fraction=g.params["memory"],
        pcie_tx=(0.35 + g.noise(t, 0.05, 1)) * pcie,
        pcie_rx=(0.37 + g.noise(t, 0.05, 2)) * pcie,
        power_fraction=0.5,
        temperature_celsius=58,
        process=True,
    )


def _nvlink_faults(g: SimGpu, t: float, w: float) -> Activity:
    a = _healthy(g, t, w)
    a.sm_active *= 0.6  # every rank waits on the exchange over the failing links
    a.tensor *= 0.6
    a.nvlink_tx = a.nvlink_rx = 0.04 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links
    if g.role == 0:
        a.nvlink_links_down = 4
        a.nvlink_crc_rate, a.nvlink_replay_rate, a.nvlink_recovery_rate = 150.0, 0.5, 0.02
    return a


#: What a kernel's work moves: utilization and the profiling fields.
_KERNEL_FIELDS = ("busy", "sm_active", "sm_occupancy", "tensor", "dram", "fp16", "fp32")


def _working_for(a: Activity, on: float) -> Activity:
    """`a` working for `on` (0-1) of the sample window and running no kernel the rest."""
    for name in _KERNEL_FIELDS:
        setattr(a, name, getattr(a, name) * on)
    return a


def _waiting(g: SimGpu, t: float, on: float, noise_salt: int = 0) -> Activity:
    """Healthy training for `on` of the sample window, waiting in a collective the rest: NCCL keeps a
    kernel spinning on a few SMs, so utilization stays at 100% while SM activity and power fall."""
    a = _healthy(g, t, 1.0)
    wait = 1.0 - on
    for name in ("sm_active", "sm_occupancy", "tensor", "dram", "fp16", "fp32"):
        setattr(a, name, getattr(a, name) * on + 0.03 * wait)
    a.power_fraction = a.power_fraction * on + (0.12 + g.noise(t, 0.03, 10 + noise_salt)) * wait
    a.nvlink_tx *= on
    a.nvlink_rx *= on
    return a


def _checkpointing(g: SimGpu, t: float, w: float) -> Activity:
    # Every rank keeps the job's schedule, drawn from the seed all the node's GPUs share.
    job = random.Random(f"{g.seed}:checkpoint")
    compute, save, phase = job.uniform(15, 40), job.uniform(15, 25), job.uniform(0, 100)
    saving = duty(t, w, compute + save, save, phase - compute)
    if g.role == 0:  # writes the checkpoint from host memory: no kernel runs
        scale = 1.0 - saving
        a = _working_for(_healthy(g, t, w), scale)
        a.busy += 0.03 * saving
        a.power_fraction = a.power_fraction * scale + 0.05 * saving
        a.nvlink_tx *= scale
        a.nvlink_rx *= scale
        # Its input stops while it saves, and the state it saves leaves the GPU (a tenth of the link).
        a.pcie_rx *= scale
        a.pcie_tx = a.pcie_tx * scale + 0.1 * g.model.pcie_bytes_per_second * saving
        a.cpu_fraction = 0.4 + 0.5 * saving
        return a
    return _waiting(g, t, 1.0 - saving)


def _straggler(g: SimGpu, t: float, w: float) -> Activity:
    # Steps of about a second; the slow rank computes through each, the others for 60% of it.
    on = 1.0 if g.role == 1 else 0.6 + g.noise(t, 0.03, 11)
    a = _healthy(g, t, w) if g.role == 1 else _waiting(g, t, on)
    if not g.model.nvlink_links:  # without NVLink, NCCL's all-reduce goes over PCIe, both ways alike
        a.pcie_tx = a.pcie_rx = 0.25 * on * g.model.pcie_bytes_per_second
    return a


def _collective_wait(g: SimGpu, t: float, w: float) -> Activity:
    job = random.Random(f"{g.seed}:collective")
    period, phase = job.uniform(8, 12), job.uniform(0, 100)
    return _waiting(g, t, duty(t, w, period, 0.25 * period, phase))


def _host_bound_loop(g: SimGpu, t: float, w: float) -> Activity:
    # A kernel of 8-15 ms every 50 ms: the rest of each iteration is the host thread's.
    job = random.Random(f"{g.seed}:loop")
    on = duty(t, w, 0.05, job.uniform(0.008, 0.015), g.params["phase"])
    return Activity(
        busy=on,
        sm_active=0.6 * on + g.noise(t, 0.01),
        sm_occupancy=0.15 * on,
        tensor=0.3 * on,
        dram=0.3 * on,
        fp16=0.2 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=0.002 * g.model.pcie_bytes_per_second,
        power_fraction=0.15 + 0.3 * on,
        temperature_celsius=45,
        clock_fraction=0.95,
        process=True,
    )


def _cpu_offload(g: SimGpu, t: float, w: float) -> Activity:
    # FSDP or ZeRO with parameters offloaded to host memory: each step computes for 0.15 s of 0.8 s and waits
    # the rest on the next parameters, fetched over PCIe at a tenth of the link (6 GB/s on an H100; gradients
    # go back at half the rate); with several NVLinked GPUs the shards' all-gathers cross NVLink. (Under
    # half the link even at the demo's five-fold speed, where rates per real second are five times these.)
    on = duty(t, w, 0.8, 0.15, g.params["phase"])
    pcie = g.model.pcie_bytes_per_second
    fetch = (0.1 + g.noise(t, 0.01, 12)) * pcie * (1.0 - on) + 0.01 * pcie
    a = _offloaded(g, on, fetch, 0.5 * fetch)
    a.nvlink_tx = a.nvlink_rx = 0.1 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links
    return a


def _offloaded(g: SimGpu, on: float, into: float, back: float) -> Activity:
    """A training step of an offloaded job computing `on` of the sample's time, with `into` and `back` bytes per
    second over PCIe."""
    return Activity(
        busy=on,
        sm_active=0.85 * on,
        sm_occupancy=0.4 * on,
        tensor=0.55 * on,
        dram=0.4 * on,
        fp16=0.3 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=into,
        pcie_tx=back,
        power_fraction=0.2 + 0.6 * on,
        temperature_celsius=48,
        process=True,
    )


def _offload_bursts(g: SimGpu, t: float, w: float) -> Activity:
    """FSDP with CPU offload as a real recording at 10 Hz shows it: each step computes for 55% of its period,
    and in its gap fetches the next parameters at 27 GB/s for 5% of the period and sends gradients back at 12
    GB/s for 5%: 1.35 GB/s in and 0.6 GB/s out on average, in bursts no sample a second long catches whole."""
    period, phase = g.params["period"], g.params["phase"]
    on = duty(t, w, period, 0.55 * period, phase)
    fetch = duty(t, w, period, 0.05 * period, phase - 0.6 * period)  # duty() shifts earlier by its phase
    push = duty(t, w, period, 0.05 * period, phase - 0.75 * period)
    return _offloaded(g, on, 27e9 * fetch, 12e9 * push)


def _input_heavy_starvation(g: SimGpu, t: float, w: float) -> Activity:
    """Training steps starved by an input pipeline pinned at its CPU limit, copying 1-4 GB/s of batches into the
    GPU while it waits (decoded images, video frames) and 5% of that back (labels, losses)."""
    a = _data_starvation(g, t, w)
    rate = 1e9 + 3e9 * (g.params["cycle"] - 150) / 90  # 1-4 GB/s, from a draw every profile makes
    a.pcie_rx = rate * (1.0 - a.busy)
    a.pcie_tx = 0.05 * a.pcie_rx
    return a


def _independent_decode(g: SimGpu, t: float, w: float) -> Activity:
    # One inference process per GPU, each decoding its own requests without a break (a batch generate loop);
    # the first serves a larger model. Nothing passes between the GPUs and their noise is their own.
    heavy = g.role == 0
    sm = (0.55 if heavy else 0.3) + g.noise(t, 0.04, 13)
    return Activity(
        busy=0.96,
        sm_active=sm,
        sm_occupancy=0.3 * sm,
        tensor=0.2 * sm,
        dram=0.3 + g.noise(t, 0.03, 14),
        fp16=0.2 * sm,
        memory_fraction=g.params["memory"],
        pcie_rx=0.002 * g.model.pcie_bytes_per_second,
        power_fraction=(0.7 if heavy else 0.42) + g.noise(t, 0.03, 15),
        temperature_celsius=55,
        process=True,
    )


def _generate_loop(g: SimGpu, t: float, w: float) -> Activity:
    # The host-bound loop driven by one Python thread: the pod's CPU sits at one of the cores its limit allows
    # (the GIL holds the loop to it), whatever else the pod could run.
    a = _host_bound_loop(g, t, w)
    a.cpu_fraction = (1.0 + g.noise(t, 0.05, 16)) / CPU_LIMIT_CORES
    return a


def _light(g: SimGpu, a: Activity, low: float, high: float) -> Activity:
    """`a` holding from `low` to `high` bytes of its GPU's memory (one draw a GPU): a light job's footprint."""
    a.memory_fraction = (low + (high - low) * g.params["phase"] / 100) / g.model.memory_total_bytes
    return a


def _light_loop(g: SimGpu, t: float, w: float) -> Activity:
    """A light job on a big GPU (issue 73's seed problem): 4.5-5.5 GB and about 10% of an A100's or H100's SMs,
    driven by one host thread that holds the pod's CPU at one core: generate_loop's loop with a small model."""
    return _light(g, _generate_loop(g, t, w), 4.5e9, 5.5e9)


def _light_job(g: SimGpu, t: float, w: float) -> Activity:
    """A job at about 10% activity holding 10-11 GiB, its pod's CPU well under its limit: nothing in its telemetry
    names a cause (host_bound_loop's loop with a small model), but whatever its cause it fits a slice."""
    return _light(g, _host_bound_loop(g, t, w), 10 * 2**30, 11 * 2**30)


#: Stages of a simulated pipeline-parallel job: one per GPU, by its role (position in the job).
PIPELINE_STAGES = 4


def _pipeline(
    g: SimGpu, t: float, w: float, job: random.Random, microbatches: tuple[int, int], slot: float
) -> Activity:
    """A GPipe stage (stage = role): each step runs m micro-batches (drawn from the range `microbatches` by the
    job's `job`, as its phase, so that every stage keeps one schedule) forward then as many backward, one every
    `slot` seconds; stage i starts its forwards i slots after the first and its backwards i slots before the
    last, so that each waits (p-1) slots in each half: a bubble of (p-1)/(m+p-1) of the step. In its bubble no
    kernel runs; activations and their gradients cross NVLink (or PCIe) while the step runs."""
    p, m, stage = PIPELINE_STAGES, job.randint(*microbatches), g.role % PIPELINE_STAGES
    period, phase = 2 * (m + p - 1) * slot, job.uniform(0, 100)
    on = duty(t, w, period, m * slot, phase - stage * slot) + duty(
        t, w, period, m * slot, phase - (m + 2 * p - 2 - stage) * slot
    )
    a = _working_for(_healthy(g, t, w), on)
    a.power_fraction = a.power_fraction * on + 0.12 * (1.0 - on)
    links = g.model.nvlink_link_bytes_per_second * g.model.nvlink_links
    a.nvlink_tx = a.nvlink_rx = 0.05 * links
    a.pcie_tx = a.pcie_rx = (0.01 if links else 0.15) * g.model.pcie_bytes_per_second
    return a


def _pipeline_stages(g: SimGpu, t: float, w: float) -> Activity:
    # Too few micro-batches for its stages (2-6 for 4): a bubble of 0.33-0.6 of each step, 0.3-0.5 s a slot.
    job = random.Random(f"{g.seed}:pipeline")
    return _pipeline(g, t, w, job, (2, 6), job.uniform(0.3, 0.5))


def _pipeline_deep(g: SimGpu, t: float, w: float) -> Activity:
    # Enough micro-batches (28-36 for 4 stages: a bubble of 0.077-0.097), long ones (0.5-0.7 s): gaps of a few
    # seconds that take turns, as any pipeline's, within what its schedule costs.
    job = random.Random(f"{g.seed}:pipeline-deep")
    return _pipeline(g, t, w, job, (28, 36), job.uniform(0.5, 0.7))


def _unallocated(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(memory_fraction=0.0, temperature_celsius=31, clock_fraction=0.12, reasons=0x1)


PROFILES = {
    "healthy_training": _healthy,
    "data_starvation": _data_starvation,
    "memory_bandwidth": _memory_bandwidth,
    "memory_fragmentation": _memory_fragmentation,
    "idle": _idle,
    "memory_held": _memory_held,
    "interconnect": _interconnect,
    "thermal_throttling": _thermal_throttling,
    "light_inference": _light_inference,
    "vllm_replica": _vllm_replica,
    "poor_placement": _poor_placement,
    "exchange_over_pcie": _exchange_over_pcie,
    "nvlink_faults": _nvlink_faults,
    "checkpointing": _checkpointing,
    "straggler": _straggler,
    "collective_wait": _collective_wait,
    "host_bound_loop": _host_bound_loop,
    "cpu_offload": _cpu_offload,
    "offload_bursts": _offload_bursts,
    "input_heavy_starvation": _input_heavy_starvation,
    "generate_loop": _generate_loop,
    "light_loop": _light_loop,
    "light_job": _light_job,
    "independent_decode": _independent_decode,
    "pipeline_stages": _pipeline_stages,
    "pipeline_deep": _pipeline_deep,
    "unallocated": _unallocated,
    "xid_errors": _xid_errors,
    "fallen_off_bus": _fallen_off_bus,
    "serving": _serving,
    "idle_replica": _idle_replica,
    "never_served": _never_served,
    "llm_serving": _llm_serving,
    "notebook": _notebook,
    "sparse_notebook": _sparse_notebook,
    "notebook_cells": _notebook_cells,
    "diurnal_replica": _diurnal_replica,
    "training_finished": _training_finished,
    "training_started": _training_started,
}


#: Profiles whose shape takes hours to show (time of day, work that ends): `gpulens eval` plays them over
#: days; the demo fleet, which runs for minutes, leaves them out.
DAY_SCALE = (
    "serving",
    "llm_serving",
    "idle_replica",
    "never_served",
    "notebook",
    "sparse_notebook",
    "notebook_cells",
    "diurnal_replica",
    "training_finished",
    "training_started",
)


#: Profiles `gpulens eval` weighs rival signatures and sizes with, which the demo fleet leaves out: at its
#: five-fold speed the bursts of offload_bursts (27 GB/s) would pass the PCIe link, and all repeat shapes the demo's
#: cpu_offload, data_starvation and generate-loop notebooks already show.
EVAL_ONLY = ("offload_bursts", "input_heavy_starvation", "light_loop", "light_job")


def profile_params(profile: str, rng: random.Random) -> dict[str, float]:
    """Per-GPU jitter, so that no two simulated GPUs are in lock step."""
    return {
        "memory": rng.uniform(0.04, 0.09)
        if profile == "light_inference"
        else rng.uniform(0.3, 0.45)
        if profile == "memory_held"
        else rng.uniform(0.6, 0.8),
        "context_memory": rng.uniform(0.005, 0.012),
        "period": rng.uniform(5.0, 6.5),
        "burst": rng.uniform(1.1, 1.4),
        "phase": rng.uniform(0, 100),
        "cycle": rng.uniform(150, 240),
        # Day-scale profiles: a serving replica's mean duty and seconds per request; an idle replica's
        # (17-20 GiB of an 80 GB GPU); a notebook's working hours and a training job's end, as seconds
        # of the day (UTC).
        "load": 1 / 10800
        if profile == "idle_replica"
        else rng.uniform(0.01, 0.015)
        if profile == "diurnal_replica"
        else rng.uniform(0.02, 0.10),
        "service": 1.0 if profile == "idle_replica" else rng.uniform(2.0, 4.0),
        "model_memory": rng.uniform(0.1, 0.3),
        "idle_model_memory": rng.uniform(0.22, 0.25),
        "work_from": (work_from := rng.uniform(8, 11) * 3600),
        "work_until": work_from + rng.uniform(1, 3) * 3600,
        "finish": rng.uniform(6, 18) * 3600,
        "keeps_memory": rng.random(),
        "started": 0.0,
    }

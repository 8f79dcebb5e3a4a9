"""The GPU catalogue: one entry per GPU model, every figure gpulens uses about it, in one place.

The analyzer reads it for prices (to order waste by cost), link capacities (is PCIe or NVLink the
bottleneck?) and whether a model is high-end (wrong GPU type); the simulator plays its models from
the same figures, so a simulated H100 and the analyzer's idea of an H100 cannot drift apart.

Sources:
- prices: round on-demand cloud rates per GPU-hour in USD, for ordering waste by cost, not for
  invoices: set your own with --prices FILE (YAML of model substring: price);
- link capacities per direction, from NVIDIA's figures: PCIe Gen3 x16 15.8 GB/s, Gen4 31.5, Gen5 63;
  NVLink 25 GB/s per link per direction on A100 and H100/H200 (12 and 18 links);
- memory as NVML reports it (MiB), clocks and power limits: NVIDIA's datasheets and nvidia-smi
  captures; reserved memory and idle power are typical readings, used only by the simulator;
- dense FP16/BF16 tensor TFLOPS (without sparsity) and peak memory bandwidth, the figures a right-sizing plan
  compares models by: NVIDIA's datasheets (TFLOPS: H100 SXM5 and H200 989, A100 312, L40S 362, L4 121, T4 65;
  GB/s: H200 4,800, H100 SXM5 3,350, A100 80GB SXM4 2,039, A100 40GB 1,555, L40S 864, A10G 600, L4 300, T4
  320); 0 where the catalogue has no figure (A10G's TFLOPS: AWS publishes none), and the plan then proposes no
  move to or from that model; bf16 support, from each architecture's whitepaper (Turing's T4 has none);
- MIG profiles: NVIDIA's MIG User Guide, "Supported MIG Profiles" (a slice of n/7 of the GPU's compute
  and its memory in GB, as the profile's name says).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from gpulens.core.config import read_yaml
from gpulens.core.schema import MapOf, Number, Text, validate

MIB = 1024**2
GB = 1e9


@dataclass(frozen=True)
class MigProfile:
    """A MIG profile ("1g.10gb"): `sevenths` of the GPU's compute (its GPU slices), `eighths` of its memory
    (its memory slices: NVIDIA's "Fraction of Memory") and that memory in bytes."""

    name: str
    sevenths: int
    eighths: int
    memory_bytes: float

    @property
    def compute_share(self) -> float:
        return self.sevenths / 7

    @property
    def gpu_share(self) -> float:
        """The share of its GPU the profile takes from others, what it costs: the larger of its compute and its
        memory fractions (a 1g.20gb takes 1/7 of the SMs and 2/8 of the memory: four fit a GPU, not seven)."""
        return max(self.sevenths / 7, self.eighths / 8)


def _mig(*names: str) -> tuple[MigProfile, ...]:
    """Profiles by name ("1g.10gb": 1 slice of 7, 10 GB), smallest first, the last the whole GPU (8 eighths)."""
    whole = float(names[-1].split("g.")[1].removesuffix("gb"))
    return tuple(
        MigProfile(n, int(n.split("g.")[0]), round(8 * gb / whole), gb * GB)
        for n in names
        for gb in [float(n.split("g.")[1].removesuffix("gb"))]
    )


#: NVIDIA MIG User Guide, "Supported MIG Profiles" (without the +me media-engine variants).
MIG_80GB = _mig("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
MIG_40GB = _mig("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
MIG_141GB = _mig("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")


@dataclass(frozen=True)
class GpuModel:
    """One GPU model. Link rates are bytes per second per direction."""

    #: As NVML reports it ("NVIDIA H100 80GB HBM3"); a simulated GPU of this model says the same.
    name: str
    #: Substring of NVML names that identifies the model (MODELS is ordered most specific first).
    match: str
    price_per_hour: float
    #: A data-centre flagship: using a sliver of one is the "wrong GPU type" finding.
    high_end: bool
    pcie_bytes_per_second: float
    nvlink_links: int
    nvlink_link_bytes_per_second: float
    memory_total_bytes: int
    memory_reserved_bytes: int
    sm_clock_max_mhz: int
    memory_clock_mhz: int
    power_limit_watts: float
    idle_power_watts: float
    pcie_generation: int
    pcie_width: int
    #: Hopper and newer: NVML's GPM gives SM activity without DCGM.
    has_gpm: bool
    #: Dense FP16/BF16 tensor TFLOPS; 0: unknown.
    dense_fp16_tflops: float = 0.0
    #: The MIG profiles the model offers, smallest first; none on models without MIG.
    mig_profiles: tuple[MigProfile, ...] = ()
    #: Peak memory bandwidth, bytes per second; 0: unknown.
    memory_bandwidth_bytes_per_second: float = 0.0
    #: Whether its tensor cores run bf16 (Ampere and newer; Turing's T4 runs fp16, int8 and int4 only): a model
    #: trained or served in bf16 runs elsewhere in fp16, or in fp32 far slower.
    bf16: bool = True

    @property
    def nvlink_bytes_per_second(self) -> float:
        """All NVLinks of the GPU together, per direction; 0 on PCIe-only models."""
        return self.nvlink_links * self.nvlink_link_bytes_per_second


NVLINK = 25 * GB  # per link per direction, A100 and H100/H200

#: By the name a fleet file (--simulate.model) uses, most specific NVML match first: "L40S" must be
#: tried before "L4", "A100-SXM4-80GB" before "A100".
MODELS: dict[str, GpuModel] = {
    "H200": GpuModel(
        "NVIDIA H200",
        "H200",
        4.50,
        True,
        63.0 * GB,
        18,
        NVLINK,
        143771 * MIB,
        551 * MIB,
        1980,
        3201,
        700,
        75,
        5,
        16,
        True,
        989.0,
        MIG_141GB,
        memory_bandwidth_bytes_per_second=4800 * GB,
    ),
    "H100-SXM5-80GB": GpuModel(
        "NVIDIA H100 80GB HBM3",
        "H100",
        4.00,
        True,
        63.0 * GB,
        18,
        NVLINK,
        81559 * MIB,
        329 * MIB,
        1980,
        2619,
        700,
        72,
        5,
        16,
        True,
        989.0,
        MIG_80GB,
        memory_bandwidth_bytes_per_second=3350 * GB,
    ),
    "A100-SXM4-80GB": GpuModel(
        "NVIDIA A100-SXM4-80GB",
        "A100-SXM4-80GB",
        2.50,
        True,
        31.5 * GB,
        12,
        NVLINK,
        81920 * MIB,
        431 * MIB,
        1410,
        1593,
        400,
        60,
        4,
        16,
        False,
        312.0,
        MIG_80GB,
        memory_bandwidth_bytes_per_second=2039 * GB,
    ),
    "A100-SXM4-40GB": GpuModel(
        "NVIDIA A100-SXM4-40GB",
        "A100-SXM4-40GB",
        2.00,
        True,
        31.5 * GB,
        12,
        NVLINK,
        40960 * MIB,
        431 * MIB,
        1410,
        1215,
        400,
        55,
        4,
        16,
        False,
        312.0,
        MIG_40GB,
        memory_bandwidth_bytes_per_second=1555 * GB,
    ),
    "A100-PCIE-40GB": GpuModel(
        "NVIDIA A100-PCIE-40GB",
        "A100",
        2.00,
        True,
        31.5 * GB,
        0,
        0.0,
        40960 * MIB,
        431 * MIB,
        1410,
        1215,
        250,
        40,
        4,
        16,
        False,
        312.0,
        MIG_40GB,
        memory_bandwidth_bytes_per_second=1555 * GB,
    ),
    "L40S": GpuModel(
        "NVIDIA L40S",
        "L40S",
        1.50,
        False,
        31.5 * GB,
        0,
        0.0,
        46068 * MIB,
        513 * MIB,
        2520,
        9001,
        350,
        35,
        4,
        16,
        False,
        362.0,
        memory_bandwidth_bytes_per_second=864 * GB,
    ),
    "A10G": GpuModel(
        "NVIDIA A10G",
        "A10G",
        1.00,
        False,
        31.5 * GB,
        0,
        0.0,
        23028 * MIB,
        479 * MIB,
        1710,
        6251,
        300,
        15,
        4,
        16,
        False,
        memory_bandwidth_bytes_per_second=600 * GB,
    ),
    "L4": GpuModel(
        "NVIDIA L4",
        "L4",
        0.80,
        False,
        31.5 * GB,
        0,
        0.0,
        23034 * MIB,
        471 * MIB,
        2040,
        6251,
        72,
        16,
        4,
        16,
        False,
        121.0,
        memory_bandwidth_bytes_per_second=300 * GB,
    ),
    "T4": GpuModel(
        "Tesla T4",
        "T4",
        0.50,
        False,
        15.8 * GB,
        0,
        0.0,
        15360 * MIB,
        255 * MIB,
        1590,
        5000,
        70,
        10,
        3,
        16,
        False,
        65.0,
        memory_bandwidth_bytes_per_second=320 * GB,
        bf16=False,
    ),
}

#: What the analyzer assumes of a model it does not know: a mid-range PCIe Gen3 card.
UNKNOWN = GpuModel("", "", 1.00, False, 15.8 * GB, 0, 0.0, 0, 0, 0, 0, 0, 0, 3, 16, False)


def model_info(nvml_name: str, prices: dict[str, float] | None = None) -> GpuModel:
    """The catalogue entry for an NVML model name ("NVIDIA A100-SXM4-40GB"), with its price replaced
    by the first of `prices` (model substring: USD per GPU-hour) that names it."""
    model = _entry(nvml_name)
    for key, price in (prices or {}).items():
        if key in nvml_name:
            return dataclasses.replace(model, price_per_hour=price)
    return model


@functools.lru_cache(maxsize=1024)
def _entry(nvml_name: str) -> GpuModel:
    """The catalogue entry whose match `nvml_name` holds (UNKNOWN: none). Remembered: a fleet names a few models,
    and a live cycle's plan asks for each pod's (py-spy: the catalogue's scan was 2.5% of a 10,000-GPU service)."""
    return next((m for m in MODELS.values() if m.match in nvml_name), UNKNOWN)


def device_name(model: str, mig_profile: str = "") -> str:
    """A device's name as NVML gives it: its GPU's `model`, and " MIG <profile>" for a MIG instance, which
    gpulens' gpu_info (`model`, `mig_profile`) and dcgm-exporter (`modelName`, `GPU_I_PROFILE`) label apart.
    What a device costs and holds follows the name (gpu_share_of)."""
    return f"{model} MIG {mig_profile}" if mig_profile else model


def gpu_share_of(nvml_name: str) -> float:
    """The share of a whole GPU a device named `nvml_name` takes, what it costs of its GPU's price: 1 for a GPU,
    its profile's gpu_share for a MIG instance ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", as NVML names one), and
    its compute's sevenths where the catalogue does not know the profile (a "3g." takes 3/7 at least)."""
    parent, _, profile = nvml_name.partition(" MIG ")
    if not profile:
        return 1.0
    known = next((p for p in model_info(parent).mig_profiles if p.name == profile.strip()), None)
    if known is not None:
        return known.gpu_share
    slices = profile.split("g.")[0]
    return int(slices) / 7 if slices.isdigit() and 0 < int(slices) <= 7 else 1.0


def device_price(nvml_name: str, prices: dict[str, float] | None = None, gpu_price: float | None = None) -> float:
    """USD an hour of the device named `nvml_name` costs: its GPU's price (`gpu_price`, the cluster's cost tool's
    for its node, else the first of `prices` that names it, else the catalogue's) times the share of the GPU it
    takes (gpu_share_of(): a MIG 3g.40gb of an H100 costs half of it, its 4/8 of the memory, as NVIDIA's profiles
    split it)."""
    whole = model_info(nvml_name, prices).price_per_hour if gpu_price is None else gpu_price
    return whole * gpu_share_of(nvml_name)


def load_prices(path: str | None) -> dict[str, float]:
    """--prices FILE: YAML of model substring: USD per GPU-hour (finite, not negative)."""
    if not path:
        return {}
    schema = MapOf(Number(low=0, noun="a price in USD per GPU-hour"), key=Text(valid=bool, what="a GPU model name"))
    return validate(read_yaml(path, "--prices"), schema, f"--prices {path}", empty={})

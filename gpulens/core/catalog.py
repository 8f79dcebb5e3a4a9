"""What the analyzer knows about GPU models: price, link capacity, and whether it is high-end.

Prices are round on-demand cloud rates per GPU-hour in USD, for ordering waste by cost, not for
invoices: set your own with --prices FILE (YAML of model substring: price). Link capacities are per
direction, from NVIDIA's figures (PCIe Gen3 0.985 GB/s per lane, doubling per generation; NVLink
25 GB/s per link per direction on A100 and H100).
"""
from __future__ import annotations

from dataclasses import dataclass
from gpulens.core.config import ConfigError, read_yaml

GB = 1e9


@dataclass(frozen=True)
class ModelInfo:
    price_per_hour: float
    pcie_bytes_per_second: float
    nvlink_bytes_per_second: float
    high_end: bool


# Matched by substring of the NVML model name, most specific first.
CATALOG: list[tuple[str, ModelInfo]] = [
    ("H200", ModelInfo(4.50, 63.0 * GB, 18 * 25 * GB, True)),
    ("H100", ModelInfo(4.00, 63.0 * GB, 18 * 25 * GB, True)),
    ("A100-SXM4-80GB", ModelInfo(2.50, 31.5 * GB, 12 * 25 * GB, True)),
    ("A100-SXM4-40GB", ModelInfo(2.00, 31.5 * GB, 12 * 25 * GB, True)),
    ("A100", ModelInfo(2.00, 31.5 * GB, 0.0, True)),
    ("L40S", ModelInfo(1.50, 31.5 * GB, 0.0, False)),
    ("A10G", ModelInfo(1.00, 31.5 * GB, 0.0, False)),
    ("L4", ModelInfo(0.80, 31.5 * GB, 0.0, False)),
    ("T4", ModelInfo(0.50, 15.8 * GB, 0.0, False)),
]
UNKNOWN = ModelInfo(1.00, 15.8 * GB, 0.0, False)


def model_info(model: str, prices: dict[str, float] | None = None) -> ModelInfo:
    """Catalog entry for an NVML model name ("NVIDIA A100-SXM4-40GB"), with price overrides."""
    info = next((i for key, i in CATALOG if key in model), UNKNOWN)
    for key, price in (prices or {}).items():
        if key in model:
            return ModelInfo(price, info.pcie_bytes_per_second, info.nvlink_bytes_per_second, info.high_end)
    return info


def load_prices(path: str | None) -> dict[str, float]:
    if not path:
        return {}
    raw = read_yaml(path, "--prices") or {}
    try:
        return {str(k): float(v) for k, v in raw.items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise ConfigError(f"--prices {path}: must map model names to USD per GPU-hour, e.g. 'H100: 4.0' ({e})") from e

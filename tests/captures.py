"""Fake-NVML GPUs built from the real captures in tests/fixtures/captures/, read as they are.

Each function returns the state-file keys of one GPU (see tests/fake_nvml/state.py), with identity
and values taken from what nvidia-smi reported on real hardware, so that the exporter's golden output
is what it would print on that machine.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

#: Real captures from real GPUs, with their provenance and licences (README.md there).
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
H100_CAPTURE = FIXTURES / "nvidia-smi" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
A100_MIG_XML = FIXTURES / "nvidia-smi-xml" / "a100-sxm4-v12.xml"
T4_XML = FIXTURES / "nvidia-smi-xml" / "tesla-t4.xml"

MIB = 1024**2


def number(text: str | None) -> float | None:
    """'116.51 W' -> 116.51, '124 MiB' -> 124, '16x' -> 16; '[N/A]', 'N/A', '-' -> None."""
    if text is None:
        return None
    match = re.match(r"\s*(-?[0-9.]+)", text)
    return float(match.group(1)) if match else None


def capture_sections(path: Path) -> dict[str, list[str]]:
    """The '#####'-bannered sections of an nvidia_gpu_exporter capture, by title."""
    sections: dict[str, list[str]] = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#####") and i + 1 < len(lines) and lines[i + 1].startswith("# "):
            title = lines[i + 1][2:].strip()
            j = i + 2
            while j < len(lines) and not lines[j].startswith("#####"):
                j += 1
            # skip the command line and the closing banner
            body = lines[j + 1 :]
            end = next((k for k, line in enumerate(body) if line.startswith("#####")), len(body))
            sections[title] = [line for line in body[:end] if line.strip()]
            i = j + 1 + end
        else:
            i += 1
    return sections


def _csv_rows(lines: list[str]) -> list[dict[str, str]]:
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    rows = list(reader)
    header = [h.strip() for h in rows[0]]
    return [dict(zip(header, (v.strip() for v in row), strict=True)) for row in rows[1:]]


def h100_under_load() -> dict[str, str]:
    """The H100 80GB HBM3 capture under gpu-burn plus two memory hogs."""
    sections = capture_sections(H100_CAPTURE)
    gpu = _csv_rows(sections["load :: query-gpu (csv, what the exporter parses)"])[0]
    apps = _csv_rows(sections["load :: query-compute-apps (per-process)"])
    pmon = {}
    for line in sections["load :: pmon (per-process monitor)"]:
        if not line.startswith("#"):
            cols = line.split()
            pmon[int(cols[1])] = number(cols[3]) or 0
    state = {
        "uuid": gpu["uuid"],
        "name": gpu["name"],
        "pci_bus_id": gpu["pci.bus_id"],
        "util_gpu": int(number(gpu["utilization.gpu [%]"])),
        "util_memory": int(number(gpu["utilization.memory [%]"])),
        "memory_total": int(number(gpu["memory.total [MiB]"]) * MIB),
        "memory_reserved": int(number(gpu["memory.reserved [MiB]"]) * MIB),
        "memory_used": int(number(gpu["memory.used [MiB]"]) * MIB),
        "sm_clock_mhz": int(number(gpu["clocks.current.sm [MHz]"])),
        "sm_clock_max_mhz": int(number(gpu["clocks.max.sm [MHz]"])),
        "memory_clock_mhz": int(number(gpu["clocks.current.memory [MHz]"])),
        "power_mw": round(number(gpu["power.draw [W]"]) * 1000),
        "power_limit_mw": round(number(gpu["enforced.power.limit [W]"]) * 1000),
        "temperature_c": int(number(gpu["temperature.gpu"])),
        "clock_event_reasons": int(gpu["clocks_event_reasons.active"], 16),
        "ecc_corrected": int(number(gpu["ecc.errors.corrected.aggregate.total"])),
        "ecc_uncorrected": int(number(gpu["ecc.errors.uncorrected.aggregate.total"])),
        "remapped_correctable": int(number(gpu["remapped_rows.correctable"])),
        "remapped_uncorrectable": int(number(gpu["remapped_rows.uncorrectable"])),
        "remap_pending": 1 if gpu["remapped_rows.pending"] == "Yes" else 0,
        "remap_failure": 1 if gpu["remapped_rows.failure"] == "Yes" else 0,
        "pcie_gen": int(number(gpu["pcie.link.gen.gpucurrent"])),
        "pcie_gen_max": int(number(gpu["pcie.link.gen.max"])),
        "pcie_width": int(number(gpu["pcie.link.width.current"])),
        "pcie_width_max": int(number(gpu["pcie.link.width.max"])),
        **nvlink_links(sections["capabilities :: nvlink -s"]),
        "gpm": 1,
    }
    for i, app in enumerate(apps):
        pid = int(app["pid"])
        state.update(
            {
                f"proc{i}.pid": pid,
                f"proc{i}.name": app["process_name"],
                f"proc{i}.memory": int(number(app["used_gpu_memory [MiB]"]) * MIB),
                f"proc{i}.sm_util": int(pmon.get(pid, 0)),
            }
        )
    return state


def nvlink_links(lines: list[str]) -> dict[str, object]:
    """The links `nvidia-smi nvlink -s` lists ("Link 3: 26.562 GB/s", or "Link 3: <inactive>" for a link
    that is down) as state-file keys."""
    links = [re.match(r"\s*Link (\d+): (.*)", line) for line in lines]
    listed = [(int(m.group(1)), m.group(2).strip()) for m in links if m]
    down = [str(link) for link, speed in listed if "inactive" in speed]
    return {"nvlink_links": len(listed), "nvlink_down": ",".join(down)}


def _xml_gpu(path: Path) -> tuple[ET.Element, str]:
    root = ET.parse(path).getroot()
    return root.find("gpu"), root.findtext("driver_version")


def _xml_common(gpu: ET.Element) -> dict[str, object]:
    def mib(path):
        return int(number(gpu.findtext(path)) * MIB)

    power = gpu.findtext("power_readings/power_draw") or gpu.findtext("gpu_power_readings/power_draw")
    limit = gpu.findtext("power_readings/enforced_power_limit") or gpu.findtext(
        "gpu_power_readings/current_power_limit"
    )
    state = {
        "uuid": gpu.findtext("uuid"),
        "name": gpu.findtext("product_name"),
        "pci_bus_id": gpu.findtext("pci/pci_bus_id"),
        "memory_total": mib("fb_memory_usage/total"),
        "memory_reserved": mib("fb_memory_usage/reserved"),
        "memory_used": mib("fb_memory_usage/used"),
        "sm_clock_mhz": int(number(gpu.findtext("clocks/sm_clock"))),
        "sm_clock_max_mhz": int(number(gpu.findtext("max_clocks/sm_clock"))),
        "memory_clock_mhz": int(number(gpu.findtext("clocks/mem_clock"))),
        "temperature_c": int(number(gpu.findtext("temperature/gpu_temp"))),
        "pcie_gen": int(number(gpu.findtext("pci/pci_gpu_link_info/pcie_gen/current_link_gen"))),
        "pcie_gen_max": int(number(gpu.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen"))),
        "pcie_width": int(number(gpu.findtext("pci/pci_gpu_link_info/link_widths/current_link_width"))),
        "pcie_width_max": int(number(gpu.findtext("pci/pci_gpu_link_info/link_widths/max_link_width"))),
        "nvlink_links": 0,
        "gpm": 0,
    }
    if number(power) is not None:
        state["power_mw"] = round(number(power) * 1000)
    if number(limit) is not None:
        state["power_limit_mw"] = round(number(limit) * 1000)
    return state


def t4_with_processes() -> tuple[dict[str, object], str]:
    """Tesla T4 (driver 515.105.01) running Xorg and one python process; link at x8 of x16."""
    gpu, driver = _xml_gpu(T4_XML)
    state = _xml_common(gpu)
    state["util_gpu"] = int(number(gpu.findtext("utilization/gpu_util")))
    state["util_memory"] = int(number(gpu.findtext("utilization/memory_util")))
    compute = [p for p in gpu.findall("processes/process_info") if p.findtext("type") == "C"]
    for i, p in enumerate(compute):
        state.update(
            {
                f"proc{i}.pid": int(p.findtext("pid")),
                f"proc{i}.name": p.findtext("process_name"),
                f"proc{i}.memory": int(number(p.findtext("used_memory")) * MIB),
                f"proc{i}.sm_util": 0,
            }
        )
    return state, driver


def a100_mig() -> tuple[dict[str, object], str]:
    """A100-SXM4-80GB (driver 535.54.03) in MIG mode with four 1g.20gb instances (GI 3-6)."""
    gpu, driver = _xml_gpu(A100_MIG_XML)
    state = _xml_common(gpu)
    state["mig_mode"] = 1
    total_sms = 98  # A100: 7 compute slices of 14 SMs
    for i, mig in enumerate(gpu.findall("mig_devices/mig_device")):
        sms = int(mig.findtext("device_attributes/shared/multiprocessor_count"))
        memory = number(mig.findtext("fb_memory_usage/total"))
        profile = f"{round(sms / (total_sms / 7))}g.{round(memory / 1024)}gb"
        gi = int(mig.findtext("gpu_instance_id"))
        state.update(
            {
                f"mig{i}.uuid": f"MIG-{state['uuid'][4:-4]}{gi:04d}",  # nvidia-smi -q -x omits MIG UUIDs
                f"mig{i}.name": f"{state['name']} MIG {profile}",
                f"mig{i}.gi": gi,
                f"mig{i}.ci": int(mig.findtext("compute_instance_id")),
                f"mig{i}.memory_total": int(memory * MIB),
                f"mig{i}.memory_used": int(number(mig.findtext("fb_memory_usage/used")) * MIB),
            }
        )
    return state, driver

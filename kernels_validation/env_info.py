"""Write env.json: what machine, driver and software a benchmark run measured.

Responsibility: record the device name, driver, CUDA and torch/Triton versions, the
host link (PCIe generation and width as nvidia-smi reports them), the CPU and the date,
so every CSV of a run can be traced to its machine. Invariant: never fails the run -- a
fact that cannot be read is written as null. Imports only torch and the standard library.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

SMI_FIELDS = [
    "name", "driver_version", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "clocks.max.sm", "clocks.max.mem",
    "power.limit", "memory.total",
]  # fmt: skip


def nvidia_smi() -> dict:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    if not out:
        return {}
    values = [v.strip() for v in out[0].split(",")]
    return dict(zip(SMI_FIELDS, values, strict=False))


def driver_from_proc() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def gpu_facts() -> dict:
    if not torch.cuda.is_available():
        return {"device": "cpu", "device_kind": "cpu", "benchmark_cpu_threads": 1}
    p = torch.cuda.get_device_properties(0)
    smi = nvidia_smi()
    return {
        "device": torch.cuda.get_device_name(0),
        "device_kind": "gpu",
        "driver": smi.get("driver_version") or driver_from_proc(),
        "cuda_runtime": torch.version.cuda,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "total_memory_bytes": p.total_memory,
        "l2_cache_bytes": getattr(p, "L2_cache_size", None),
        "nvidia_smi": smi,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mode", default="full", choices=["full", "quick"])
    args = ap.parse_args()
    facts = {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": args.mode,
        **gpu_facts(),
        "torch": torch.__version__,
        "triton": triton_version(),
        "python": sys.version.split()[0],
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    facts.setdefault("driver", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2), flush=True)


if __name__ == "__main__":
    main()

"""Shared plumbing for the device-side benchmark scripts: flags, timing, CSV rows, budgets.

Responsibility: everything the ``bench_*.py`` scripts have in common, so each script holds
only what it measures. Invariant: this module (like every script that runs on the device)
imports only torch and the standard library -- never ``sim``, numpy, pandas or yaml -- since
the device image has torch and Triton and nothing of ours. Rows reach the CSV file one at a
time and are flushed at once, so a script killed by its time limit leaves every finished row.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from geometry import GEOMETRIES, Geometry  # noqa: F401  (re-exported)

KiB = 2**10
MiB = 2**20
GiB = 2**30
CPU_THREADS = 1  # torch threads for CPU (quick) runs


def common_args(description: str) -> argparse.ArgumentParser:
    """The flags every benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds on a CPU")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", required=True, type=Path, help="CSV file to write")
    p.add_argument("--budget-s", type=float, default=60.0, help="stop starting new cases after")
    p.add_argument("--seed", type=int, default=0)
    return p


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch sees no CUDA device")
    if name == "cpu":
        # one thread: on a shared, loaded CPU, OpenMP barriers waiting for descheduled
        # threads made single copies 100x slower; CPU runs only check the plumbing anyway
        torch.set_num_threads(CPU_THREADS)
    return torch.device(name)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Deadline:
    """A soft time budget: cases already started finish, new ones are skipped."""

    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self._t0 = time.monotonic()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self._t0)

    def expired(self) -> bool:
        return self.left_s() <= 0


class CsvSink:
    """Writes rows with a fixed header; each row is flushed as soon as it is written."""

    def __init__(self, path: Path, columns: Sequence[str]):
        self.columns = list(columns)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115
        self._w = csv.DictWriter(self._fh, fieldnames=self.columns)
        self._w.writeheader()
        self._fh.flush()
        self.rows = 0

    def write(self, row: dict) -> None:
        missing = set(self.columns) - set(row)
        extra = set(row) - set(self.columns)
        if missing or extra:
            raise ValueError(f"row keys differ from header: missing {missing}, extra {extra}")
        self._w.writerow({k: _fmt(v) for k, v in row.items()})
        self._fh.flush()
        self.rows += 1

    def close(self) -> None:
        self._fh.close()


def _fmt(v):
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else str(v))
    return v


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``reps`` timed calls after warm-up."""

    median_s: float
    p10_s: float
    p90_s: float
    reps: int

    def row(self, prefix: str = "time_s") -> dict:
        d = asdict(self)
        return {
            f"{prefix}_median": d["median_s"],
            f"{prefix}_p10": d["p10_s"],
            f"{prefix}_p90": d["p90_s"],
            "reps": d["reps"],
        }


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples_s: list[float]) -> Timing:
    return Timing(
        median_s=statistics.median(samples_s),
        p10_s=_quantile(samples_s, 0.1),
        p90_s=_quantile(samples_s, 0.9),
        reps=len(samples_s),
    )


def time_fn(
    fn: Callable[[], object],
    device: torch.device,
    *,
    warmup: int = 3,
    reps: int = 20,
    max_time_s: float = 2.0,
    stream: torch.cuda.Stream | None = None,
) -> Timing:
    """Median time of ``fn()``: CUDA events around each call on a GPU, a host clock on a CPU.

    The repetition count shrinks so one case takes about ``max_time_s`` at most (but never
    fewer than 3 timed calls): big cases get fewer repeats, small ones the full count.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    probe_s = max(time.perf_counter() - t0, 1e-7)
    reps = max(3, min(reps, int(max_time_s / probe_s)))
    samples: list[float] = []
    if device.type == "cuda":
        s = stream or torch.cuda.current_stream(device)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(reps)
        ]
        for start, end in events:
            start.record(s)
            fn()
            end.record(s)
        torch.cuda.synchronize(device)
        samples = [start.elapsed_time(end) / 1e3 for start, end in events]
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return summarize(samples)


def rotation_count(
    footprint_bytes: int, device: torch.device, *, target_bytes: int = 256 * MiB, cap: int = 16
) -> int:
    """How many distinct input copies to cycle through so repeats do not run from L2.

    An H200 has 60 MB of L2: cycling through >= 256 MiB of distinct data means each call
    finds its inputs evicted. On a CPU one copy is used (quick mode only checks plumbing).
    """
    if device.type != "cuda" or footprint_bytes <= 0:
        return 1
    return max(1, min(cap, math.ceil(target_bytes / footprint_bytes)))


def host_randperm(n: int, device: torch.device, seed: int) -> torch.Tensor:
    """A seeded permutation drawn on the host (same on every device), then moved."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=gen).to(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def finish(sink: CsvSink, deadline: Deadline, skipped: int) -> None:
    sink.close()
    note = f", {skipped} cases skipped by the time budget" if skipped else ""
    log(f"wrote {sink.rows} rows{note}")
    sys.stdout.flush()


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def fix_triton_interpreter_for_numpy2() -> None:
    """Triton 3.6's interpreter calls int() on 1-element arrays, which numpy 2 refuses.

    Only used under ``TRITON_INTERPRET=1`` (CPU tests of the kernel); a no-op on a GPU.
    """
    if not env_flag("TRITON_INTERPRET"):
        return
    from triton.runtime import interpreter as it

    if getattr(it, "_kvsim_patched", False):
        return
    orig = it._patch_lang_tensor

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    it._patch_lang_tensor = patched
    it._kvsim_patched = True

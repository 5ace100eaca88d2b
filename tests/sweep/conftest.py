"""Tiny scenarios and sweep files for the sweep tests (each run well under a second)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: a closed loop of small agents on a ~1.9 GB pool that follows the accelerator's memory
#: (18 GB, 100 % usable, minus Llama-3.1-8B's 16 GB of weights)
TINY = """\
schema_version: 1
name: tiny_agents
seed: 3
model: llama-3.1-8b
hardware:
  accelerator: h100-sxm-80gb
  accelerator_overrides: {memory_bytes: 18000000000}
  gpu_memory_utilization: 1.0
allocator: {kind: paged, block_size: 16}
workload:
  kind: agent
  num_trajectories: 24
  arrival: {kind: closed_loop, concurrency: 8}
  turns: 6
  system_prompt_tokens: 256
  tool_tokens: 0
  task_tokens: 200
  output_tokens: {kind: lognormal, median: 60, sigma: 0.5, max: 300}
  observation_tokens: {kind: lognormal, median: 400, sigma: 0.8, max: 3000}
  pause_s: {kind: lognormal, median: 0.5, sigma: 0.5, max: 5}
"""

SWEEP = """\
schema_version: 1
name: tiny_sweep
sweep:
  base: tiny.yaml
  grid:
    pause_policy.kind: [hold, recompute]
  points:
    - {workload.arrival.concurrency: 2, workload.num_trajectories: 6}
    - {workload.arrival.concurrency: 6, workload.num_trajectories: 18}
  replications: 2
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture
def sweep_file(tiny: Path) -> Path:
    path = tiny.with_name("tiny_sweep.yaml")
    path.write_text(SWEEP)
    return path

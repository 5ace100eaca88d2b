"""Issue 27 follow-up: the pool study of a hybrid model's run uses its block table's bytes
per token (``allocator_kv_bytes_per_token``) and takes its token states from
memory.parquet's ``useful_bytes``, which holds the side groups' token states (h53; before,
the whole of ``side_kv_bytes`` was added); a dense run's summary has no such key."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from sim.report.data import load_run
from sim.report.pool import SHARES, pool_shares, table_bpt
from sim.run import run_scenario


def _scenario(tmp_path, model: str, allocator: dict) -> str:
    doc = {
        "schema_version": 1, "name": "pool", "seed": 0, "model": model,
        "hardware": {"accelerator": "h200-141gb", "tp": 1, "kv_pool_bytes_per_gpu": 4e9},
        "allocator": allocator, "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "requests", "requests": [
            {"count": 3, "at_s": 0.0, "prompt_tokens": 3000, "output_tokens": 64}]},
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(
    "allocator",
    [{"kind": "paged", "block_size": 16},
     {"kind": "contiguous", "reservation": "oracle"}],  # fmt: skip
)
def test_hybrid_pool_shares_count_side_states(allocator, tmp_path):
    run = load_run(run_scenario(_scenario(tmp_path, "gemma-3-27b", allocator)))
    s, m = run.summary, run.memory
    assert s["allocator_kv_bytes_per_token"] < s["kv_bytes_per_token"]  # windows: fewer layers
    assert table_bpt(s) == s["allocator_kv_bytes_per_token"]
    side = m.side_kv_bytes.to_numpy(float)
    assert side.max() > 0
    shares = pool_shares(run)
    assert math.isclose(sum(shares[k] for k in SHARES), 1.0, rel_tol=1e-9)
    assert all(shares[k] >= 0 for k in SHARES)
    t = m.t_s.to_numpy(float)
    dt = np.diff(np.append(t, max(float(s["sim_time_s"]), t[-1])))
    # useful_bytes holds the side states already (h53): the rest of side_kv_bytes is waste
    useful = m.useful_bytes.to_numpy(float)
    assert (useful <= m.allocated_bytes.to_numpy(float)).all()
    states = (useful * dt).sum() / (s["kv_pool_bytes"] * dt.sum())
    assert math.isclose(shares["token_states"], states, rel_tol=1e-9)


def test_dense_summary_has_no_table_key(tmp_path):
    s = run_scenario(_scenario(tmp_path, "llama-3.1-8b", {"kind": "paged"})).summary
    assert "allocator_kv_bytes_per_token" not in s

"""A cluster run gives the same results in processes with different string-hash seeds
(the directory and the front key dicts by content ids and chunk hashes; nothing that
decides a result may depend on Python's per-process hash randomisation)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json
from sim.run.runner import run_scenario
sc = {
    "name": "hashseed", "seed": 2, "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb"},
    "allocator": {"kind": "radix"},
    "workload": {"kind": "coding_agent", "num_trajectories": 4,
                 "arrival": {"kind": "closed_loop", "concurrency": 4}},
    "cluster": {"nodes": [{"count": 3}],
                "router": {"kind": "prefix_affinity", "mu": 0.6,
                           "directory_update_delay_s": 0.2}},
}
res = run_scenario(sc)
s = {k: v for k, v in res.summary.items() if k not in ("wall_time_s", "versions")}
print(json.dumps([s, res.requests.node.tolist(), res.requests.first_token_s.tolist()],
                 sort_keys=True, default=str))
"""


def _run(seed: str) -> list:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_results_do_not_depend_on_the_string_hash_seed():
    a, b = _run("1"), _run("4242")
    assert a == b
    assert a[0]["routing_decisions"] > 0 and a[0]["directory_entries"] > 0

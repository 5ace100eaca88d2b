# %% [markdown]
# # Allocators under one agent-like workload
#
# A notebook in percent format (open it in Jupyter with jupytext, VS Code or PyCharm, or
# run it as a script: `python notebooks/allocator_comparison.py`). It drives every
# allocator kind through the same seeded allocate/append/fork/free trace and compares
# allocation efficiency (F8), effective utilisation (F10), external fragmentation (F9)
# and copies. `N_OPS` is small so the tests can execute it; raise it for a study.

# %%
import os

import pandas as pd

from sim.memory import allocator_kinds, make_allocator
from sim.memory.replay import random_ops, replay
from sim.units import KiB, MiB

N_OPS = int(os.environ.get("KVSIM_NOTEBOOK_OPS", "2000"))
POOL_BYTES = 64 * MiB
KV_BYTES_PER_TOKEN = 4 * KiB  # a toy model: 16,384 tokens fit the pool
REQUEST_BYTES = 512 * KV_BYTES_PER_TOKEN  # phi_ext for a 512-token request

OPTIONS = {
    "static": {"max_tokens": 2048},
    "buddy": {"min_block_tokens": 16},
    "paged": {"block_size": 16},
    "paged_hash": {"block_size": 16},
    "radix": {"block_size": 16},
}

ops = random_ops(N_OPS, seed=11, max_prompt_tokens=1024, max_append_tokens=64, max_live=24)

# %%
rows = []
for kind in allocator_kinds():
    alloc = make_allocator(
        kind, pool_bytes=POOL_BYTES, kv_bytes_per_token=KV_BYTES_PER_TOKEN, **OPTIONS.get(kind, {})
    )
    trace = replay(alloc, ops, every=max(1, N_OPS // 20), request_bytes=REQUEST_BYTES)
    sampled = [r.metrics for r in trace if r.metrics is not None]
    last = sampled[-1]
    rows.append(
        {
            "kind": kind,
            "misses": sum(r.ok is False for r in trace),
            "eta_alloc_mean": sum(m.eta_alloc or 0 for m in sampled) / len(sampled),
            "eta_effective_mean": sum(m.eta_effective for m in sampled) / len(sampled),
            "phi_ext_last": last.phi_ext,
            "peak_allocated_MiB": last.peak_allocated_bytes / MiB,
            "copied_MiB": last.bytes_copied / MiB,
            "cow_copies": last.cow_copies,
        }
    )
table = pd.DataFrame(rows).set_index("kind")
print(table.round(3).to_string())

# %% [markdown]
# Reading the table: `static` wastes what it reserves and never copies; `contiguous` pays
# for growth with copies and leaves holes (phi_ext > 0 while memory is free); `buddy`
# rounds up to powers of two; the paged kinds lose only tail slots, so their misses come
# last and their copies are CoW blocks alone. (Sample means are over the sampled steps,
# not time-weighted.)

"""The summary figures of a disaggregated cluster run (prefill and decode node groups).

Responsibility: from the front's record of each remotely prefilled request
(``sim.cluster.disagg.Phases``), its links and the requests table, the keys
``remote_prefills`` ... ``peak_allocated_bytes_by_role`` (declared in
``sim.metrics.schema``; docs/cluster.md): KV shipped, link time, wait and utilisation,
TTFT split into queue, prefill, transfer and first decode step, memory per role.

Invariant: for every request with a first token the four TTFT parts add up to its
``ttft_s`` (a request its decode instance prefilled itself has no transfer and no
separate decode part: queue is to its admission, prefill to its first token).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sim.metrics.stats import describe

#: the TTFT parts, in path order
TTFT_PARTS = ("ttft_queue_s", "ttft_prefill_s", "ttft_transfer_s", "ttft_decode_s")


def ttft_parts(front: Any, requests: pd.DataFrame) -> np.ndarray:
    """One row per request with a first token: its four TTFT parts (``TTFT_PARTS``)."""
    rows = []
    done = requests[requests.first_token_s.notna()] if len(requests) else requests
    for rid, arr, adm, first in zip(done.req_id, done.arrival_s, done.admitted_s,
                                    done.first_token_s, strict=True):  # fmt: skip
        ph = front.phases.get(int(rid))
        if ph is None or ph.transfer_end_s is None:  # prefilled where it decodes
            rows.append((adm - arr, first - adm, 0.0, 0.0))
            continue
        rows.append((ph.prefill_start_s - arr, ph.prefill_end_s - ph.prefill_start_s,
                     ph.transfer_end_s - ph.prefill_end_s, first - ph.transfer_end_s))  # fmt: skip
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(TTFT_PARTS))


def disagg_summary(front: Any, requests: pd.DataFrame, nodes: list[dict], roles: list[str],
                   sim_time_s: float) -> dict[str, Any]:  # fmt: skip
    """The disaggregation keys of ``summary.json`` (module docstring)."""
    links = front.links
    parts = ttft_parts(front, requests)
    by_role: dict[str, dict[str, int]] = {"kv_pool_bytes": {}, "peak_allocated_bytes": {}}
    for n, role in zip(nodes, roles, strict=True):
        for key, out in by_role.items():
            out[role] = out.get(role, 0) + int(n[key])
    return {
        "remote_prefills": int(len(front.phases)),
        "local_prefills": int(front.local_prefills),
        "kv_transfers": int(links.transfers),
        "kv_transfer_bytes": round(links.bytes),
        "kv_transfer_s": float(links.busy_s),
        "kv_link_wait_s": describe(np.asarray(links.waits_s)),
        "kv_link_utilization": links.utilisation(sim_time_s, front.n_link_pairs),
        **{k: describe(parts[:, i]) for i, k in enumerate(TTFT_PARTS)},
        "kv_pool_bytes_by_role": by_role["kv_pool_bytes"],
        "peak_allocated_bytes_by_role": by_role["peak_allocated_bytes"],
    }

"""The cluster as one run: every node's recorder and KV manager summed for ``summarize``.

Responsibility: present several nodes' recorders (``RecorderSum``) and KV managers
(``KVSum``) through the attributes ``sim.metrics.summary.summarize`` and ``fill_hold``
read, so the cluster's summary has every single-node key with the same name, shape and
meaning over the whole cluster; and the cluster's ``usd_*`` keys from the nodes' own.

How each figure combines (docs/cluster.md): counts, tokens, bytes copied and held
token-seconds are sums; ITL samples are pooled; ``max_itl_s`` is the largest;
``paused_kv_bytes`` and ``paused_hbm_bytes`` means add up (a time-weighted mean of a sum is
the sum of the means); their peaks, like ``peak_allocated_bytes``, are the sum of the nodes'
peaks;
the KV by layer group (``peak_allocated_bytes_by_group``, ``allocated_bytes_by_group_mean``)
adds up group by name, peaks as the sum of the nodes' peaks;
``eta_effective_mean`` is the pool-weighted mean (useful bytes / the cluster's pool);
``eta_alloc_mean`` is the pool-weighted mean of the nodes' (nodes with nothing ever
allocated left out); ``peak_allocated_bytes`` is the sum of the nodes' peaks (an upper
bound of the simultaneous peak; each node's own is under ``nodes``); prefix match rate
is matched / looked-up tokens over every node.

Invariant: with one node every figure equals that node's own (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.memory.kv_manager import HeldTokenSeconds, KVManager


class _Mean:
    """``mean(t)`` of a time-weighted figure combined over nodes with weights."""

    def __init__(self, parts: list[Any], weights: list[float], total: bool = False) -> None:
        self.parts, self.weights, self.total = parts, weights, total

    def mean(self, t: float) -> float:
        if len(self.parts) == 1:  # one node: its own figure, bit for bit (no v * w / w)
            return self.parts[0].mean(t)
        vals = [(p.mean(t), w) for p, w in zip(self.parts, self.weights, strict=True)]
        if self.total:
            return float(sum(v for v, _ in vals if v is not None and not math.isnan(v)))
        vals = [(v, w) for v, w in vals if v is not None and not math.isnan(v)]
        weight = sum(w for _, w in vals)
        return sum(v * w for v, w in vals) / weight if weight > 0 else math.nan


class RecorderSum:
    """Several ``Recorder``s as one (read-only; after the run)."""

    output_tokens: int  # set with the other sums below (a disaggregated run corrects it)

    def __init__(self, recorders: list[Any]) -> None:
        self.recs = recorders
        pools = [r.pool_bytes for r in recorders]
        self.pool_bytes = sum(pools)
        self.eta_alloc = _Mean([r.eta_alloc for r in recorders], pools)
        self.eta_effective = _Mean([r.eta_effective for r in recorders], pools)
        self.paused_bytes = _Mean([r.paused_bytes for r in recorders], pools, total=True)
        self.paused_hbm_bytes = _Mean([r.paused_hbm_bytes for r in recorders], pools, total=True)
        self.paused_hbm_bytes_peak = sum(r.paused_hbm_bytes_peak for r in recorders)
        for name in ("output_tokens", "prefill_tokens", "preemptions", "held_drops",
                     "decisions", "requests_ended"):  # fmt: skip
            setattr(self, name, sum(getattr(r, name) for r in recorders))
        self.max_itl_s = max((r.max_itl_s for r in recorders), default=0.0)

    @property
    def n_steps(self) -> int:
        return sum(r.n_steps for r in self.recs)

    def group_summary(self, sim_time_s: float) -> dict:
        """The nodes' KV by layer group added up, group by name (peaks, like
        ``peak_allocated_bytes``, as the sum of the nodes' peaks; means add up); {} when
        no node's model has several groups."""
        out: dict[str, dict] = {}
        for rec in self.recs:
            for key, by_group in rec.group_summary(sim_time_s).items():
                into = out.setdefault(key, {})
                for name, v in by_group.items():
                    into[name] = into.get(name, 0) + v
        return out

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = [r.itl_samples() for r in self.recs]
        return (
            np.concatenate([v for v, _ in pairs]) if pairs else np.empty(0),
            np.concatenate([w for _, w in pairs]) if pairs else np.empty(0, np.int64),
        )


@dataclass(frozen=True)
class _MemorySum:
    peak_allocated_bytes: float
    bytes_copied: float
    cow_copies: int


@dataclass(frozen=True)
class _PrefixSum:
    match_rate: float | None
    evicted_blocks: int


class KVSum:
    """Several ``KVManager``s as one, for the summary (read-only; after the run)."""

    def __init__(self, kvs: list[KVManager]) -> None:
        self.kvs = kvs
        self.kv_bytes_per_token = float(kvs[0].kv_bytes_per_token)

    def metrics(self) -> _MemorySum:
        ms = [kv.metrics() for kv in self.kvs]
        return _MemorySum(
            sum(m.peak_allocated_bytes for m in ms),
            sum(m.bytes_copied for m in ms),
            sum(int(m.cow_copies) for m in ms),
        )

    def held_token_seconds(self, now: float) -> HeldTokenSeconds:
        """Token-seconds in node 0's bytes per token (nodes of other TP layouts scaled)."""
        total, by_owner, by_key, side = 0.0, {}, {}, 0.0
        side_owner: dict[int, float] = {}
        unkeyed = side_unkeyed = 0.0
        for kv in self.kvs:
            h = kv.held_token_seconds(now)
            side += h.side_byte_s
            side_unkeyed += h.side_unkeyed
            for o, v in h.side_by_owner.items():
                side_owner[o] = side_owner.get(o, 0.0) + v
            scale = float(kv.kv_bytes_per_token) / self.kv_bytes_per_token
            total += h.total * scale
            unkeyed += h.unkeyed * scale
            for o, v in h.by_owner.items():
                by_owner[o] = by_owner.get(o, 0.0) + v * scale
            for k, v in h.by_key.items():
                by_key[k] = by_key.get(k, 0.0) + v * scale
        return HeldTokenSeconds(total, by_owner, by_key, side, side_owner, unkeyed, side_unkeyed)

    @property
    def pool_blocks(self) -> int:
        """The nodes' pools' blocks, summed (``KVManager.pool_blocks``)."""
        return sum(kv.pool_blocks for kv in self.kvs)

    @property
    def block_size(self) -> int | None:
        """Node 0's tokens per block (None for a kind without blocks)."""
        return self.kvs[0].block_size

    def prefix_metrics(self) -> _PrefixSum | None:
        pms = [pm for pm in (kv.prefix_metrics() for kv in self.kvs) if pm is not None]
        if not pms:
            return None
        prompt = sum(pm.prompt_tokens for pm in pms)
        matched = sum(pm.matched_tokens for pm in pms)
        return _PrefixSum(matched / prompt if prompt else None, sum(pm.evicted_blocks for pm in pms))


def cluster_cost(nodes: list[dict], summary: dict) -> dict:
    """The cluster's ``usd_*`` keys: the nodes' totals added (each node provisioned for
    the whole run), per output token and per trajectory over the cluster's; null when a
    node has no price."""
    totals = [n.get("usd_total") for n in nodes]
    rates = [n.get("usd_per_gpu_hour") for n in nodes]
    out: dict[str, Any] = {
        "usd_per_gpu_hour": None,
        "price_source": "+".join(dict.fromkeys(
            n["price_source"] for n in nodes if n.get("price_source") is not None
        )) or None,
        "usd_total": None,
        "usd_per_million_output_tokens": None,
        "usd_per_trajectory": None,
        "paused_hbm_usd": None,
    }
    if any(t is None for t in totals) or any(r is None for r in rates):
        return out
    gpus = [n["num_gpus"] for n in nodes]
    total = float(sum(totals))
    out["usd_per_gpu_hour"] = sum(r * g for r, g in zip(rates, gpus, strict=True)) / sum(gpus)
    out["usd_total"] = total
    if summary.get("output_tokens"):
        out["usd_per_million_output_tokens"] = total / summary["output_tokens"] * 1e6
    if summary.get("trajectories_completed"):
        out["usd_per_trajectory"] = total / summary["trajectories_completed"]
    paused = [n.get("paused_hbm_usd") for n in nodes]
    if all(p is not None for p in paused):
        out["paused_hbm_usd"] = float(sum(paused))
    return out

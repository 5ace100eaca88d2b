"""The run's ``summary.json``: latency percentiles, throughput, memory efficiency, events.

Responsibility: reduce the recorder's tables to the summary fields the issue lists
(``requests_completed``, ``trajectories_completed``, ``sim_time_s``, ``wall_time_s``,
``ttft_s``/``itl_s``/``e2e_s`` with mean/p50/p90/p99, ``output_tokens_per_s``,
``prefix_hit_rate`` (vLLM's cache-lookup hit rate), ``eta_alloc_mean``,
``eta_effective_mean``, ``peak_allocated_bytes``, ``preemptions``, ``rejected``,
``max_itl_s``) plus more, with the seed, the kvsim version (``kvsim_version``) and package
versions;
``rejected_by_reason``, ``trajectories_by_status``, ``compactions`` and ``warnings`` (the
sentences that say a run went pathological: mass rejection, thrashing, failed
trajectories, work left unfinished at the horizon; the CLI prints them as a WARNING
block); ``prefill_tokens`` (prompt tokens
actually computed) and the provider view's ``provider_hit_rate`` and ``provider_bill_usd``
(``workload.provider_cache``; null without one).

Invariants: ITL percentiles pool every inter-token gap of every request (a gap of k steps
counts once, with its whole length); ``*_mean`` memory figures are time-weighted over the
simulated time (``eta_alloc_mean`` over the time anything is allocated); every value is a
JSON number, string or null (never NaN); ``wall_time_s`` is the only wall-clock figure and
is filled in by the run layer. The tables are read column by column (``table[name]``):
the run's numpy ``Columns`` (``Recorder.tables()``), or a cluster's DataFrames, with the
same numpy reductions (a float sum is pandas' ``Series.sum()`` bit for bit:
``sim.metrics.pauses.nansum``). This module does not import pandas.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Collection, Mapping
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sim.memory.kv_manager import HeldTokenSeconds
from sim.metrics.pauses import nansum
from sim.metrics.recorder import Recorder
from sim.metrics.stats import describe, describe_weighted
from sim.sched.request import REJECT_REASONS
from sim.units import GB
from sim.version import __version__
from sim.workload.context import TRAJECTORY_STATUSES

#: summary keys that are wall-clock measurements (excluded from determinism checks)
WALL_CLOCK_KEYS = ("wall_time_s",)
#: a run warns when more than this share of its requests was rejected
REJECTED_WARN_SHARE = 0.01
#: a run warns when a request was preempted more than this many times
PREEMPTIONS_WARN = 10
#: the overload rule (``overload_warning``): a run warns when the median queue wait of the
#: last third of its arrivals is over ``OVERLOAD_WAIT_S`` and over ``OVERLOAD_GROWTH`` times
#: the median of the first third, with at least ``OVERLOAD_MIN_REQUESTS`` waits to compare
OVERLOAD_WAIT_S = 1.0
OVERLOAD_GROWTH = 4.0
OVERLOAD_MIN_REQUESTS = 30
#: warn (``held_drop_warning``) when more than this share of the pauses ended recomputed
#: because memory pressure dropped their held KV
HELD_DROP_WARN_SHARE = 0.05
#: warn (``fork_hold_warning``) when fork branches, which no pause policy governs, hold
#: more than this share of a run's held KV under a policy other than hold
FORK_HOLD_WARN_SHARE = 0.25
#: warn (``prefix_churn_warning``) when the prefix cache, having evicted more blocks than
#: the pool holds, computed again more than this share of the run's prefill tokens
PREFIX_RECOMPUTE_WARN_SHARE = 0.01


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("kvcache-sim", "simpy", "numpy", "pandas", "pydantic", "pyarrow"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _num(x):
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _col(table: Any, name: str, dtype: Any = None) -> np.ndarray:
    """Column ``name`` of ``table`` (``Columns`` or a DataFrame) as a numpy array."""
    return np.asarray(table[name], dtype=dtype)


@runtime_checkable
class SummaryKV(Protocol):
    """Everything ``summarize`` reads of the KV memory: one node's ``KVManager``, or a
    cluster's nodes summed (``sim.cluster.aggregate.KVSum``). Declared, so that a reader
    short of a figure is a type error (mypy), not a silent default."""

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes one token's KV takes on all the instance's GPUs (the pool's unit)."""
        ...

    @property
    def pool_blocks(self) -> int:
        """The blocks of the pool a sequence may use (``prefix_churn_warning``'s pool)."""
        ...

    @property
    def block_size(self) -> int | None:
        """Tokens per block (None for a kind without blocks)."""
        ...

    def metrics(self) -> Any:
        """The memory snapshot (``peak_allocated_bytes``, ``bytes_copied``, ``cow_copies``)."""
        ...

    def held_token_seconds(self, now: float) -> HeldTokenSeconds:
        """Token-seconds held by paused sequences up to ``now`` (F29)."""
        ...

    def prefix_metrics(self) -> Any:
        """The prefix cache's own statistics (``match_rate``, ``evicted_blocks``), or None."""
        ...


def summarize(rec: Recorder, frames: Mapping[str, Any], *, sim_time_s: float, kv: SummaryKV,
              meta: dict, closed_loop: Collection[str] = (),
              recomputed_tokens: int | None = None) -> dict:  # fmt: skip
    """The summary dict (see the module docstring); ``frames``: the record tables by name
    (``Columns`` or DataFrames); ``meta`` adds scenario facts; ``closed_loop``: the
    ``workload`` names whose arrivals are a closed loop (``closed_loop_workloads``), which
    the overload rule leaves out; ``recomputed_tokens``: the tokens the prefix cache
    computed again after evicting them (``sim.metrics.evicted_reuse.EvictedReuse``; None: not
    counted, and no ``prefix_churn_warning``)."""
    req = frames["requests"]
    traj = frames["trajectories"]
    status = _col(req, "status", object)
    traj_status = _col(traj, "status", object)
    finished = status == "finished"
    admitted = ~np.isnan(_col(req, "admitted_s", np.float64))
    hit = _col(req, "hit_tokens")
    itl_values, itl_weights = rec.itl_samples()
    m = kv.metrics()
    held = kv.held_token_seconds(sim_time_s)  # a hybrid model's side groups beside
    hold_byte_s = held.total * kv.kv_bytes_per_token + held.side_byte_s
    lookup = float(_col(req, "lookup_tokens").sum())
    prompt = float(_col(req, "prompt_tokens")[admitted].sum())
    reused = float((hit + _col(req, "held_tokens"))[admitted].sum())
    reuse_rate = reused / prompt if prompt else None  # also kv_reuse_rate, its older name
    finish_reason = _col(req, "finish_reason", object)
    paused_kv = _col(frames["memory"], "paused_kv_bytes", np.float64)
    out = {
        **meta,
        "requests_completed": int(finished.sum()),
        "requests_submitted": len(status),
        "trajectories_completed": int((traj_status == "completed").sum()),
        "trajectories_ended": len(traj_status),
        "sim_time_s": float(sim_time_s),
        "wall_time_s": None,
        "ttft_s": describe(_col(req, "ttft_s")),
        "itl_s": describe_weighted(itl_values, itl_weights),
        "e2e_s": describe(_col(req, "e2e_s")[finished]),
        "queue_s": describe(_col(req, "queue_s")),
        "max_itl_s": float(rec.max_itl_s) if int(itl_weights.sum()) else None,
        "output_tokens": int(rec.output_tokens),
        "prefill_tokens": int(rec.prefill_tokens),
        "output_tokens_per_s": rec.output_tokens / sim_time_s if sim_time_s > 0 else None,
        "prompt_reuse_rate": reuse_rate,
        "prefix_hit_rate": float(hit.sum()) / lookup if lookup else None,
        "kv_reuse_rate": reuse_rate,
        "eta_alloc_mean": _num(rec.eta_alloc.mean(sim_time_s)),
        "eta_effective_mean": _num(rec.eta_effective.mean(sim_time_s)),
        "peak_allocated_bytes": round(m.peak_allocated_bytes),  # byte totals: integers
        "bytes_copied": round(m.bytes_copied),
        "cow_copies": int(m.cow_copies),
        "preemptions": int(rec.preemptions),
        "rejected": int((status == "rejected").sum()),
        "cancelled": int((status == "cancelled").sum()),
        "unfinished": int(((status == "waiting") | (status == "running")).sum()),
        "rejected_by_reason": {
            reason: int((finish_reason == reason).sum()) for reason in REJECT_REASONS
        },
        "trajectories_by_status": {
            s: int((traj_status == s).sum()) for s in TRAJECTORY_STATUSES
        },
        "compactions": int(_col(traj, "compactions").sum()) if len(traj_status) else 0,
        **provider_view(traj),
        "held_kv_drops": int(rec.held_drops),
        "paused_kv_bytes_mean": _num(rec.paused_bytes.mean(sim_time_s)),
        "paused_kv_bytes_peak": round(np.nanmax(paused_kv)) if len(paused_kv) else 0,
        "paused_hbm_bytes_mean": _num(rec.paused_hbm_bytes.mean(sim_time_s)),
        "paused_hbm_bytes_peak": round(rec.paused_hbm_bytes_peak),
        "hold_gb_s": hold_byte_s / GB,
        "fork_hold_gb_s": (held.unkeyed * kv.kv_bytes_per_token + held.side_unkeyed) / GB,
        "steps": int(rec.n_steps),
        "engine_decisions": int(rec.decisions),
        "kvsim_version": __version__,  # a string: regress never compares it
        "versions": package_versions(),
    }
    out.update(rec.group_summary(sim_time_s))  # a model of several layer groups
    out["warnings"] = run_warnings(out, req, closed_loop)
    pm = kv.prefix_metrics()
    if pm is not None:  # the prefix cache's own view: raw match before cap/truncation
        out["prefix_match_rate"] = _num(pm.match_rate)
        out["prefix_evicted_blocks"] = int(pm.evicted_blocks)
        if recomputed_tokens is not None:  # (one node's ``KVManager``: the run asked)
            out["prefix_recomputed_tokens"] = int(recomputed_tokens)
            churn = prefix_churn_warning(out, kv.pool_blocks, kv.block_size, lookup)
            if churn:
                out["warnings"] = [*out["warnings"], churn]
    return out


def prefix_churn_warning(summary: dict, pool: int | None, block_size: int | None,
                         lookup_tokens: float) -> str:  # fmt: skip
    """The sentence of a run whose prefix hit rate its pool's size held down, or "". The
    rule: the cache evicted more cached blocks (``prefix_evicted_blocks``) than the pool
    has (``pool``: it turned over more than once) and computed again, after evicting
    them, more than ``PREFIX_RECOMPUTE_WARN_SHARE`` of the run's prefill tokens
    (``prefix_recomputed_tokens``: content it had cached, evicted, then needed again). A
    cache that churns through blocks nobody asks for again (a session's last output)
    loses nothing and does not warn; without the count (a cluster's nodes, a pause policy
    that reloads KV) it never warns. A cache that had kept them would have skipped that
    prefill; with no preemption (whose re-admissions are not looked up) every such token
    was a first admission's look-up, so the hit rate is at most ``prefix_hit_rate`` +
    recomputed / ``lookup_tokens``, which the sentence gives."""
    evicted = summary.get("prefix_evicted_blocks") or 0
    recomputed = summary.get("prefix_recomputed_tokens")
    prefill = summary.get("prefill_tokens") or 0
    if not pool or evicted <= pool or recomputed is None or not prefill:
        return ""
    share = recomputed / prefill
    if share <= PREFIX_RECOMPUTE_WARN_SHARE:
        return ""
    bs = block_size or 1
    rate = summary.get("prefix_hit_rate") or 0.0
    if not summary.get("preemptions") and lookup_tokens:
        bound = (f"the prefix hit rate {rate:.1%} would be up to "
                 f"{rate + recomputed / lookup_tokens:.1%} with a cache that kept them")  # fmt: skip
    else:
        bound = (f"a cache that kept them would have skipped that prefill (prefix hit rate "
                 f"{rate:.1%}; preempted requests recompute too, so no bound on it is given)")  # fmt: skip
    return (f"prefix cache past its capacity: it evicted {evicted:,} cached blocks "
            f"({evicted * bs:,} tokens), {evicted / pool:.2f}x the pool's {pool:,} blocks "
            f"({pool * bs:,} tokens), and computed again {recomputed:,} tokens it had "
            f"cached and evicted ({share:.1%} of the {prefill:,} prefill tokens): {bound}, "
            "so it is set by this pool's size as much as by the workload's reuse (rule: "
            f"evictions over the pool and recomputed over {PREFIX_RECOMPUTE_WARN_SHARE:.0%} "
            "of the prefill)")  # fmt: skip


def provider_view(traj: Any) -> dict:
    """``provider_hit_rate`` (cached / prompt tokens of the billed calls) and
    ``provider_bill_usd`` over the trajectories with a provider view; null without one."""
    prompt_tokens = _col(traj, "provider_prompt_tokens", np.float64)
    billed = ~np.isnan(prompt_tokens)
    if not billed.any():
        return {"provider_hit_rate": None, "provider_bill_usd": None}
    prompt = nansum(prompt_tokens[billed])
    cached = _col(traj, "provider_cached_tokens", np.float64)[billed]
    return {
        "provider_hit_rate": nansum(cached) / prompt if prompt else None,
        "provider_bill_usd": nansum(_col(traj, "provider_bill_usd", np.float64)[billed]),
    }


def run_warnings(summary: dict, requests: Any, closed_loop: Collection[str] = ()) -> list[str]:
    """What makes a run pathological, one sentence each (empty for a healthy run):
    requests left unfinished when the run stopped (``unfinished_warning``), more than
    ``REJECTED_WARN_SHARE`` of the requests rejected, a request preempted more than
    ``PREEMPTIONS_WARN`` times (thrashing), trajectories that failed or ran out of
    context, arrivals that outpace the node (``overload_warning``, over the requests of
    the workloads not in ``closed_loop``). The pauses' warning (``held_drop_warning``)
    is added once the pauses are summarised (``pause_warnings``)."""
    out = []
    if summary["unfinished"]:
        out.append(unfinished_warning(summary, requests))
    submitted = summary["requests_submitted"]
    rejected = summary["rejected"]
    if submitted and rejected / submitted > REJECTED_WARN_SHARE:
        reasons = ", ".join(f"{n:,} {r}" for r, n in summary["rejected_by_reason"].items() if n)
        out.append(
            f"{rejected:,} of {submitted:,} requests ({rejected / submitted:.1%}) were "
            f"rejected ({reasons})"
        )
    preemptions = _col(requests, "preemptions")
    worst = int(preemptions.max()) if len(preemptions) else 0
    if worst > PREEMPTIONS_WARN:
        n = int((preemptions > PREEMPTIONS_WARN).sum())
        out.append(
            f"thrashing: {n:,} requests were preempted more than {PREEMPTIONS_WARN} times "
            f"(at most {worst:,}; {summary['preemptions']:,} preemptions in all)"
        )
    by_status = summary["trajectories_by_status"]
    total = summary["trajectories_ended"]
    if by_status["failed"]:
        out.append(f"{by_status['failed']:,} of {total:,} trajectories failed")
    if by_status["context_exhausted"]:
        out.append(
            f"{by_status['context_exhausted']:,} of {total:,} trajectories ended with their "
            "context exhausted (workload.context_limit)"
        )
    overload = overload_warning(summary, requests, closed_loop)
    if overload:
        out.append(overload)
    return out


def closed_loop_workloads(workload: Any) -> frozenset[str]:
    """The ``workload`` column names whose trajectories start in a closed loop
    (``arrival.kind: closed_loop``): a workload's kind, or a ``mix`` component's label."""
    if workload.kind == "mix":
        return frozenset(
            label for label, c in zip(workload.labels(), workload.components, strict=True)
            if _arrival_kind(c) == "closed_loop"
        )  # fmt: skip
    return frozenset({workload.kind}) if _arrival_kind(workload) == "closed_loop" else frozenset()


def _arrival_kind(workload: Any) -> str | None:
    arrival = getattr(workload, "arrival", None)  # a trace-driven kind may have none
    return None if arrival is None else arrival.kind


def overload_warning(summary: dict, requests: Any,
                     closed_loop: Collection[str] = ()) -> str | None:  # fmt: skip
    """The sentence of a run whose arrivals outpace what the node serves (no steady state:
    the queue keeps growing, so every latency percentile grows with the run's length), or
    None. The rule: each request's queue wait (``queue_s``; a request still waiting at the
    end, never admitted, its wait so far ``sim_time_s - arrival_s``, a lower bound;
    rejected and cancelled requests left out) in arrival order (ties by id); the run warns
    when there are at least ``OVERLOAD_MIN_REQUESTS`` waits and the median of the last
    third (``n // 3`` requests) is over ``OVERLOAD_WAIT_S`` and over ``OVERLOAD_GROWTH``
    times the median of the first third; arrivals all at one instant (a batch, a replay at
    an infinite rate) are a queue by design and never warn. A run stopped with requests
    never admitted (``duration_s``) is read a second time when the first reading is
    silent: over the arrivals up to the oldest of them (it included, with its wait so
    far). A runaway queue stopped at time T leaves its latest arrivals waits so far of
    T - arrival, small however long they would wait, so the last third of every arrival
    looks like the first (a queue served at half its arrival rate: waits 0 to T / 2 up to
    the oldest still waiting, then T / 2 down to 0); before the oldest still waiting every
    wait is whole, and the oldest's so far is the longest of the run. A queue in steady
    state waits alike early and late however busy the node is, but near capacity it
    settles slowly, and a late busy period of a short run looks like the start of a
    runaway queue (the medians cannot tell them apart), so a short run may warn where a
    longer one does not: the sentence says both readings and the middle third's median. A
    closed loop (``arrival.kind: closed_loop``) cannot run away like this, since an agent
    submits its next turn only after its previous one finished, so its queue holds at most
    ``concurrency`` turns and cannot grow without bound; a long wait there (memory
    pressure, contexts that grow) is no sign of a run too short to measure, so the
    requests of a closed-loop workload (``closed_loop``: their ``workload`` names) are
    left out."""
    status = _col(requests, "status", object)
    if len(status) < OVERLOAD_MIN_REQUESTS:
        return None
    queue = _col(requests, "queue_s", np.float64)
    arrival = _col(requests, "arrival_s", np.float64)
    req_id = _col(requests, "req_id", np.int64)
    never = np.isnan(queue) & ((status == "waiting") | (status == "running"))
    wait = np.where(never, summary["sim_time_s"] - arrival, queue)
    keep = ~np.isnan(wait)
    if closed_loop:
        keep &= ~np.isin(_col(requests, "workload", object), list(closed_loop))
    order = np.lexsort((req_id[keep], arrival[keep]))  # by arrival, ties by id
    arrived, wait = arrival[keep][order], wait[keep][order]
    grew = _queue_growth(arrived, wait)
    if grew is not None:
        return _overload_sentence(*grew, "")
    cut = never[keep][order]
    if not cut.any():
        return None
    upto = int(np.searchsorted(arrived, arrived[cut].min(), side="right"))
    grew = _queue_growth(arrived[:upto], wait[:upto])
    if grew is None:
        return None
    at = summary["sim_time_s"]
    return _overload_sentence(*grew, (
        f" of the {upto:,} arrivals up to the oldest request still waiting when the run "
        f"stopped at {at:,.1f} s (the {len(wait) - upto:,} after it left out: the stop cut "
        "their waits short)"))  # fmt: skip


def _queue_growth(arrived: np.ndarray, wait: np.ndarray) -> tuple[int, float, float, float] | None:
    """(third, first, middle and last third's median waits) of waits in arrival order
    when they grew as ``overload_warning``'s rule says, else None."""
    n = len(wait)
    if n < OVERLOAD_MIN_REQUESTS:
        return None
    if arrived[-1] <= arrived[0]:  # one batch at one instant: a queue, not a rate
        return None
    third = n // 3
    first, last = float(np.median(wait[:third])), float(np.median(wait[-third:]))
    if last <= OVERLOAD_WAIT_S or last <= OVERLOAD_GROWTH * first:
        return None
    return third, first, float(np.median(wait[third:n - third])), last


def _overload_sentence(third: int, first: float, middle: float, last: float, among: str) -> str:
    return (f"no steady state: the median queue wait grew from {first:,.3f} s over the "
            f"first {third:,} arrivals through {middle:,.3f} s to {last:,.3f} s over the "
            f"last {third:,}{among}: arrivals outpace what the engine serves, or the run is "
            f"too short for a queue this close to capacity to settle; either way the latency "
            f"percentiles depend on the run's length (a longer run tells which; rule: the "
            f"last third's median over {OVERLOAD_WAIT_S:g} s and over "
            f"{OVERLOAD_GROWTH:g}x the first third's)")  # fmt: skip


def pause_warnings(summary: dict) -> None:
    """Add the pauses' warnings to ``summary["warnings"]`` once ``pause_summary`` is in it."""
    for warning in (held_drop_warning(summary), fork_hold_warning(summary)):
        if warning:
            summary["warnings"] = [*summary["warnings"], warning]


def fork_hold_warning(summary: dict) -> str:
    """The sentence of a run whose held KV is mostly fork branches that no pause policy
    governs: a branch forked from a paused parent holds the parent's KV (counted per
    branch) until its first turn, whatever the policy (docs/pause_policies.md, "Known
    limit"), so a comparison of policies reads that share as theirs. Said when the policy
    is not ``hold`` (under hold, holding is what the policy does) and ``fork_hold_gb_s``
    is more than ``FORK_HOLD_WARN_SHARE`` of ``hold_gb_s``; "" otherwise."""
    fork, held = summary.get("fork_hold_gb_s") or 0.0, summary.get("hold_gb_s") or 0.0
    policy = summary.get("pause_policy")
    if policy == "hold" or not held or fork / held <= FORK_HOLD_WARN_SHARE:
        return ""
    return (f"fork branches: {fork:,.1f} of the {held:,.1f} GB*s of held KV ({fork / held:.0%}, "
            "fork_hold_gb_s) is fork branches holding their paused parent's KV until their "
            f"first turn, which the pause policy ({policy}) does not govern; compare policies "
            "by paused_hbm_gb_s (the pauses' own) as well (rule: over "
            f"{FORK_HOLD_WARN_SHARE:.0%} of hold_gb_s)")  # fmt: skip


def held_drop_warning(summary: dict) -> str:
    """The sentence of a run whose memory pressure dropped held (paused) KV often enough
    to matter: more than ``HELD_DROP_WARN_SHARE`` of the pauses ended recomputed because
    of it (``pauses_recomputed_after_drop``: a recompute the policy did not choose, its
    ``recompute_s`` in the pause's cost); "" otherwise. A drop whose pause then ended
    otherwise (released, cancelled: a pruned branch) recomputes nothing, so the share is
    of the pauses, not of ``held_kv_drops``."""
    n, total = summary.get("pauses_recomputed_after_drop", 0), summary.get("pause_count", 0)
    if not total or n / total <= HELD_DROP_WARN_SHARE:
        return ""
    return (f"memory pressure: {n:,} of {total:,} pauses ({n / total:.1%}) lost their held "
            "KV and prefilled that context again (pauses.parquet: outcome recomputed, note "
            f"'dropped under memory pressure'; held_kv_drops {summary.get('held_kv_drops', 0):,} "
            f"in all; rule: over {HELD_DROP_WARN_SHARE:.0%} of the pauses)")  # fmt: skip


def unfinished_warning(summary: dict, requests) -> str:
    """The sentence of a run stopped (at ``duration_s``) with requests still waiting or
    running: the latency percentiles cover only what happened by then (end-to-end: the
    finished requests; TTFT: those with a first token), and a request still without a
    first token has a TTFT of at least its wait so far (``sim_time_s - arrival_s``), so the
    TTFT percentiles of the sample with those waits in place of the unknown TTFTs bound
    from below the percentiles over every request that has or awaits a first token
    (numpy's linear-interpolation percentiles are non-decreasing in each value)."""
    now, n = summary["sim_time_s"], summary["unfinished"]
    at = f"{now:,.1f}" if now >= 1.0 else f"{now:.3g}"  # a horizon under a second: its digits
    text = (f"{n:,} of {summary['requests_submitted']:,} requests unfinished when the run "
            f"stopped at {at} s of simulated time: the latency percentiles "
            f"cover only what happened by then (end-to-end: the "
            f"{summary['requests_completed']:,} finished requests)")  # fmt: skip
    ttft = _col(requests, "ttft_s", np.float64)
    status = _col(requests, "status", object)
    unfinished = (status == "waiting") | (status == "running")
    pending = unfinished & np.isnan(_col(requests, "first_token_s", np.float64))
    if not pending.any():
        return text
    waited = now - _col(requests, "arrival_s", np.float64)[pending]
    bound = describe(np.concatenate([ttft[~np.isnan(ttft)], waited]))
    return (text + f"; {int(pending.sum()):,} still had no first token after waiting "
            f"{waited.min():,.1f}-{waited.max():,.1f} s, so TTFT over the "
            f"{int((~np.isnan(ttft)).sum() + pending.sum()):,} requests with or awaiting a "
            f"first token is at least p50 {bound['p50']:,.1f} s, p99 {bound['p99']:,.1f} s "
            f"(each wait so far a lower bound of its TTFT)")  # fmt: skip


def hold_byte_s_by_trajectory(kv, sim_time_s: float) -> dict[int, float]:
    """F29 per trajectory: bytes held while paused x seconds (a hybrid model's side groups
    included)."""
    m = kv.kv_bytes_per_token
    held = kv.held_token_seconds(sim_time_s)
    side = held.side_by_owner
    return {o: t * m + side.get(o, 0.0) for o, t in held.by_owner.items()}


def fill_hold(traj_frame: Any, kv, sim_time_s: float) -> Any:
    """Put each trajectory's hold byte-seconds into its row (``traj_frame``: ``Columns``
    or a DataFrame; changed in place and returned)."""
    held = hold_byte_s_by_trajectory(kv, sim_time_s)
    traj_ids = _col(traj_frame, "traj_id")
    if len(traj_ids):
        traj_frame["hold_byte_s"] = np.array(
            [held.get(int(t), 0.0) for t in traj_ids], dtype=np.float64
        )
    return traj_frame


def speculative_summary(rec: Recorder, summary: dict, draft_kv_bytes_per_token: float,
                        requests: Any = None) -> dict:  # fmt: skip
    """summary.json's ``spec_*`` keys of a speculative-decoding run (``summary`` has its
    ``kv_bytes_per_token`` and ``peak_allocated_bytes`` already, and a model of several
    layer groups its ``peak_allocated_bytes_by_group``, whose ``draft`` entry is exact:
    a hybrid model's side groups are not held per token, so a share of its bytes per
    token would misstate the drafter's). With ``requests`` (the requests table) also
    ``spec_tpot_s``: the per-token time, vLLM's TPOT, of each finished request with more
    than one output token (its ``itl_mean_s``), where ``itl_s`` pools the gaps between
    verify steps (several tokens each)."""
    n = rec.spec_verifies
    per_step = rec.spec_accepted / n if n else None
    total_bpt = summary["kv_bytes_per_token"]
    share = draft_kv_bytes_per_token / total_bpt if total_bpt else 0.0
    by_group = summary.get("peak_allocated_bytes_by_group") or {}
    peak = by_group["draft"] if "draft" in by_group else summary["peak_allocated_bytes"] * share
    return {
        "spec_accepted_tokens_per_step": per_step,
        "spec_tokens_per_step": None if per_step is None else 1.0 + per_step,
        "spec_verify_steps": int(n),
        "spec_drafts_verified": int(rec.spec_drafts),
        "spec_wasted_tokens": int(rec.spec_wasted),
        "spec_draft_kv_bytes_per_token": float(draft_kv_bytes_per_token),
        "spec_draft_kv_peak_bytes": round(peak),
        **({} if requests is None else {"spec_tpot_s": _tpot(requests)}),
    }


def _tpot(requests: Any) -> dict:
    """``spec_tpot_s``: the finished requests' ``itl_mean_s`` (a cancelled request's
    ``finish_s`` is its cancel, which would stretch its last gap)."""
    finished = _col(requests, "status", object) == "finished"
    return describe(_col(requests, "itl_mean_s")[finished])

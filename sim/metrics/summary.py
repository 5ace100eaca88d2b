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
trajectories; the CLI prints them as a WARNING block); ``prefill_tokens`` (prompt tokens
actually computed) and the provider view's ``provider_hit_rate`` and ``provider_bill_usd``
(``workload.provider_cache``; null without one).

Invariants: ITL percentiles pool every inter-token gap of every request (a gap of k steps
counts once, with its whole length); ``*_mean`` memory figures are time-weighted over the
simulated time (``eta_alloc_mean`` over the time anything is allocated); every value is a
JSON number, string or null (never NaN); ``wall_time_s`` is the only wall-clock figure and
is filled in by the run layer.
"""

from __future__ import annotations

import math
import platform
from importlib import metadata

import numpy as np

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


def summarize(rec: Recorder, frames: dict, *, sim_time_s: float, kv, meta: dict) -> dict:
    """The summary dict (see the module docstring); ``meta`` adds scenario facts."""
    req = frames["requests"]
    traj = frames["trajectories"]
    done = req[req.status == "finished"]
    itl_values, itl_weights = rec.itl_samples()
    m = kv.metrics()
    held = kv.held_token_seconds(sim_time_s)  # a hybrid model's side groups beside
    hold_byte_s = held.total * kv.kv_bytes_per_token + held.side_byte_s
    lookup = float(req.lookup_tokens.sum())
    prompt = float(req.prompt_tokens[req.admitted_s.notna()].sum())
    reused = float((req.hit_tokens + req.held_tokens)[req.admitted_s.notna()].sum())
    reuse_rate = reused / prompt if prompt else None  # also kv_reuse_rate, its older name
    out = {
        **meta,
        "requests_completed": int(len(done)),
        "requests_submitted": int(len(req)),
        "trajectories_completed": int((traj.status == "completed").sum()),
        "trajectories_ended": int(len(traj)),
        "sim_time_s": float(sim_time_s),
        "wall_time_s": None,
        "ttft_s": describe(req.ttft_s.to_numpy()),
        "itl_s": describe_weighted(itl_values, itl_weights),
        "e2e_s": describe(done.e2e_s.to_numpy()),
        "queue_s": describe(req.queue_s.to_numpy()),
        "max_itl_s": float(rec.max_itl_s) if int(itl_weights.sum()) else None,
        "output_tokens": int(rec.output_tokens),
        "prefill_tokens": int(rec.prefill_tokens),
        "output_tokens_per_s": rec.output_tokens / sim_time_s if sim_time_s > 0 else None,
        "prompt_reuse_rate": reuse_rate,
        "prefix_hit_rate": float(req.hit_tokens.sum()) / lookup if lookup else None,
        "kv_reuse_rate": reuse_rate,
        "eta_alloc_mean": _num(rec.eta_alloc.mean(sim_time_s)),
        "eta_effective_mean": _num(rec.eta_effective.mean(sim_time_s)),
        "peak_allocated_bytes": round(m.peak_allocated_bytes),  # byte totals: integers
        "bytes_copied": round(m.bytes_copied),
        "cow_copies": int(m.cow_copies),
        "preemptions": int(rec.preemptions),
        "rejected": int((req.status == "rejected").sum()),
        "cancelled": int((req.status == "cancelled").sum()),
        "unfinished": int(req.status.isin(["waiting", "running"]).sum()),
        "rejected_by_reason": {
            reason: int((req.finish_reason == reason).sum()) for reason in REJECT_REASONS
        },
        "trajectories_by_status": {
            status: int((traj.status == status).sum()) for status in TRAJECTORY_STATUSES
        },
        "compactions": int(traj.compactions.sum()) if len(traj) else 0,
        **provider_view(traj),
        "held_kv_drops": int(rec.held_drops),
        "paused_kv_bytes_mean": _num(rec.paused_bytes.mean(sim_time_s)),
        "paused_kv_bytes_peak": round(frames["memory"].paused_kv_bytes.max())
        if len(frames["memory"])
        else 0,
        "paused_hbm_bytes_mean": _num(rec.paused_hbm_bytes.mean(sim_time_s)),
        "paused_hbm_bytes_peak": round(rec.paused_hbm_bytes_peak),
        "hold_gb_s": hold_byte_s / GB,
        "steps": int(rec.n_steps),
        "engine_decisions": int(rec.decisions),
        "kvsim_version": __version__,  # a string: regress never compares it
        "versions": package_versions(),
    }
    out.update(rec.group_summary(sim_time_s))  # a model of several layer groups
    out["warnings"] = run_warnings(out, req)
    pm = kv.prefix_metrics()
    if pm is not None:  # the prefix cache's own view: raw match before cap/truncation
        out["prefix_match_rate"] = _num(pm.match_rate)
        out["prefix_evicted_blocks"] = int(pm.evicted_blocks)
    return out


def provider_view(traj) -> dict:
    """``provider_hit_rate`` (cached / prompt tokens of the billed calls) and
    ``provider_bill_usd`` over the trajectories with a provider view; null without one."""
    billed = traj[traj.provider_prompt_tokens.notna()] if len(traj) else traj
    if not len(billed):
        return {"provider_hit_rate": None, "provider_bill_usd": None}
    prompt = float(billed.provider_prompt_tokens.sum())
    return {
        "provider_hit_rate": float(billed.provider_cached_tokens.sum()) / prompt if prompt else None,
        "provider_bill_usd": float(billed.provider_bill_usd.sum()),
    }


def run_warnings(summary: dict, requests) -> list[str]:
    """What makes a run pathological, one sentence each (empty for a healthy run):
    more than ``REJECTED_WARN_SHARE`` of the requests rejected, a request preempted more
    than ``PREEMPTIONS_WARN`` times (thrashing), trajectories that failed or ran out of
    context."""
    out = []
    submitted = summary["requests_submitted"]
    rejected = summary["rejected"]
    if submitted and rejected / submitted > REJECTED_WARN_SHARE:
        reasons = ", ".join(f"{n:,} {r}" for r, n in summary["rejected_by_reason"].items() if n)
        out.append(
            f"{rejected:,} of {submitted:,} requests ({rejected / submitted:.1%}) were "
            f"rejected ({reasons})"
        )
    worst = int(requests.preemptions.max()) if len(requests) else 0
    if worst > PREEMPTIONS_WARN:
        n = int((requests.preemptions > PREEMPTIONS_WARN).sum())
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
    return out


def hold_byte_s_by_trajectory(kv, sim_time_s: float) -> dict[int, float]:
    """F29 per trajectory: bytes held while paused x seconds (a hybrid model's side groups
    included)."""
    m = kv.kv_bytes_per_token
    held = kv.held_token_seconds(sim_time_s)
    side = held.side_by_owner
    return {o: t * m + side.get(o, 0.0) for o, t in held.by_owner.items()}


def fill_hold(traj_frame, kv, sim_time_s: float):
    """Put each trajectory's hold byte-seconds into its row."""
    held = hold_byte_s_by_trajectory(kv, sim_time_s)
    if len(traj_frame):
        traj_frame["hold_byte_s"] = np.array(
            [held.get(int(t), 0.0) for t in traj_frame.traj_id], dtype=np.float64
        )
    return traj_frame


def speculative_summary(rec: Recorder, summary: dict, draft_kv_bytes_per_token: float) -> dict:
    """summary.json's ``spec_*`` keys of a speculative-decoding run (``summary`` has its
    ``kv_bytes_per_token`` and ``peak_allocated_bytes`` already, and a model of several
    layer groups its ``peak_allocated_bytes_by_group``, whose ``draft`` entry is exact:
    a hybrid model's side groups are not held per token, so a share of its bytes per
    token would misstate the drafter's)."""
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
    }

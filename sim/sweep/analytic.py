"""The analytic capacity estimate beside a simulated one: F35-F37 on the sampled workload.

Responsibility: sample the scenario's workload without the engine
(``sim.workload.sample``: the same plans a run draws) and put its averages into the
``plan`` composition (``sim.sizing.plan``, F35-F37 with 10 % headroom) on the run's own
KV pool per GPU (``Resolved.kv_pool_bytes_per_gpu``: F34 as ``sim.scenario.resolve``
sizes it, with the scenario's ``gpu_memory_utilization``, reserve and weights, a
``cost.weights_bytes`` and the most loaded pipeline stage's share included), with the
plan's own choice of the pipeline stage that decides:

- ``M_avg``: the time-averaged context of an active trajectory: each call's prompt
  (history included), weighted by how long the trajectory holds it: the call's decode
  (its reply tokens x the ITL floor, the time to stream the weights once, F24) plus the
  tool pause after it;
- ``K_avg``: the mean reply; ``S_shared``: system prompt + tool definitions, stored once
  when the scenario's allocator keeps a prefix cache (``caches_prefixes``); without one
  (``paged``, ``static``, ``contiguous``, ``buddy``) every trajectory stores its own copy,
  so ``S_shared`` is 0 and the prefix counts in ``M_avg`` (F35, not F37's shared form);
- the *peak-context* variant sizes every trajectory at its largest prompt (the mean over
  trajectories of each one's peak), as a static reservation would.

For ``--search arrival_rate`` the concurrency B becomes a rate by Little's law,
``B / T``, with T the mean trajectory duration on the same time base (decode at the ITL
floor plus tool pauses; prefill and queueing left out, so it is an upper bound).

Invariant: the estimate is a pure function of the scenario, the overrides and the seed
(the sample uses the run's own streams); every input it used is returned beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.errors import KvsimError

#: trajectories sampled for the averages, whatever the scenario's count (the engine is not
#: used: a sample of a few seconds at most)
SAMPLE_TRAJECTORIES = 200
#: F37's headroom, as the chapter applies it
HEADROOM = 0.10


def shared_tokens(cfg: Any) -> int:
    """S_shared: the prefix every trajectory of the workload shares (system prompt, tool
    definitions, function docs, a policy prompt); a fitted kind's default when unset."""
    kind = getattr(cfg, "kind", "")
    if kind == "coding_agent":
        from sim.workload.coding_agent import fitted, system_tokens

        return int(system_tokens(cfg, fitted(cfg)))
    total = 0
    for name in ("system_prompt_tokens", "tool_tokens", "doc_tokens", "policy_prompt_tokens"):
        value = getattr(cfg, name, None)
        if isinstance(value, int):
            total += value
    return total


def sample_averages(resolved, seed: int, n: int = SAMPLE_TRAJECTORIES) -> dict[str, float]:
    """M_avg, M_peak, K_avg, the ITL floor and the mean trajectory duration of a sample."""
    from sim.workload.agent_config import TrajectoryWorkload
    from sim.workload.sample import sample_workload

    sc = resolved.scenario
    cfg = sc.workload
    if not isinstance(cfg, TrajectoryWorkload):
        raise KvsimError(f"the analytic estimate needs an agent workload, not {cfg.kind!r}")
    cfg = cfg.model_copy(update={"num_trajectories": n})
    sample = sample_workload(
        cfg.kind, cfg, seed, resolved.loaded.base_dir, resolved.context_window_tokens
    )
    itl_floor_s = resolved.weights_bytes_per_gpu / resolved.accelerator.hbm_bw_bytes_per_s
    prompts, weights, replies, peaks, durations = [], [], [], [], []
    for traj in sample["trajectories"]:
        turns = traj["turns"]
        if not turns:
            continue
        p = np.array([t["prompt_tokens"] for t in turns], dtype=np.float64)
        k = np.array([t["completion_tokens"] for t in turns], dtype=np.float64)
        tool = np.array([t["tool_s"] or 0.0 for t in turns], dtype=np.float64)
        w = k * itl_floor_s + tool
        prompts.append(p)
        weights.append(w)
        replies.append(k)
        peaks.append(float(p.max()))
        durations.append(float(w.sum()))
    if not prompts:
        raise KvsimError("the sampled workload makes no LLM calls")
    p, w, k = (np.concatenate(x) for x in (prompts, weights, replies))
    m_avg = float((p * w).sum() / w.sum()) if w.sum() > 0 else float(p.mean())
    return {
        "M_avg_tokens": m_avg,
        "M_peak_tokens": float(np.mean(peaks)),
        "K_avg_tokens": float(k.mean()),
        "itl_floor_s": float(itl_floor_s),
        "trajectory_s_mean": float(np.mean(durations)),
        "trajectories_sampled": len(peaks),
    }


def _plan(resolved, context: float, reply: float, shared: int) -> dict[str, float]:
    """F34-F37 through ``plan_capacity`` for one context length, on the run's own KV pool
    per GPU (``Resolved.kv_pool_bytes_per_gpu``: what ``sim.scenario.resolve`` leaves
    after the weights as the run holds them, a ``cost.weights_bytes``, the most loaded
    pipeline stage's share, a drafter, sharded experts), so the estimate and a run at its
    point size one pool: ``concurrency`` (B), and what it divided by, over the engine
    instance's GPUs (the units of a run's ``allocated_bytes``):
    ``kv_bytes_per_trajectory`` (each trajectory's own KV as a run charges it,
    ``max_concurrent``'s divisor: a hybrid model's whole blocks of its raised block size
    and padded state pages included; with a shared prefix, the private part on the
    pipeline stage the plan says decides) and ``shared_prefix_bytes`` (the prefix stored
    once on that stage; 0 when nothing is shared)."""
    from sim.sizing.plan import PlanInputs, plan_capacity

    sc = resolved.scenario
    hw = sc.hardware
    ctx = max(1, round(context))
    inputs = PlanInputs(
        model=resolved.model,
        accelerator=resolved.accelerator,
        num_gpus=resolved.num_gpus,
        contexts=[ctx],
        tp=hw.tp,
        pp=hw.pp,
        output_tokens=max(0, round(reply)),
        headroom=HEADROOM,
        shared_prefix_tokens=min(shared, ctx) if shared else None,
        kv_pool_bytes_per_gpu=resolved.kv_pool_bytes_per_gpu,  # the run's, as resolved
        mamba_cache_mode=resolved.mamba_cache_mode,  # states saved at block ends share too
        **_drafter_inputs(resolved),
    )
    plan = plan_capacity(inputs).contexts[0]
    gpus = hw.tp * hw.pp  # one replica's GPUs: per-GPU bytes x GPUs, as resolve counts them
    if not (shared and plan.shared_prefix_bytes):  # nothing shared: the whole trajectory
        return {"concurrency": plan.max_concurrent, "shared_prefix_bytes": 0.0,
                "kv_bytes_per_trajectory": plan.kv_bytes_per_trajectory_charged_per_gpu * gpus}  # fmt: skip
    # the pipeline stage that fits the fewest decides: the plan's (sim.sizing.plan.deciding_stage)
    shared_gpu = plan.shared_prefix_bytes_per_gpu or 0.0
    private_gpu = plan.private_kv_bytes_per_trajectory_per_gpu or 0.0
    return {"concurrency": plan.max_concurrent_shared, "shared_prefix_bytes": shared_gpu * gpus,
            "kv_bytes_per_trajectory": private_gpu * gpus}  # fmt: skip


def _drafter_inputs(resolved) -> dict[str, Any]:
    """The scenario's speculative drafter as ``PlanInputs`` fields (none without the
    section), so the plan sizes it by the rule the run resolves (``sim.sizing.speculative``):
    its KV per token, its lookahead slots and its grouped layer (its weights are already
    out of the run's pool, ``Resolved.kv_pool_bytes_per_gpu``, which the plan is given).
    The draft model's profile is the one the run loaded, at the scenario's
    ``model.kv_dtype``."""
    spec = resolved.scenario.speculative
    if spec is None:
        return {}
    return {"speculative_method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
            "draft_model": resolved.draft_model}  # fmt: skip


def _pool_note(hw) -> str | None:
    """What the pool (memory x utilization - weights - reserve) leaves out that vLLM
    subtracts (``sim.sizing.plan.pool_note``); None for a pool given in bytes."""
    from sim.sizing.plan import pool_note

    if hw.kv_pool_bytes_per_gpu is not None:
        return None
    return pool_note(hw.reserve_bytes_per_gpu, "hardware.reserve_bytes_per_gpu")


def analytic_estimate(resolved, search: str, seed: int) -> dict[str, Any]:
    """``{"value", "peak_value", "inputs"}``: F37's concurrency (or, for ``arrival_rate``,
    that concurrency over the mean trajectory duration), time-averaged and peak."""
    avg = sample_averages(resolved, seed)
    from sim.scenario.resolve import caches_prefixes

    prefix = shared_tokens(resolved.scenario.workload)
    cached = caches_prefixes(resolved.allocator_kind)
    shared = prefix if cached else 0  # no prefix cache: each trajectory stores its own copy
    at_avg = _plan(resolved, avg["M_avg_tokens"], avg["K_avg_tokens"], shared)
    b_avg = at_avg["concurrency"]
    b_peak = _plan(resolved, avg["M_peak_tokens"], avg["K_avg_tokens"], shared)["concurrency"]
    inputs = {
        **avg,
        # stored once: 0 without a prefix cache, or when the plan shares none of it (a
        # model's state layers under mamba_cache_mode none)
        "S_shared_tokens": shared if at_avg["shared_prefix_bytes"] else 0,
        "workload_prefix_tokens": prefix,
        "prefix_cache": cached,
        "kv_bytes_per_trajectory": at_avg["kv_bytes_per_trajectory"],
        "shared_prefix_bytes": at_avg["shared_prefix_bytes"],
        "kv_bytes_per_token": float(resolved.kv_bytes_per_token),
        "kv_pool_bytes": float(resolved.pool_bytes),
        "kv_pool_note": _pool_note(resolved.scenario.hardware),
        "gpu_memory_utilization": resolved.scenario.hardware.gpu_memory_utilization,
        "headroom": HEADROOM,
        "concurrency_time_averaged": b_avg,
        "concurrency_peak_context": b_peak,
    }
    if search == "arrival_rate":
        t = avg["trajectory_s_mean"]
        value = b_avg / t if t > 0 else None
        peak = b_peak / t if t > 0 else None
    else:
        value, peak = b_avg, b_peak
    return {"value": value, "peak_value": peak, "inputs": inputs}

"""Where the KV pool went, time-averaged: the allocator-study view (Kwon et al. 2023, Fig. 2).

Responsibility: split the pool, averaged over time, into the vLLM paper's four shares plus
the rest: ``token_states`` (KV of tokens written: memory.parquet's ``useful_bytes``),
``reserved`` (slots held for tokens the sequences will still write), ``internal`` (slots
held that no token will ever fill: over-reservation, rounding, partial blocks),
``external`` (free memory: while requests wait, memory too scattered or too small to admit
them) and ``cached`` (prefix-cache blocks). The shares sum to 1.

How ``reserved`` is estimated: a request admitted at ``a``, with its first token at ``f``
and finishing at ``e`` after ``n`` output tokens, still has ``n`` tokens to write until
``f`` and ``n (e - t) / (e - f)`` after (tokens come at a steady pace within a run of
decode steps); the sum over requests at each memory row, capped by what the sequences hold
beyond their tokens (``allocated - useful``), is the reserved share; the rest of that
difference is internal fragmentation. ``busy_only`` averages over the time requests wait
(``n_waiting > 0``: the memory-bound regime the paper measures) instead of the whole run.

Invariant: pure function of a run's tables; the five shares are >= 0 and sum to 1.
"""

from __future__ import annotations

import numpy as np

SHARES = ("token_states", "reserved", "internal", "external", "cached")


def future_tokens_at(requests, t: np.ndarray) -> np.ndarray:
    """Σ over requests of the tokens each will still write, at each time of ``t``."""
    r = requests[requests.admitted_s.notna()] if len(requests) else requests
    if not len(r):
        return np.zeros(len(t))
    end_run = float(np.nanmax([np.nanmax(t) if len(t) else 0.0, 0.0])) + 1.0
    a = r.admitted_s.to_numpy(float)
    n = r.output_tokens.to_numpy(float)
    f = np.where(np.isnan(r.first_token_s.to_numpy(float)), end_run, r.first_token_s.to_numpy(float))
    e = np.where(np.isnan(r.finish_s.to_numpy(float)), end_run, r.finish_s.to_numpy(float))
    e = np.maximum(e, f)
    span = np.where(e > f, e - f, 1.0)
    # phase 1 on [a, f): n ; phase 2 on [f, e): n*e/span - (n/span) * t
    starts = np.concatenate([a, f])
    ends = np.concatenate([f, e])
    const = np.concatenate([n, n * e / span])
    slope = np.concatenate([np.zeros(len(n)), -n / span])
    return _active_linear_sum(starts, ends, const, slope, np.asarray(t, float))


def _active_linear_sum(starts, ends, const, slope, t) -> np.ndarray:
    """Σ (const_i + slope_i t) over the i with starts_i <= t < ends_i, for each t."""
    so, eo = np.argsort(starts), np.argsort(ends)
    c_in = np.concatenate([[0.0], np.cumsum(const[so])])
    s_in = np.concatenate([[0.0], np.cumsum(slope[so])])
    c_out = np.concatenate([[0.0], np.cumsum(const[eo])])
    s_out = np.concatenate([[0.0], np.cumsum(slope[eo])])
    i = np.searchsorted(starts[so], t, side="right")
    j = np.searchsorted(ends[eo], t, side="right")
    return (c_in[i] - c_out[j]) + t * (s_in[i] - s_out[j])


def pool_shares(run, busy_only: bool = False) -> dict[str, float]:
    """The time-averaged shares of the pool (``SHARES``) of a RunData or RunResult; all
    NaN when the run has no memory record (or, ``busy_only``, never had a request wait)."""
    from sim.report.data import load_run

    run = load_run(run)
    m, s = run.memory, run.summary
    nan = {k: float("nan") for k in SHARES}
    if not len(m):
        return nan
    t = m.t_s.to_numpy(float)
    end = max(float(s.get("sim_time_s") or t[-1]), t[-1])
    dt = np.diff(np.append(t, end))
    if busy_only:
        dt = np.where(m.n_waiting.to_numpy() > 0, dt, 0.0)
    total = dt.sum()
    if total <= 0:
        return nan
    pool = float(s["kv_pool_bytes"])
    bpt = float(s["kv_bytes_per_token"])
    useful = m.useful_bytes.to_numpy(float)
    slack = np.maximum(m.allocated_bytes.to_numpy(float) - useful, 0.0)
    mid = t + dt / 2  # one evaluation per row (rows change at every decision)
    future = future_tokens_at(run.requests, mid) * bpt
    reserved = np.minimum(future, slack)
    cached = m.cached_bytes.to_numpy(float)
    out = {
        "token_states": float((useful * dt).sum()),
        "reserved": float((reserved * dt).sum()),
        "internal": float(((slack - reserved) * dt).sum()),
        "cached": float((cached * dt).sum()),
    }
    denom = pool * total
    shares = {k: v / denom for k, v in out.items()}
    shares["external"] = max(1.0 - sum(shares.values()), 0.0)
    return {k: shares[k] for k in SHARES}

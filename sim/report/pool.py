"""Where the KV pool went, time-averaged: the allocator-study view (Kwon et al. 2023, Fig. 2).

Responsibility: split the pool, averaged over time, into the vLLM paper's four shares plus
the rest: ``token_states`` (KV of tokens written: memory.parquet's ``useful_bytes``),
``reserved`` (slots held for tokens the sequences will still write), ``internal`` (slots
held that no token will ever fill: a reservation policy's over-reservation, a growing
buffer's doubling, partial blocks), ``external`` (the paper's "external fragmentation &
others": free memory, which while requests wait is too scattered or too small to admit
them, plus what the address space adds to a reservation policy's reserve, e.g. a buddy
block's power-of-two rounding, which the paper attributes to the allocator, not to the
policy) and ``cached`` (prefix-cache blocks). The shares sum to 1.

How ``reserved`` is estimated: a request admitted at ``a``, with its first token at ``f``
and finishing at ``e`` after ``n`` output tokens, still has ``n`` tokens to write until
``f`` and ``n (e - t) / (e - f)`` after (tokens come at a steady pace within a run of
decode steps); the sum over requests at each memory row, capped by what the sequences hold
beyond their tokens (``allocated - useful``), is the reserved share. The address space's
rounding of each reservation (``reserve_rounding_tokens`` of the run's allocator, from
its resolved config: 0 without a ``reservation``) is summed over each request's stay from
admission to finish and, capped by what remains, counted as external; the rest of that
difference is internal fragmentation. ``busy_only`` averages over the time requests wait
(``n_waiting > 0``: the memory-bound regime the paper measures) instead of the whole run;
``pool_windows`` gives both windows at once (``kvsim compare`` reads every variant over one
of them: ``sim.report.variant_rows.table_window``).

``external_parts`` splits ``external`` in two for the figure: ``external_fragmentation``
(the address space's rounding, plus the free bytes in holes too small for the reference
request: memory.parquet's ``phi_ext`` x ``free_bytes``, 0 for block kinds, where any free
block serves) and ``free`` (the rest: free memory that would fit a request, idle because
nothing asks for it or the scheduler holds it back). A paged run thus shows no
fragmentation, however much of its pool is free.

A cluster run's shares are of the cluster's whole pool: each node's byte-seconds over its
own rows (its allocator, pool and requests), summed, over the nodes' pools x time.

A hybrid model's run (``allocator_kv_bytes_per_token`` in its summary) charges its block
table's bytes per token, so reserves and rebuilt allocators use those; the token states
its side groups hold (the tokens in each window and chunk, each state) are in
``useful_bytes`` already, and the rest of the side groups' bytes (``side_kv_bytes``: vLLM's
padding layers, whole blocks' unfilled slots) is internal waste.

Invariant: pure function of a run's tables and resolved allocator config; the five
shares are >= 0 and sum to 1; the two ``EXTERNAL_PARTS`` are >= 0 and sum to ``external``.
"""

from __future__ import annotations

import numpy as np

SHARES = ("token_states", "reserved", "internal", "external", "cached")
#: the split of ``external`` (``external_parts``)
EXTERNAL_PARTS = ("external_fragmentation", "free")


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


def rounding_tokens_at(run, t: np.ndarray) -> np.ndarray:
    """Σ over live requests of the slots the address space added to their reservation
    policy's reserve (``reserve_rounding_tokens``), at each time of ``t``: zeros unless the
    run's allocator (its resolved config) has a ``reservation``. A request holds its
    reserve from admission to finish; its final length is prompt + output written."""
    t = np.asarray(t, float)
    options = dict(((run.config or {}).get("allocator")) or {})
    r = run.requests
    kind = options.pop("kind", None)
    if kind is None or options.get("reservation") in (None, "none") or not len(r):
        return np.zeros(len(t))
    from sim.memory import make_allocator

    alloc = make_allocator(
        kind, pool_bytes=run.summary["kv_pool_bytes"], kv_bytes_per_token=table_bpt(run.summary),
        **options,
    )
    if not hasattr(alloc, "reserve_rounding_tokens"):  # a kind whose space never rounds
        return np.zeros(len(t))
    r = r[r.admitted_s.notna()]
    prompt = r.prompt_tokens.to_numpy(int)
    final = prompt + r.output_tokens.to_numpy(int)
    extra = np.array(
        [alloc.reserve_rounding_tokens(int(n), int(f)) for n, f in zip(prompt, final, strict=True)],
        dtype=float,
    )
    end_run = (float(np.nanmax(t)) if len(t) else 0.0) + 1.0
    ends = np.where(np.isnan(r.finish_s.to_numpy(float)), end_run, r.finish_s.to_numpy(float))
    return _active_linear_sum(r.admitted_s.to_numpy(float), ends, extra, np.zeros(len(r)), t)


def table_bpt(summary: dict) -> float:
    """Bytes per token the run's allocator charged: a hybrid model's block table
    (``allocator_kv_bytes_per_token``), else every layer's (``kv_bytes_per_token``)."""
    return float(summary.get("allocator_kv_bytes_per_token", summary["kv_bytes_per_token"]))


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
    NaN when the run has no memory record (or, ``busy_only``, never had a request wait).
    A cluster run: each node's byte-seconds over its own rows and requests, summed, over
    the sum of every node's pool x time (the shares of the cluster's whole pool)."""
    return _shares(run, busy_only)[0]


def external_parts(run, busy_only: bool = False) -> dict[str, float]:
    """``external`` (of ``pool_shares``) split into ``EXTERNAL_PARTS``: real external
    fragmentation (rounding + free bytes in holes too small for the reference request)
    and free memory; both NaN when ``external`` is."""
    shares, fragmented = _shares(run, busy_only)
    return _split(shares["external"], fragmented)


def pool_windows(run) -> dict[str, float]:
    """The pool shares and ``external``'s parts over both windows, from one pass over the
    run's tables: ``run_<share>`` over the whole run, ``busy_<share>`` over the time
    requests waited (``n_waiting > 0``; NaN when none ever waited), for every share of
    ``SHARES`` and ``EXTERNAL_PARTS``, and ``busy_fraction``, the memory-bound time over
    the run's time (0 when no request waited; NaN without a memory record)."""
    parts = _node_parts(run)
    out: dict[str, float] = {}
    for prefix, which in (("run", 0), ("busy", 1)):
        shares, fragmented = _window(parts, which)
        out.update({f"{prefix}_{k}": v for k, v in shares.items()})
        out.update({f"{prefix}_{k}": v for k, v in _split(shares["external"], fragmented).items()})
    total = float(sum(d[0] for _, d in parts))
    out["busy_fraction"] = float(sum(d[1] for _, d in parts)) / total if total > 0 else float("nan")
    return out


def _split(external: float, fragmented: float) -> dict[str, float]:
    if np.isnan(external):
        return dict.fromkeys(EXTERNAL_PARTS, float("nan"))
    frag = min(max(fragmented, 0.0), external)
    return {"external_fragmentation": frag, "free": external - frag}


def _node_parts(run) -> list:
    """Each node's ``_byte_seconds`` (one for a single node), those with a memory record."""
    from sim.report.data import load_run, node_ids, select_node

    run = load_run(run)
    ids = node_ids(run)
    parts = [_byte_seconds(select_node(run, i)) for i in ids] if len(ids) > 1 else [
        _byte_seconds(run)]  # fmt: skip
    return [p for p in parts if p is not None]


def _shares(run, busy_only: bool) -> tuple[dict[str, float], float]:
    """``pool_shares`` and the fragmented share (``external_parts``)."""
    return _window(_node_parts(run), 1 if busy_only else 0)


def _window(parts: list, which: int) -> tuple[dict[str, float], float]:
    """(shares, fragmented share) over the whole run (``which`` 0) or the time requests
    waited (1), from the nodes' ``_byte_seconds``."""
    nan = {k: float("nan") for k in SHARES}
    denom = float(sum(d[which] for _, d in parts))
    if not parts or denom <= 0:
        return nan, float("nan")
    shares = {k: sum(out[which][k] for out, _ in parts) / denom
              for k in ("token_states", "reserved", "internal", "cached")}  # fmt: skip
    shares["external"] = max(1.0 - sum(shares.values()), 0.0)
    fragmented = sum(out[which]["fragmented"] for out, _ in parts) / denom
    return {k: shares[k] for k in SHARES}, fragmented


def _byte_seconds(run) -> tuple[tuple[dict, dict], tuple[float, float]] | None:
    """One node's byte-seconds of each share but ``external`` (and of ``fragmented``, the
    part of it that is rounding or free bytes in holes too small for the reference
    request) and its pool x time, over the whole run and over the time requests wait
    (``n_waiting > 0``); None without a memory record."""
    m, s = run.memory, run.summary
    if not len(m):
        return None
    t = m.t_s.to_numpy(float)
    end = max(float(s.get("sim_time_s") or t[-1]), t[-1])
    dt_all = np.diff(np.append(t, end))
    pool = float(s["kv_pool_bytes"])
    bpt = table_bpt(s)
    useful = m.useful_bytes.to_numpy(float)  # a hybrid model's side states included
    slack = np.maximum(m.allocated_bytes.to_numpy(float) - useful, 0.0)
    mid = t + dt_all / 2  # one evaluation per row (rows change at every decision)
    future = future_tokens_at(run.requests, mid) * bpt
    reserved = np.minimum(future, slack)
    # the address space's rounding of reserves: held, asked for by no policy -> external
    rounding = np.minimum(rounding_tokens_at(run, mid) * bpt, slack - reserved)
    # free bytes in holes too small for the reference request (phi_ext: 0 for block kinds,
    # NaN with nothing free; absent from older run folders, whose holes are not known)
    phi = np.nan_to_num(m.phi_ext.to_numpy(float)) if "phi_ext" in m else np.zeros(len(m))
    holes = phi * m.free_bytes.to_numpy(float)
    per = {"token_states": useful, "reserved": reserved,
           "internal": slack - reserved - rounding, "cached": m.cached_bytes.to_numpy(float),
           "fragmented": rounding + holes}  # fmt: skip
    dt_busy = np.where(m.n_waiting.to_numpy() > 0, dt_all, 0.0)
    outs = tuple({k: float((v * dt).sum()) for k, v in per.items()} for dt in (dt_all, dt_busy))
    return outs, (pool * float(dt_all.sum()), pool * float(dt_busy.sum()))

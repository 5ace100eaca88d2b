"""The run's text: the progress line and the end-of-run table, as pure functions.

Responsibility: what ``kvsim run`` shows while it runs (simulated time, finished
trajectories, an ETA) and after (one table: every latency in ms, memory in GB, rates in
percent), and the same rows for ``report.html``. Every run shows its prompt reuse rate
(prompt tokens not computed: cache hits and held KV; summary.json's ``kv_reuse_rate`` is
its older name, the same value, so it has no row of its own) first, then vLLM's
cache-lookup prefix hit rate and the prefill tokens; a run with a hosted-API view adds its
prompt-cache hit rate, bill and compactions
(under affinity routing the hit rate alone misleads, docs/cluster.md); a cluster run adds the router, the node count, each node's
routing decisions, the sequence moves and the routed / global match rates, and
report.html's per-node table. No printing and no clock here: the CLI passes the elapsed
wall time in.

Invariant: the same inputs give the same text; a missing figure (None) prints as ``-``.
"""

from __future__ import annotations

import math

from sim.run.progress import progress_fraction  # (re-exported: the bar's fraction)

#: latency rows of the end-of-run table (summary key, label)
LATENCY_ROWS = (
    ("ttft_s", "TTFT"),
    ("itl_s", "ITL"),
    ("e2e_s", "end-to-end"),
    ("queue_s", "queue"),
    ("resume_latency_s", "resume latency"),
)
DIST = ("mean", "p50", "p90", "p99")


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"



def progress_text(
    sim_s: float, completed: int, total: int, elapsed_s: float, horizon_s: float | None = None
) -> str:
    """``sim 12.3 s | 40/100 trajectories | ETA 0:05``; the ETA extrapolates the wall
    time so far by the fraction done (``ETA -`` before anything is done)."""
    frac = progress_fraction(sim_s, completed, total, horizon_s)
    horizon = f" of {horizon_s:,.0f}" if horizon_s else ""
    if frac <= 0 or elapsed_s <= 0:
        eta = "-"
    else:
        eta = _clock(elapsed_s * (1.0 - frac) / frac)
    return f"sim {sim_s:,.1f}{horizon} s | {completed:,}/{total:,} trajectories | ETA {eta}"


def _ms(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:,.1f}"


def _num(x, fmt: str, scale: float = 1.0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x * scale if scale != 1.0 else x, fmt)


def summary_rows(s: dict) -> list[tuple[str, str, str]]:
    """(metric, value, unit) rows of the end-of-run table; latency rows give
    mean / p50 / p90 / p99 in one value cell."""
    rows = []
    disagg = bool(s.get("kv_pool_bytes_by_role"))
    for key, label in LATENCY_ROWS:
        d = s.get(key)
        if key == "queue_s" and disagg:  # admission is on the decode instance (docs/cluster.md)
            label = "queue (to decode admission: remote prefill and KV transfer in)"
        if key == "itl_s" and "spec_tokens_per_step" in s:  # one gap per verify step
            label = "ITL (per verify step, as vLLM's ITL)"
        if isinstance(d, dict) and d.get("mean") is not None:
            rows.append((f"{label} mean / p50 / p90 / p99",
                         " / ".join(_ms(d[q]) for q in DIST), "ms"))  # fmt: skip
    rows += [
        ("max ITL", _ms(s.get("max_itl_s")), "ms"),
        *speculative_rows(s),
        ("output throughput", _num(s.get("output_tokens_per_s"), ",.0f"), "tokens/s"),
        ("prompt reuse rate (cache hits + held KV)",
         _num(s.get("prompt_reuse_rate", s.get("kv_reuse_rate")), ".1f", 100), "%"),
        ("prefix hit rate", _num(s.get("prefix_hit_rate"), ".1f", 100), "%"),
        ("prefill tokens", _num(s.get("prefill_tokens"), ",d"), "tokens"),
        ("eta_alloc (mean)", _num(s.get("eta_alloc_mean"), ".1f", 100), "%"),
        ("eta_effective (mean)", _num(s.get("eta_effective_mean"), ".1f", 100), "%"),
        # a cluster's is the sum of its nodes' own peaks (an upper bound of the peak at
        # one moment; docs/cluster.md): the label says so
        ("peak allocated" + (" (sum of the nodes' peaks)" if s.get("nodes") else ""),
         _num(s.get("peak_allocated_bytes"), ",.2f", 1e-9), "GB"),
        ("paused KV, logical (mean)", _num(s.get("paused_kv_bytes_mean"), ",.2f", 1e-9), "GB"),
        ("paused KV, physical HBM (mean)",
         _num(s.get("paused_hbm_bytes_mean"), ",.2f", 1e-9), "GB"),
        ("held KV", _num(s.get("hold_gb_s"), ",.1f"), "GB*s"),
        ("preemptions", _num(s.get("preemptions"), ",d"), "count"),
        ("rejected", _num(s.get("rejected"), ",d"), "count"),
        *unfinished_rows(s),
        ("pauses", _num(s.get("pause_count"), ",d"), "count"),
        ("cost", _num(s.get("usd_total"), ",.4f"), "USD"),
        *hosted_api_rows(s),
    ]
    return rows + cluster_rows(s)


def hosted_api_rows(s: dict) -> list[tuple[str, str, str]]:
    """The hosted-API view (``workload.provider_cache``): the provider's prompt-cache hit
    rate and bill, when the summary has them (not null); and the context-limit
    compactions, when any happened or the provider view is there (none otherwise)."""
    rows = []
    if s.get("provider_hit_rate") is not None or s.get("provider_bill_usd") is not None:
        rows += [("hosted API: prompt-cache hit rate",
                  _num(s.get("provider_hit_rate"), ".1f", 100), "%"),
                 ("hosted API: bill", _num(s.get("provider_bill_usd"), ",.4f"), "USD")]  # fmt: skip
    if rows or s.get("compactions"):
        rows.append(("compactions", _num(s.get("compactions"), ",d"), "count"))
    return rows


def speculative_rows(s: dict) -> list[tuple[str, str, str]]:
    """A speculative-decoding run's rows (none otherwise): the per-token time (TPOT,
    ``spec_tpot_s``; ITL above is per verify step) and the tokens per second one stream
    sees (1 / its mean), the tokens per verify step (accepted drafts + the bonus token),
    the wasted verified tokens and the drafter's KV peak."""
    if "spec_tokens_per_step" not in s:
        return []
    rows = []
    tpot = s.get("spec_tpot_s")
    if isinstance(tpot, dict) and tpot.get("mean"):
        rows += [("TPOT (per token) mean / p50 / p90 / p99",
                  " / ".join(_ms(tpot[q]) for q in DIST), "ms"),
                 ("tokens/s per stream (1 / TPOT mean)", _num(1.0 / tpot["mean"], ",.0f"),
                  "tokens/s")]  # fmt: skip
    accepted = _num(s.get("spec_accepted_tokens_per_step"), ".3f")
    return rows + [
        ("speculative: tokens per verify step (accepted + 1)",
         f"{_num(s.get('spec_tokens_per_step'), '.3f')} ({accepted} accepted)", "tokens"),
        ("speculative: verified tokens wasted", _num(s.get("spec_wasted_tokens"), ",d"), "tokens"),
        ("speculative: drafter KV (peak)", _num(s.get("spec_draft_kv_peak_bytes"), ",.2f", 1e-9),
         "GB"),
    ]


def unfinished_rows(s: dict) -> list[tuple[str, str, str]]:
    """The row of a run stopped with requests still waiting or running (none otherwise,
    nor for a summary without the count): the latencies above leave them out."""
    n = s.get("unfinished")
    if not n:
        return []
    return [("unfinished (waiting or running at the end)", _num(n, ",d"), "count")]


def cluster_rows(s: dict) -> list[tuple[str, str, str]]:
    """A cluster run's rows (none for a single-node run): the router and node count, the
    routing decisions of each node in node order (a disaggregated cluster's prefill
    instance is placed no request, it is sent their prefill halves: ``621 prefills``),
    the sequence moves (each one prefills its context again on the new node) and the
    routed / global match rates (``-`` for a router that reads no matches)."""
    nodes = s.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        return []
    decisions = " / ".join(
        f"{_num(n.get('requests_submitted'), ',d')} prefills" if n.get("role") == "prefill"
        else _num(n.get("routing_decisions"), ",d") for n in nodes
    )  # fmt: skip
    match = " / ".join(_num(s.get(k), ".1f", 100) for k in ("routed_match_rate", "global_match_rate"))
    rows = [
        ("router", f"{s.get('router') or '-'}, {len(nodes)} nodes", ""),
        ("routing decisions per node", decisions, "count"),
        ("sequence moves", _num(s.get("sequence_moves"), ",d"), "count"),
        ("routed / global match rate", match, "%"),
    ]
    return rows + lockstep_rows(s)


def lockstep_rows(s: dict) -> list[tuple[str, str, str]]:
    """A MoE engine's data-parallel ranks stepping together (none otherwise): the group
    steps and the dummy rank-steps, and how the busy time splits (expert layers,
    collectives, the wait for the slowest rank in rank-seconds)."""
    if s.get("lockstep_steps") is None:
        return []
    busy, moe = s.get("lockstep_busy_s") or 0.0, s.get("lockstep_moe_s")
    split = " / ".join(_num(s.get(k), ",.2f") for k in ("lockstep_busy_s", "lockstep_moe_s",
                                                          "lockstep_comm_s", "lockstep_wait_s"))  # fmt: skip
    return [
        ("lockstep steps / dummy rank-steps",
         f"{_num(s.get('lockstep_steps'), ',d')} / {_num(s.get('dummy_rank_steps'), ',d')}", "count"),
        ("busy / experts / comm / rank wait", split, "s"),
        ("experts share of busy", _num(moe / busy if busy and moe is not None else None, ".1f", 100), "%"),
    ]  # fmt: skip


#: columns of report.html's per-node table (a cluster run)
NODE_COLUMNS = ("node", "accelerator", "requests", "TTFT p99 (ms)", "prefix hit rate (%)",
                "KV reuse (%)", "prefill tokens", "routing decisions", "KV pool (GB)")  # fmt: skip


def node_table_rows(s: dict) -> list[list[str]]:
    """One row per node of a cluster run (``NODE_COLUMNS``); none for a single node. A
    disaggregated cluster's node says its role (``0 (prefill)``, ``1 (decode)``): a prefill
    instance is placed no request and its TTFT is its prefill halves', so unlabelled it
    read as a node the router starved."""
    rows = []
    for n in s.get("nodes") or []:
        ttft = n.get("ttft_s") if isinstance(n.get("ttft_s"), dict) else {}
        role = n.get("role")
        node = str(n.get("node_id")) + (f" ({role})" if role in ("prefill", "decode") else "")
        rows.append([node, str(n.get("accelerator") or "-"),
                     _num(n.get("requests_completed"), ",d"), _ms(ttft.get("p99")),
                     _num(n.get("prefix_hit_rate"), ".1f", 100),
                     _num(n.get("kv_reuse_rate"), ".1f", 100),
                     _num(n.get("prefill_tokens"), ",d"),
                     _num(n.get("routing_decisions"), ",d"),
                     _num(n.get("kv_pool_bytes"), ",.2f", 1e-9)])  # fmt: skip
    return rows


def summary_title(s: dict) -> str:
    """``NAME: 12 requests, 3 trajectories in 4.0 s simulated (0.50 s wall)``; a run that
    stopped with work left says what of it finished: ``133 of 400 requests finished (267
    unfinished)`` when requests were still waiting or running, ``5 of 8 trajectories``
    when trajectories had not ended (``trajectories_ended`` < ``trajectories_total``)."""
    wall = s.get("wall_time_s")
    wall_text = "" if wall is None else f" ({wall:.2f} s wall)"
    done, unfinished = s.get("requests_completed", 0), s.get("unfinished") or 0
    requests = f"{done:,} requests"
    if unfinished:
        requests = (f"{done:,} of {s.get('requests_submitted', 0):,} requests finished "
                    f"({unfinished:,} unfinished)")  # fmt: skip
    trajectories = f"{s.get('trajectories_completed', 0):,} trajectories"
    total, ended = s.get("trajectories_total"), s.get("trajectories_ended")
    if total is not None and ended is not None and ended < total:
        trajectories = f"{s.get('trajectories_completed', 0):,} of {total:,} trajectories"
    return (f"{s.get('scenario')}: {requests}, {trajectories} in "
            f"{s.get('sim_time_s', 0.0):,.1f} s simulated{wall_text}")  # fmt: skip


def accuracy_line(s: dict) -> str:
    """How far to trust a run's latencies, in one line, from its summary's ``accuracy``
    (``sim.cost.accuracy.accuracy_text``); a run folder without one says so."""
    acc = s.get("accuracy")
    if not isinstance(acc, dict) or not acc.get("basis"):
        return f"{ACCURACY_LABEL}: not recorded (a run folder older than the accuracy section)"
    from sim.cost.accuracy import accuracy_text

    return f"{ACCURACY_LABEL}: {accuracy_text(acc)}"


#: what ``accuracy_line`` starts with (the latencies rest on the cost model's step times)
ACCURACY_LABEL = "accuracy of the latencies (step times)"


#: what ``price_line`` starts with (the cost row is price x GPUs x simulated time)
PRICE_LABEL = "price of the cost"


def price_line(s: dict) -> str | None:
    """Where the ``cost`` row's dollars come from, in one line: the price per GPU-hour and
    its source (summary.json ``usd_per_gpu_hour``, ``price_source``: a profile's figure is
    a documented example, not a quote), so the row is never read as a real bill. None for
    a run without a cost; a cluster whose nodes are priced apart gives the source alone."""
    if s.get("usd_total") is None:
        return None
    usd_h, source = s.get("usd_per_gpu_hour"), s.get("price_source") or "source not recorded"
    rate = f"${usd_h:,.4g}/GPU-hour" if isinstance(usd_h, (int, float)) else "per node's price"
    return f"{PRICE_LABEL}: {rate} x GPUs x simulated time ({source})"


#: what ``seed_line`` starts with (a single run is one sample of a random workload)
SEED_LABEL = "one seed"


def seed_line(s: dict) -> str | None:
    """How far one run's percentiles and rates stand for the workload: one seed's sample,
    with the command that gives their spread (``kvsim run --replications K``: a mean and
    a 95 % interval per figure). None for a summary without a seed."""
    seed = s.get("seed")
    if not isinstance(seed, int):
        return None
    return (f"{SEED_LABEL} ({seed}): where the workload draws at random, its percentiles and "
            "rates move from seed to seed; --replications K gives each a mean and a 95 % "
            "interval")  # fmt: skip


def summary_table(s: dict) -> str:
    """The end-of-run table as plain text: a title, then metric | value | unit, then how
    far to trust its latencies (``accuracy_line``), that it is one seed's sample
    (``seed_line``) and, with a cost, where its price comes from (``price_line``)."""
    rows = [("metric", "value", "unit"), *summary_rows(s)]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [summary_title(s)]
    for i, (a, b, c) in enumerate(rows):
        lines.append(f"  {a:<{w0}}  {b:>{w1}}  {c}")
        if i == 0:
            lines.append(f"  {'-' * w0}  {'-' * w1}  {'-' * 8}")
    lines.append(f"  {accuracy_line(s)}")
    seed = seed_line(s)
    if seed is not None:
        lines.append(f"  {seed}")
    price = price_line(s)
    if price is not None:
        lines.append(f"  {price}")
    return "\n".join(lines) + "\n"

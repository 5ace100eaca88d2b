"""One declared schema per run output: ``summary.json`` and every record table.

Responsibility: the name, unit, type and meaning of every ``summary.json`` key and of every
column of ``requests``, ``steps``, ``memory``, ``trajectories``, ``pauses`` and
``memory_groups`` (.parquet; the last only for a model of several layer groups);
``metrics_markdown()`` renders them as docs/metrics.md (``docs/gen_metrics.py`` writes
it; a test keeps the file equal to the render) and ``check_summary`` / ``check_table`` /
``check_run_folder`` say, one line per problem, where a run's outputs break them.

Invariant: this module imports nothing from the rest of ``sim`` (the recorder, the summary,
the pause table and the run layer make the outputs; a test checks that their column
tuples equal the ones declared here, in order). Units are written in the names (``_s``,
``_bytes``, ``_gb_s``, ``_flops``, ``usd_``); counts and byte totals of ``summary.json``
are JSON integers; an alias is declared with ``alias_of`` and kept, never deleted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: summary value kinds: int (JSON integer), float (number), str, bool, dist
#: ({mean, p50, p90, p95, p99} of numbers or nulls), counts ({name: int}), texts (list of str),
#: argv (list of str), versions ({package: version string}), floats ({name: number})
#: ({basis, source, median_rel_error, worst_rel_error, outside_domain, detail, not_measured}:
#: how far to trust the step times; sim.cost.accuracy)
KINDS = ("int", "float", "str", "bool", "dist", "counts", "texts", "argv", "versions", "nodes",
         "accuracy", "floats")  # fmt: skip
#: the fields of an ``accuracy`` value, in order (= sim.cost.accuracy.KEYS, a test checks)
ACCURACY_KEYS = ("basis", "source", "median_rel_error", "worst_rel_error", "outside_domain",
                 "detail", "not_measured")  # fmt: skip
#: the fields of an older run folder's ``accuracy`` (before ``not_measured``): still valid
ACCURACY_KEYS_BEFORE_NOT_MEASURED = ACCURACY_KEYS[:6]
#: its ``basis`` values (= sim.cost.accuracy.BASES)
ACCURACY_BASES = ("calibration, cross-validated", "validation table", "roofline, unvalidated")
DIST_KEYS = ("mean", "p50", "p90", "p95", "p99")  # = sim.metrics.stats.SUMMARY_KEYS (a test)


@dataclass(frozen=True, slots=True)
class Key:
    """One ``summary.json`` key."""

    name: str
    kind: str  # one of KINDS
    unit: str  # "s", "bytes", "tokens", "count", "fraction", "GB*s", "USD", "-" ...
    meaning: str
    nullable: bool = False  # may be null (undefined: no sample, no price, ...)
    optional: bool = False  # present only for some runs (``when`` says which)
    when: str = ""
    alias_of: str | None = None  # the same figure under another, older name


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a record table."""

    name: str
    dtype: str  # "int", "float" (NaN = undefined), "str"
    unit: str
    meaning: str


def _k(name, kind, unit, meaning, **kw) -> Key:
    return Key(name, kind, unit, meaning, **kw)


_NULL = {"nullable": True}
_DP = {"optional": True, "when": "clusters with data_parallel (one engine's DP ranks)"}
_PREFIX = {"optional": True, "when": "allocators with a prefix cache (radix, paged_hash)"}
_CLUSTER = {"optional": True, "when": "cluster runs (a `cluster` section)"}
_SPEC = {"optional": True, "when": "single-node runs with a `speculative` section"}
_PD = {"optional": True, "when": "clusters with prefill and decode node groups (roles)"}
_GROUPS = {"optional": True, "when": "a model of several layer groups (a hybrid, windowed, or "
           "MLA + indexer model; memory_groups.parquet has the same split over time)"}

SUMMARY_KEYS: tuple[Key, ...] = (
    # ---- the scenario (the run layer's ``meta``)
    _k("scenario", "str", "-", "The scenario's `name`."),
    _k("schema_version", "int", "-", "The scenario file's schema version."),
    _k("seed", "int", "-", "The seed every random stream derives from."),
    _k("model", "str", "-", "Model profile name."),
    _k("accelerator", "str", "-", "Accelerator profile name."),
    _k("num_gpus", "int", "count", "GPUs of the engine instance (TP x PP)."),
    _k("allocator", "str", "-", "Allocator kind that ran (after `prefix_caching` selection)."),
    _k("engine_rules", "str", "-",
       "The serving engine (and version) whose rules the allocator's prefix cache follows: "
       "`paged_hash` by default vLLM 0.33.0's KVCacheManager, with `null_block: false, "
       "unhashed_to_head: false` the V1 design document's (vLLM 0.8); `radix` SGLang-like; "
       "null for allocators without a prefix cache (docs/prefix_cache.md).", **_NULL),
    _k("scheduler", "str", "-", "Scheduler kind."),
    _k("pause_policy", "str", "-", "Pause policy kind."),
    _k("exact", "bool", "-", "True when every decode iteration was stepped one by one."),
    _k("kv_pool_bytes", "int", "bytes", "KV pool of the engine instance (all GPUs): "
       "hardware.kv_pool_bytes_per_gpu, or memory x gpu_memory_utilization - weights - "
       "reserve_bytes_per_gpu (default 0: vLLM's activation peak and non-torch memory, "
       "which vLLM subtracts, are not)."),
    _k("kv_bytes_per_token", "float", "bytes", "KV bytes of one token (all layers, all GPUs)."),
    _k("prefix_hit_limited_by", "str", "-",
       "The layer group that stops the prefix cache's hits under the hybrid hit rule "
       "(sim/prefix/hybrid_hit.py, vLLM's): a state-space group, whose states vLLM saves "
       "only with Mamba prefix caching (`model.mamba_cache_mode: all`, what the default "
       "`auto` runs for Mamba layers with a prefix cache), so without it such a model gets "
       "no hits.",
       optional=True, when="a hybrid model with a state-space group, a prefix cache and "
       "the mode settled to none (a dense or windowed model's hits are the block table's, "
       "and so are a state-space model's under `all`: no key)"),
    _k("allocator_kv_bytes_per_token", "float", "bytes",
       "Bytes per token of a hybrid model's block table (the layers that keep every token, "
       "all GPUs): what its allocator charges per token; its sliding-window, chunked-local "
       "and state-space groups are held beside it (memory.parquet's side_kv_bytes); under "
       "`model.mamba_cache_mode: all` it includes the states saved at each block's end "
       "(all state layers' pages, padded to the attention page as vLLM pads them, / block "
       "size), the last block's being the running state.",
       optional=True, when="a hybrid model, or a state-space model under mamba_cache_mode "
       "all (a dense model's is kv_bytes_per_token)"),
    _k("peak_allocated_bytes_by_group", "counts", "bytes",
       "Per layer group (the profile's names; `draft`: a speculative drafter's KV), the "
       "largest allocated bytes over memory.parquet's rows, all GPUs: the block table's "
       "bytes split by each table group's bytes per token (exact), the side blocks to the "
       "windowed, chunked or state group (exact for one; several share them by what each "
       "holds for the live sequences). The largest row, not the allocator's transient peak "
       "(<= peak_allocated_bytes; their sum can exceed it, as groups peak apart). A "
       "one-request run's equals `kvsim plan`'s per-group bytes within block rounding (a "
       "table group's last block; a window's ceil(w/B) + 1 blocks; side blocks rounded up "
       "to a table block).", **_GROUPS),
    _k("allocated_bytes_by_group_mean", "floats", "bytes",
       "Per layer group, allocated bytes time-weighted over the run (as "
       "peak_allocated_bytes_by_group; the means sum to the mean allocated bytes).",
       **_GROUPS),
    _k("block_size_tokens", "int", "tokens",
       "Tokens per KV block the engine ran with: the scenario's `block_size` raised as vLLM "
       "does so one attention page holds a Mamba/linear-attention state "
       "(sim/sizing/hybrid_pages.py; `kvsim plan` reports the same).",
       optional=True, when="the block size was raised for a model with state layers"),
    _k("requested_block_size_tokens", "int", "tokens",
       "The scenario's `block_size` before vLLM's page unification raised it.",
       optional=True, when="the block size was raised for a model with state layers"),
    _k("mamba_cache_mode", "str", "-",
       "The mode the run held for `model.mamba_cache_mode` (vLLM's --mamba-cache-mode), as "
       "settled from the key and the allocator (the default `auto`: all for a Mamba model "
       "with a prefix cache, as vLLM): `all` keeps a state-space model's states at every "
       "block boundary, charged with their blocks, so its prefix hits are the block "
       "table's (docs/prefix_cache.md).",
       optional=True, when="the settled mode is not none"),
    _k("trajectories_total", "int", "count", "Trajectories the workload will start."),
    _k("command", "argv", "-", "`kvsim` argv as given (null from the Python API).", **_NULL),
    _k("scenario_path", "str", "-", "Scenario file, absolute (null for a dict).", **_NULL),
    _k("config_sha256", "str", "-", "SHA-256 of the resolved config, its files by content."),
    # ---- volume
    _k("requests_completed", "int", "count", "Requests that finished (stop or length)."),
    _k("requests_submitted", "int", "count", "Requests submitted (every row of requests)."),
    _k("trajectories_completed", "int", "count", "Trajectories whose status is completed."),
    _k("trajectories_ended", "int", "count", "Trajectories that ended, any status."),
    _k("sim_time_s", "float", "s", "Simulated time at the end of the run."),
    _k("wall_time_s", "float", "s",
       "Wall-clock time of the simulation loop alone (reporting only; never compared).",
       **_NULL),
    # ---- latency
    _k("ttft_s", "dist", "s", "Time to first token of every request that produced one."),
    _k("itl_s", "dist", "s",
       "Inter-token latency as vLLM's serving benchmark counts ITL: the gaps between a "
       "request's consecutive token-emitting steps (one streamed chunk each), pooled over "
       "every gap of every request. A step that emits several tokens (speculative decoding: "
       "one verify) is one gap, so with a speculative section this is the time per verify "
       "step, not per token (per token: spec_tpot_s, and requests' itl_mean_s)."),
    _k("e2e_s", "dist", "s", "Arrival to finish of finished requests."),
    _k("queue_s", "dist", "s", "Arrival to (first) admission of admitted requests."),
    _k("max_itl_s", "float", "s",
       "Largest inter-token gap of the run (between token-emitting steps, as itl_s).",
       **_NULL),
    # ---- throughput and reuse
    _k("output_tokens", "int", "tokens", "Tokens generated."),
    _k("prefill_tokens", "int", "tokens", "Prompt tokens computed (recomputes included)."),
    _k("output_tokens_per_s", "float", "tokens/s", "output_tokens / sim_time_s.", **_NULL),
    _k("prompt_reuse_rate", "float", "fraction",
       "The headline reuse figure: prompt tokens not computed at admission (prefix-cache "
       "hits and a held sequence's own KV) / prompt tokens of admitted requests. "
       "kv_reuse_rate is its older name (the same value).", **_NULL),
    _k("prefix_hit_rate", "float", "fraction",
       "vLLM's cache-lookup hit rate (F17 as served): prompt tokens served from the prefix "
       "cache at admission (after the at-least-one-computed cap) / prompt tokens looked up, "
       "first admissions only: a preempted request's lookups again are counted apart "
       "(requests' preempted_*_tokens), as vLLM's preempted_queries / preempted_hits. "
       "It counts lookups only: a request resumed on its own held KV is not looked up, so "
       "it can read high while most prompt tokens are computed (see prompt_reuse_rate). "
       "Every allocator; 0 without a cache.", **_NULL),
    _k("prefix_match_rate", "float", "fraction",
       "The prefix cache's own raw match: matched / prompt tokens before the cap and "
       "truncation (>= prefix_hit_rate).", nullable=True, **_PREFIX),
    _k("prefix_evicted_blocks", "int", "count", "Blocks the prefix cache evicted.", **_PREFIX),
    _k("prefix_recomputed_tokens", "int", "tokens",
       "Tokens the prefix cache computed and cached again after it had cached and evicted "
       "the same content (the same chained block hash from token 0, whole blocks): reuse "
       "the pool's size cost, at most what a cache that never evicted would have served "
       "(a returning prompt's last block, computed anyway, is counted too). "
       "A run warns when prefix_evicted_blocks exceeds the pool's blocks and this exceeds "
       "1 % of prefill_tokens.", optional=True,
       when="single-node runs with metrics.count_prefix_churn true, a prefix cache (radix, "
       "paged_hash) and pause policy hold or recompute without evict_from_prefix_cache "
       "(one that reloads KV caches blocks it did not compute)"),
    # ---- speculative decoding (sim.sched.speculative): expected-value acceptance, exact
    _k("spec_accepted_tokens_per_step", "float", "tokens/step",
       "Draft tokens accepted per sequence verify step (mean; the bonus token not counted): "
       "E(k) = sum a^i of the acceptance rate, less the cuts at output limits. Exact for the "
       "stated acceptance_rate; how far to trust it is how far that rate holds.",
       nullable=True, **_SPEC),
    _k("spec_tokens_per_step", "float", "tokens/step",
       "Output tokens per sequence verify step (mean): spec_accepted_tokens_per_step + 1.",
       nullable=True, **_SPEC),
    _k("spec_verify_steps", "int", "count", "Sequence verify steps (one per request per step).",
       **_SPEC),
    _k("spec_drafts_verified", "int", "tokens", "Draft tokens the target model verified.", **_SPEC),
    _k("spec_wasted_tokens", "int", "tokens",
       "Verified tokens that produced no output: rejected drafts, and accepted ones past a "
       "request's output limit (target compute spent for nothing; their KV slots were "
       "overwritten, not freed).", **_SPEC),
    _k("spec_draft_kv_bytes_per_token", "float", "bytes",
       "The drafter's KV per token (all GPUs), included in kv_bytes_per_token: one attention "
       "layer of the target (eagle, mtp), the draft profile's (draft_model), 0 (ngram).",
       **_SPEC),
    _k("spec_tpot_s", "dist", "s",
       "Time per output token (vLLM's TPOT) of each finished request with more than one "
       "output token: (finish_s - first_token_s) / (output_tokens - 1), requests' "
       "itl_mean_s; about itl_s / spec_tokens_per_step. 1 / its mean is the tokens per "
       "second one stream sees.", **_SPEC),
    _k("spec_draft_kv_peak_bytes", "int", "bytes",
       "The drafter's share of peak_allocated_bytes: its bytes per token over "
       "kv_bytes_per_token, or for a model of several layer groups "
       "peak_allocated_bytes_by_group's draft entry.", **_SPEC),
    _k("kv_reuse_rate", "float", "fraction",
       "(held + hit tokens) / prompt tokens of admitted requests: the older name of "
       "prompt_reuse_rate, kept (the same value).", **_NULL),
    # ---- memory
    _k("eta_alloc_mean", "float", "fraction",
       "F8 useful/allocated, time-weighted over the time anything is allocated.", **_NULL),
    _k("eta_effective_mean", "float", "fraction", "F10 useful/pool, time-weighted.", **_NULL),
    _k("peak_allocated_bytes", "int", "bytes", "Largest allocated bytes, transient peaks included."),
    _k("bytes_copied", "int", "bytes", "Device-to-device bytes copied (growth, deep fork, CoW)."),
    _k("cow_copies", "int", "count", "Copy-on-write block copies."),
    _k("held_kv_drops", "int", "count",
       "Held KV dropped under memory pressure: a paused trajectory's, a waiting turn's (resumed "
       "or reloaded), a fork's held under its parent's hold, and a reload's own drops "
       "(steps.parquet held_drops sums to it). pauses.parquet notes 'dropped under memory "
       "pressure' on each drop's pause but a fork's (no pause of its own): "
       "docs/pause_policies.md."),
    _k("paused_kv_bytes_mean", "float", "bytes",
       "Logical paused KV (each paused sequence's tokens; shared blocks per sequence), "
       "time-weighted.", **_NULL),
    _k("paused_kv_bytes_peak", "int", "bytes", "Largest logical paused KV."),
    _k("paused_hbm_bytes_mean", "float", "bytes",
       "Physical paused KV of the engine instance (all GPUs), time-weighted: the filled "
       "slots of blocks or buffers that only paused sequences map, a shared block once; a "
       "block an active sequence also maps is active (memory.parquet gpu_paused_kv_bytes "
       "x GPUs). <= paused_kv_bytes_mean; equal without sharing.", **_NULL),
    _k("paused_hbm_bytes_peak", "int", "bytes", "Largest physical paused KV (all GPUs)."),
    _k("hold_gb_s", "float", "GB*s",
       "F29 over every hold: GB (1e9 B) of KV held idle x seconds, pauses and the fork "
       "children held with them (>= paused_hbm_gb_s; equal without forks)."),
    _k("fork_hold_gb_s", "float", "GB*s",
       "The part of hold_gb_s held by fork branches with no pause of their own: a branch "
       "forked from a paused parent holds the parent's KV (its shared tokens counted per "
       "branch) until its first turn, whatever the pause policy (docs/pause_policies.md, "
       "known limit); 0 without forks. Over 25 % of hold_gb_s under a policy other than "
       "hold, the run's `warnings` say so (`sim.metrics.summary.fork_hold_warning`)."),
    # ---- events
    _k("preemptions", "int", "count", "Preemptions (recompute)."),
    _k("rejected", "int", "count", "Requests rejected."),
    _k("rejected_by_reason", "counts", "count", "Rejected requests by finish_reason."),
    _k("cancelled", "int", "count", "Requests cancelled."),
    _k("unfinished", "int", "count", "Requests still waiting or running at the end (a run "
       "stopped at duration_s: `warnings` says the latency percentiles leave them out)."),
    _k("trajectories_by_status", "counts", "count", "Ended trajectories by status."),
    _k("compactions", "int", "count", "Context-limit compactions or truncations."),
    _k("provider_hit_rate", "float", "fraction",
       "Provider view: cached / prompt tokens of the billed calls (null without one).",
       **_NULL),
    _k("provider_bill_usd", "float", "USD", "Provider view: the bill (null without one).",
       **_NULL),
    _k("steps", "int", "count", "Engine iterations."),
    _k("engine_decisions", "int", "count", "Engine decisions (a run of decode steps is one)."),
    _k("kvsim_version", "str", "-", "The kvsim version that made the run (`sim.version`; "
       "CHANGELOG.md lists the versions whose results moved). Not a metric: `kvsim "
       "regress` compares numbers only."),
    _k("versions", "versions", "-", "Python and package versions."),
    _k("warnings", "texts", "-",
       "Sentences saying what the run ran as that vLLM would not (first: `mamba_cache_mode` "
       "none with a prefix cache, linear-attention hits under-estimated), then those saying "
       "it went pathological (requests unfinished when the run stopped, with the TTFT "
       "percentiles' lower bound counting each wait without a first token so far; mass "
        "rejection; thrashing; held (paused) KV dropped under memory pressure; a prefix "
        "cache past its capacity: more blocks evicted than the pool has and over 1 % of the "
        "prefill tokens computed again after their eviction "
        "(prefix_recomputed_tokens, `sim.metrics.summary.prefix_churn_warning`); failed or "
        "context-exhausted trajectories; overload: the median "
        "queue wait of the last third of the open-loop arrivals over 1 s and over 4x the "
        "first third's, and for a run stopped with requests never admitted, the same "
        "over the arrivals up to the oldest of them, `sim.metrics.summary.overload_warning`); "
        "empty if healthy "
       "and as vLLM runs."),
    # ---- pauses (sim.metrics.pauses)
    _k("pause_count", "int", "count", "Tool pauses (rows of pauses.parquet)."),
    _k("pause_endings", "counts", "count", "Pauses by outcome (how they ended)."),
    _k("pauses_recomputed_after_drop", "int", "count",
       "Pauses that ended recomputed because memory pressure dropped their held KV (a "
       "recompute the policy did not choose; note 'dropped under memory pressure')."),
    _k("resume_latency_s", "dist", "s", "Tool return to the next turn's first token."),
    _k("resume_stall_s", "dist", "s", "Tool return to the KV being resident again."),
    _k("paused_hbm_gb_s", "float", "GB*s",
       "F29 over the pauses table: GB x seconds of each pause's own sequence held in HBM "
       "from the tool call until its blocks left HBM or its next turn was admitted (so a "
       "busy engine's queue after the tool returned is included; fork children excluded; "
       "see hold_gb_s)."),
    _k("recompute_flops", "float", "FLOPs",
       "FLOPs of recomputed pause contexts, as the run's step pricer counts them (each "
       "suffix over the prefix still cached, under cost.attention_mask)."),
    _k("bytes_offloaded", "int", "bytes", "Bytes copied out to host or NVMe at pauses."),
    _k("bytes_reloaded", "int", "bytes", "Bytes copied back to HBM at resumes."),
    _k("pause_decisions", "counts", "count", "Pauses by the policy's decision."),
    _k("pause_outcomes", "counts", "count", "Pauses by where the KV went (moved_to)."),
    _k("pause_cost_policy_s", "float", "s",
       "The policy's pause cost over the priced pauses, seconds: HBM byte-seconds its "
       "paused states held / the KV pool's bytes (pool-seconds) + the step pricer's "
       "seconds for what the next turns recomputed + reload stall exposed after the tool returned "
       "(pauses.parquet policy_cost_s; docs/pause_policies.md, The pause oracle)."),
    _k("pause_cost_oracle_s", "float", "s",
       "The pause oracle's cost over the same pauses, same unit: per pause the cheapest of "
       "hold / recompute / offload with the true wait known and a perfectly timed reload; "
       "a per-pause, contention-free reference (not a proven optimum: it ignores link and "
       "HBM queues and prefix-cache hits)."),
    _k("pause_cost_gap_ratio", "float", "ratio",
       "pause_cost_policy_s / pause_cost_oracle_s (1 = as good as the oracle; null when "
       "the oracle's cost is 0). The oracle is contention-free: it holds only until the "
       "tool returns, while a hold really lasts until the next turn's admission, so a run "
       "whose decisions all equal the oracle's reads above 1 by its queueing.", **_NULL),
    _k("pause_cost_priced", "int", "count",
       "Pauses priced (the tool returned or the session ended; open ones are left out)."),
    _k("hints_given", "int", "count", "Pauses that carried an agent KV hint."),
    _k("hints_released", "int", "count",
       "Sessions whose last call's `release` hint freed their KV with its prefix-cache "
       "blocks (`pause_policy.kind: hints`)."),
    _k("hints_refused", "int", "count",
       "Of those, pauses whose hint was not (fully) honoured: a pin refused under HBM "
       "pressure, a demote tier full (pauses.parquet hint_refused says which)."),
    # ---- cost (sim.run.pricing)
    _k("usd_per_gpu_hour", "float", "USD/GPU-hour", "Price used (null without one).", **_NULL),
    _k("price_source", "str", "-", "Where the price comes from.", **_NULL),
    _k("usd_total", "float", "USD", "Price x GPUs x simulated hours.", **_NULL),
    _k("usd_per_million_output_tokens", "float", "USD", "usd_total per 1e6 output tokens.",
       **_NULL),
    _k("usd_per_trajectory", "float", "USD", "usd_total per completed trajectory.", **_NULL),
    # ---- accuracy (sim.cost.accuracy; docs/validation.md, "Accuracy of an answer")
    _k("accuracy", "accuracy", "fraction",
       "How far to trust the step times: `basis` (`calibration, cross-validated`: the "
       "calibration's held-out operator-time error; `validation table`: kvsim vs a real "
       "vLLM run on this accelerator and calibration; `roofline, unvalidated`), `source` "
       "(the calibration, or null), `median_rel_error` and `worst_rel_error` (fractions, "
       "the worst signed; null when unvalidated), `outside_domain` (what of the run lies "
       "outside the fitted domain: extrapolated), `detail` (one line) and `not_measured` "
       "(a calibration's sections that price step time but were not measured, so lie "
       "outside its held-out error: `attention` (KV reads and attention FLOPs), `copy`; "
       "each with its share of the run's step time, a fraction: the section's seconds "
       "over the sum of step durations, attention's the steps table's attention_max_s "
       "(every step's larger of kv_read_s and attention_s; kernel floors left out), a "
       "copy's copy_s (a row's first step: only it can copy), so the same however the "
       "engine coalesced steps; null before a run; `{}` for a table or the roofline; older "
       "run folders lack the field). A cluster's is its least trusted "
       "node's (its shares over the nodes on that calibration).", optional=True,
       when="runs made by this version and later (older run folders lack it)"),
    _k("paused_hbm_usd", "float", "USD",
       "paused_hbm_gb_s priced as HBM GB-seconds: the logical F29 figure (each pause's "
       "own tokens, so a block shared by several paused sequences is paid once per pause; "
       "tokens, not whole blocks), so not the HBM those pauses really occupied: "
       "paused_hbm_bytes_mean is the physical figure.", **_NULL),
    # ---- cluster runs (sim.run.cluster; docs/cluster.md): every key above is the whole
    # cluster's (sums, pooled samples; see sim.cluster.aggregate), plus
    _k("n_nodes", "int", "count", "Nodes of the cluster.", **_CLUSTER),
    _k("router", "str", "-", "Router kind (cluster.router.kind).", **_CLUSTER),
    _k("routing_decisions", "int", "count",
       "Requests the router placed (in `nodes`: placed on that node).", **_CLUSTER),
    _k("rejected_by_router", "int", "count",
       "Requests the router refused (ttft_estimate above its SLO).", **_CLUSTER),
    _k("sequence_moves", "int", "count",
       "Requests routed away from the node holding their sequence (it was released "
       "there and prefilled anew where its prefix cache allowed).", **_CLUSTER),
    _k("directory_entries", "int", "count",
       "(chunk hash, node) pairs in the prefix directory at the end (null: no directory).",
       nullable=True, **_CLUSTER),
    _k("directory_staleness_s", "float", "s",
       "Mean delay of the directory's applied updates (null: no directory).",
       nullable=True, **_CLUSTER),
    _k("routed_match_rate", "float", "fraction",
       "Prompt tokens the chosen node already held (directory or own sequence) / prompt "
       "tokens routed, over requests whose router read the matches (null: none did).",
       nullable=True, **_CLUSTER),
    _k("global_match_rate", "float", "fraction",
       "The same with the best node's match: what one global cache holding everything any "
       "node holds would have served (routed_match_rate <= this; null: no matches read).",
       nullable=True, **_CLUSTER),
    _k("dp_ranks", "int", "count",
       "Data-parallel ranks of the engine (cluster.data_parallel: its nodes).", **_DP),
    _k("expert_parallel", "bool", "-",
       "Routed experts spread whole over the ranks (else sharded as TP).", **_DP),
    _k("lockstep_steps", "int", "count",
       "Steps the ranks took together (null: a dense model, whose ranks step alone).",
       nullable=True, **_DP),
    _k("dummy_rank_steps", "int", "count",
       "Rank-steps run as vLLM's one-token dummy batch (a rank with nothing to do while "
       "the others step; null: no lockstep).", nullable=True, **_DP),
    _k("lockstep_busy_s", "float", "s",
       "Seconds the ranks were stepping (null: no lockstep).", nullable=True, **_DP),
    _k("lockstep_moe_s", "float", "s",
       "Of lockstep_busy_s, the routed expert layers at the ranks' global token count "
       "(null: no lockstep, or no measured expert table: the experts are then inside each "
       "rank's own price).", nullable=True, **_DP),
    _k("lockstep_comm_s", "float", "s",
       "Of lockstep_busy_s, the expert dispatch and combine collectives and the per-step "
       "sync (null: no lockstep).", nullable=True, **_DP),
    _k("lockstep_wait_s", "float", "s",
       "Rank-seconds a rank with a batch waited for a slower rank's attention and dense "
       "work (load imbalance; null: no lockstep).", nullable=True, **_DP),
    _k("dp_padded_tokens", "int", "tokens",
       "Tokens the ranks' padding to the largest batch added, dummy batches included "
       "(null: no lockstep).", nullable=True, **_DP),
    _k("remote_prefills", "int", "count",
       "Requests prefilled on a prefill instance and shipped to their decode instance.", **_PD),
    _k("local_prefills", "int", "count",
       "Requests whose decode instance prefilled them itself (no more uncached prompt "
       "tokens than cluster.transfer.remote_prefill_min_tokens).", **_PD),
    _k("kv_transfers", "int", "count", "KV transfers that completed over the links.", **_PD),
    _k("kv_transfer_bytes", "int", "bytes",
       "KV bytes shipped from prefill to decode instances (per layer group: the tokens the "
       "decode instance lacked, a window's last tokens, a state once; sim.sizing.groups).",
       **_PD),
    _k("kv_transfer_s", "float", "s",
       "Link slot-seconds the transfers held after their prefills ended (latency + the "
       "bytes the streaming did not overlap with the prefill).", **_PD),
    _k("kv_link_wait_s", "dist", "s",
       "Wait for a free link slot per transfer (all null: no transfer).", **_PD),
    _k("kv_link_utilization", "float", "fraction",
       "kv_transfer_s / (simulated time x links x concurrency): how busy the links' slots "
       "were (null: no simulated time).", nullable=True, **_PD),
    _k("ttft_queue_s", "dist", "s",
       "TTFT part 1: arrival to the start of its prefill (on the prefill instance; or its "
       "admission on the decode instance when prefilled there).", **_PD),
    _k("ttft_prefill_s", "dist", "s",
       "TTFT part 2: the prefill, first admission to its end (to the first token when the "
       "decode instance prefilled it).", **_PD),
    _k("ttft_transfer_s", "dist", "s",
       "TTFT part 3: prefill end to the KV's arrival at the decode instance (link wait, "
       "latency, the unstreamed share; 0 when prefilled there).", **_PD),
    _k("ttft_decode_s", "dist", "s",
       "TTFT part 4: KV arrival to the first token (the decode instance's queue and its "
       "first step, which recomputes the last prompt token; 0 when prefilled there).",
       **_PD),
    _k("kv_pool_bytes_by_role", "counts", "bytes",
       "KV pool per role (prefill, decode): the sum of its nodes'.", **_PD),
    _k("peak_allocated_bytes_by_role", "counts", "bytes",
       "Per role, the sum of its nodes' allocated-KV peaks.", **_PD),
    _k("role", "str", "-", "The node's role: prefill or decode (in `nodes` entries of a "
       "disaggregated cluster only).", optional=True,
       when="entries of `nodes` in clusters with roles"),
    _k("nodes", "nodes", "-",
       "One summary per node (`node_id`, then every key above that describes a run's "
       "engine, over that node alone; trajectories by the node of their latest call).",
       **_CLUSTER),
    _k("node_id", "int", "-", "The node (in `nodes` entries only).", optional=True,
       when="entries of `nodes`"),
)  # fmt: skip

#: keys of the whole run that the ``nodes`` entries leave out
RUN_ONLY_KEYS = ("kvsim_version", "versions", "command", "scenario_path", "config_sha256",
                 "wall_time_s", "warnings", "n_nodes", "router", "rejected_by_router", "sequence_moves",
                 "directory_entries", "directory_staleness_s", "routed_match_rate",
                 "global_match_rate", "nodes", "dp_ranks", "expert_parallel", "lockstep_steps",
                 "dummy_rank_steps", "lockstep_busy_s", "lockstep_moe_s", "lockstep_comm_s",
                 "lockstep_wait_s", "dp_padded_tokens", "accuracy", "remote_prefills",
                 "local_prefills", "kv_transfers", "kv_transfer_bytes", "kv_transfer_s",
                 "kv_link_wait_s", "kv_link_utilization", "ttft_queue_s", "ttft_prefill_s",
                 "ttft_transfer_s", "ttft_decode_s", "kv_pool_bytes_by_role",
                 "peak_allocated_bytes_by_role")  # fmt: skip

_F, _I, _S = "float", "int", "str"


def _cols(*rows: tuple[str, str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*r) for r in rows)


REQUEST_TABLE = _cols(
    ("req_id", _I, "-", "Request id (unique in the run)."),
    ("traj_id", _I, "-", "Trajectory id."),
    ("turn", _I, "count", "Turn index within the trajectory (0 first)."),
    ("branch", _I, "-", "Branch index the workload gave the request."),
    ("status", _S, "-", "finished, rejected, cancelled, or waiting/running if unfinished."),
    ("finish_reason", _S, "-", "stop, length, rejected_too_long, rejected_never_fits, "
     "cancelled, rejected_by_router; empty while unfinished."),
    ("arrival_s", _F, "s", "Submission time."),
    ("admitted_s", _F, "s", "First admission (NaN: never admitted)."),
    ("first_token_s", _F, "s", "First output token (NaN: none)."),
    ("finish_s", _F, "s", "Finish time (NaN: unfinished)."),
    ("prompt_tokens", _I, "tokens", "Prompt length."),
    ("max_output_tokens", _I, "tokens", "Sampled output target."),
    ("output_tokens", _I, "tokens", "Tokens generated."),
    ("held_tokens", _I, "tokens", "KV kept over the previous pause (not recomputed)."),
    ("lookup_tokens", _I, "tokens", "Prompt tokens looked up in the prefix cache at its "
     "admission before any preemption (vLLM's prefix_cache_queries)."),
    ("hit_tokens", _I, "tokens", "Of those, prompt tokens served from the prefix cache (vLLM's "
     "prefix_cache_hits; at most prompt_tokens - 1)."),
    ("preemptions", _I, "count", "Times the request was preempted."),
    ("queue_s", _F, "s", "admitted_s - arrival_s."),
    ("ttft_s", _F, "s", "first_token_s - arrival_s."),
    ("e2e_s", _F, "s", "finish_s - arrival_s."),
    ("itl_mean_s", _F, "s", "Time per output token after the first (vLLM's TPOT): "
     "(finish_s - first_token_s) / (output_tokens - 1). Without speculative decoding the mean "
     "gap between its steps; with it, per token (a verify step's gap over the tokens it "
     "emitted), while summary itl_s and itl_max_s count one gap per step."),
    ("itl_max_s", _F, "s", "Largest gap between two of its token-emitting steps (per step, "
     "as summary itl_s)."),
    ("branch_id", _I, "-", "Branch id, unique within the trajectory (0 = main line)."),
    ("parent_branch_id", _I, "-", "Branch it forked from (-1 on the main line)."),
    ("depth", _I, "count", "Fork nesting (0 on the main line)."),
    ("queued_s", _F, "s", "The step boundary at which the engine received it (vLLM's "
     "queued_ts; arrival_s when the engine was idle)."),
    ("scheduled_s", _F, "s", "When the plan that first admitted it was made (vLLM's "
     "scheduled_ts): admitted_s, or with async scheduling the start of the step before "
     "(NaN: never admitted)."),
    ("preempted_lookup_tokens", _I, "tokens", "Tokens (prompt and output so far) looked up "
     "again at its admissions after preemptions; counted apart, as vLLM's "
     "preempted_queries, so a victim re-hitting its own blocks does not raise the hit rate."),
    ("preempted_hit_tokens", _I, "tokens", "Of those, tokens served from the prefix cache "
     "(vLLM's preempted_hits)."),
    ("workload", _S, "-", "Workload kind, or the mix component's name."),
)  # fmt: skip

STEP_TABLE = _cols(
    ("step", _I, "-", "Index of the decision's first step (next step for a zero-time row)."),
    ("n_steps", _I, "count", "Steps the row stands for (> 1: a coalesced run of the same "
     "decodes, with at most one prompt chunked over its steps; 0: a decision that ran no "
     "step)."),
    ("start_s", _F, "s", "Start of the first step."),
    ("end_s", _F, "s", "End of the last step."),
    ("duration_s", _F, "s", "end_s - start_s."),
    ("n_decode", _I, "count", "Decoding sequences in the first step."),
    ("n_prefill", _I, "count", "Prefill chunks in the first step."),
    ("prefill_tokens", _I, "tokens", "Prefill tokens in the first step (a run's later "
     "chunks are not here: the summary's prefill_tokens counts every step's, so this "
     "column's sum can be less)."),
    ("batch_tokens", _I, "tokens", "n_decode + prefill_tokens."),
    ("decode_history_tokens", _I, "tokens", "KV history the decodes read."),
    ("admitted", _I, "count", "Requests admitted by the decision."),
    ("preempted", _I, "count", "Requests preempted by the decision."),
    ("rejected", _I, "count", "Requests rejected by the decision."),
    ("held_drops", _I, "count", "Held sequences dropped by the decision."),
    ("n_running", _I, "count", "Running requests."),
    ("n_waiting", _I, "count", "Waiting requests."),
    ("copy_bytes", _F, "bytes", "Bytes copied by the allocator for the decision."),
    ("alloc_calls", _I, "count", "Allocator calls the decision made."),
    ("prefill_s", _F, "s", "Seconds of the row's steps charged to prefill: each step's "
     "time split by the priced time of its prefill chunks alone against its decodes "
     "alone (sim.cost.pricer.prefill_share); duration_s - prefill_s is decode's."),
    ("attention_max_s", _F, "s", "Attention seconds of the row's steps, each step's own: "
     "the sum over its steps of the larger of the step's kv_read_s and attention_s (the "
     "attention group's time without its kernel floors; a coalesced run's later steps read "
     "more KV and a run's prompt chunks are priced each), so it is the same however the "
     "engine coalesced steps. The summary's accuracy.not_measured attention share is its "
     "sum over the sum of duration_s."),
    ("weights_s", _F, "s", "Cost term: weights streamed."),
    ("kv_read_s", _F, "s", "Cost term: KV read."),
    ("gemm_s", _F, "s", "Cost term: GEMM FLOPs."),
    ("attention_s", _F, "s", "Cost term: attention FLOPs."),
    ("allreduce_s", _F, "s", "Cost term: tensor-parallel all-reduce."),
    ("copy_s", _F, "s", "Cost term: copies."),
    ("alloc_s", _F, "s", "Cost term: allocator calls."),
    ("overhead_s", _F, "s", "Cost term: fixed per-step host overhead; with async scheduling "
     "(scheduler.async_scheduling, vLLM's default) it overlaps the GPU's work, so the step "
     "is max(overhead, the other terms) and the terms do not add up to it."),
    ("mem_s", _F, "s", "Memory-bound time of the first step."),
    ("comp_s", _F, "s", "Compute-bound time of the first step."),
    ("bound", _S, "-", "memory, compute, or none (a zero-time row)."),
    ("flops_per_gpu", _F, "FLOPs", "FLOPs per GPU of the first step."),
    ("hbm_bytes_per_gpu", _F, "bytes", "HBM bytes moved per GPU of the first step."),
)  # fmt: skip

MEMORY_TABLE = _cols(
    ("t_s", _F, "s", "The row holds from this time on."),
    ("allocated_bytes", _F, "bytes", "Reserved by live sequences (whole buffers or blocks)."),
    ("useful_bytes", _F, "bytes", "Distinct token states resident (shared prefix once); a "
     "hybrid model's side groups add the states they really hold: the tokens in each "
     "sliding window and current chunk, and each state-space state, over the real layers "
     "(vLLM's padding layers and whole blocks' unfilled slots are waste; a fork's child "
     "counts what it wrote after its fork)."),
    ("logical_bytes", _F, "bytes", "Sum of every live sequence's tokens (F7), plus a hybrid "
     "model's side token states (windows, chunks, states: each sequence's own, as in "
     "useful_bytes), so logical / useful is the sharing gain."),
    ("free_bytes", _F, "bytes", "Reusable now (free extents or free blocks)."),
    ("cached_bytes", _F, "bytes", "Dormant blocks a prefix cache keeps."),
    ("eta_alloc", _F, "fraction", "F8 useful/allocated (NaN when nothing is allocated)."),
    ("eta_effective", _F, "fraction", "F10 useful/pool."),
    ("num_sequences", _I, "count", "Live sequences."),
    ("paused_kv_bytes", _F, "bytes", "Logical paused KV: each paused sequence's tokens, "
     "shared blocks once per sequence (can exceed allocated_bytes), plus for a hybrid "
     "model what each paused sequence holds in its sliding-window, chunked-local and "
     "state-space groups (the last window's blocks, the current chunk, one state per state "
     "layer); the physical figure is gpu_paused_kv_bytes."),
    ("n_paused", _I, "count", "Paused (held) sequences."),
    ("n_running", _I, "count", "Running requests."),
    ("n_waiting", _I, "count", "Waiting requests."),
    ("largest_free_bytes", _F, "bytes", "Largest free hole (block kinds: every free byte, "
     "since any free block serves any block request)."),
    ("n_free_extents", _I, "count", "Free holes (block kinds: 1 when anything is free)."),
    ("phi_ext", _F, "fraction", "F9 for the reference request (`metrics."
     "phi_ext_request_tokens` tokens of KV, default 2048): the share of free bytes in holes "
     "too small for it. 0 for block kinds (any free block serves); NaN when nothing is free."),
    ("phi_ext_next", _F, "fraction", "F9 for the head-of-queue request: the KV of its "
     "tokens not yet in its own sequence (prefix hits not subtracted), or a reserving kind's "
     "reservation for it (before the address space rounds it); as phi_ext, and NaN when "
     "nothing waits."),
    ("side_kv_bytes", _F, "bytes", "Part of allocated_bytes held by a hybrid model's "
     "sliding-window, chunked-local and state-space layer groups (their blocks beside the "
     "block table of the full-attention, MLA and indexer layers, which hold the rest); 0 "
     "for a dense model and for static, contiguous and buddy (docs/allocators.md)."),
    # one GPU's HBM, physically (GPU_PARTS): the eight sum exactly to the accelerator's
    # memory_bytes on every row; KV parts are the node's slots x the KV bytes of a slot
    # on one GPU (TP/PP split every slot over the GPUs), rounded cumulatively
    ("gpu_weights_bytes", _I, "bytes", "Per GPU: model weights (the weights / TP x PP)."),
    ("gpu_reserve_bytes", _I, "bytes", "Per GPU: HBM given to neither weights nor the KV "
     "pool's whole slots or blocks: the share gpu_memory_utilization leaves out, "
     "reserve_bytes_per_gpu (activations, runtime), the pool's remainder that makes no whole "
     "block (and a null block). Constant; negative only if an explicit "
     "kv_pool_bytes_per_gpu overcommits the GPU."),
    ("gpu_active_kv_bytes", _I, "bytes", "Per GPU: filled slots of blocks or buffers some "
     "active (not paused) live sequence maps, a shared block once; a block shared by an "
     "active and a paused sequence counts here (active wins)."),
    ("gpu_paused_kv_bytes", _I, "bytes", "Per GPU: filled slots of blocks or buffers only "
     "paused (held) sequences map, a shared block once: the physical paused KV "
     "(paused_kv_bytes is the logical one, per sequence and all GPUs)."),
    ("gpu_cached_kv_bytes", _I, "bytes", "Per GPU: whole blocks a prefix cache keeps with "
     "refcount 0 (radix, paged_hash; 0 otherwise)."),
    ("gpu_internal_waste_bytes", _I, "bytes", "Per GPU: allocated slots holding no token: "
     "the rest of partly filled last blocks (a shared one once), reserved but unwritten "
     "buffer slots of the contiguous kinds (static, contiguous, buddy)."),
    ("gpu_external_waste_bytes", _I, "bytes", "Per GPU: free slots in holes too small for "
     "the reference request (phi_ext x the free KV; 0 for block kinds and when nothing is "
     "free)."),
    ("gpu_free_bytes", _I, "bytes", "Per GPU: the rest of the free KV pool (free_bytes "
     "less the external waste, per GPU)."),
)  # fmt: skip

TRAJECTORY_TABLE = _cols(
    ("traj_id", _I, "-", "Trajectory id."),
    ("kind", _S, "-", "Workload kind that made it."),
    ("start_s", _F, "s", "First submission."),
    ("end_s", _F, "s", "End."),
    ("status", _S, "-", "completed, failed or context_exhausted."),
    ("turns", _I, "count", "Turns."),
    ("requests", _I, "count", "Requests."),
    ("branches", _I, "count", "Branches."),
    ("output_tokens", _I, "tokens", "Tokens generated."),
    ("lookup_tokens", _I, "tokens", "Prompt tokens looked up."),
    ("hit_tokens", _I, "tokens", "Prompt tokens served from the prefix cache."),
    ("pause_s", _F, "s", "Tool time."),
    ("compactions", _I, "count", "Context-limit compactions or truncations."),
    ("hold_byte_s", _F, "bytes*s", "F29 over its holds."),
    ("depth", _I, "count", "Deepest fork nesting reached."),
    ("pruned", _I, "count", "Branches a verifier rejected."),
    ("provider_prompt_tokens", _F, "tokens", "Provider view: prompt tokens (NaN without)."),
    ("provider_cached_tokens", _F, "tokens", "Provider view: cached tokens read."),
    ("provider_written_tokens", _F, "tokens", "Provider view: tokens written to its cache."),
    ("provider_bill_usd", _F, "USD", "Provider view: the bill."),
    ("workload", _S, "-", "As in requests.parquet."),
)  # fmt: skip

PAUSE_TABLE = _cols(
    ("pause_id", _I, "-", "Pause id."),
    ("traj_id", _I, "-", "Trajectory id."),
    ("seq_id", _S, "-", "The paused sequence."),
    ("req_id", _I, "-", "The request whose turn ended."),
    ("turn", _I, "count", "Its turn."),
    ("tool_name", _S, "-", "Tool called."),
    ("tokens", _I, "tokens", "Tokens of the paused context."),
    ("state_bytes", _F, "bytes", "Its KV bytes."),
    ("decision", _S, "-", "The policy's decision."),
    ("reason", _S, "-", "Why."),
    ("moved_to", _S, "-", "Where the KV went: hold, offload_host, offload_nvme, recompute "
     "(also a hold memory pressure dropped: its next turn prefilled the context again)."),
    ("note", _S, "-", "Extra detail."),
    ("predicted_wait_s", _F, "s", "Predicted tool time (NaN: none)."),
    ("actual_wait_s", _F, "s", "Actual tool time."),
    ("start_s", _F, "s", "Pause start."),
    ("copy_out_done_s", _F, "s", "Copy-out finished (NaN: none)."),
    ("blocks_freed_s", _F, "s", "HBM blocks freed: when they left the pool (an offload's "
     "copy-out end, a recompute's decision or TTL expiry, a drop under memory pressure; "
     "NaN: none)."),
    ("tool_return_s", _F, "s", "Tool returned: the next turn's arrival (the harness's "
     "submission), not when a busy engine took that turn in."),
    ("reload_start_s", _F, "s", "Reload started (NaN: none)."),
    ("copy_in_done_s", _F, "s", "Copy-in finished (NaN: none)."),
    ("resident_s", _F, "s", "KV resident again."),
    ("first_token_s", _F, "s", "Next turn's first token (NaN: none)."),
    ("resume_stall_s", _F, "s", "resident_s - tool_return_s."),
    ("resume_latency_s", _F, "s", "first_token_s - tool_return_s."),
    ("paused_hbm_gb_s", _F, "GB*s", "F29 of this pause in HBM: from start_s until its blocks left HBM or its next "
     "turn was admitted (past ended_s when the engine was busy at the tool's return)."),
    ("bytes_offloaded_host", _F, "bytes", "Copied out to host."),
    ("bytes_offloaded_nvme", _F, "bytes", "Copied out to NVMe."),
    ("bytes_reloaded_host", _F, "bytes", "Copied back from host."),
    ("bytes_reloaded_nvme", _F, "bytes", "Copied back from NVMe."),
    ("recompute_tokens", _I, "tokens", "Tokens recomputed (the context less the prefix "
     "still cached when the next turn was admitted)."),
    ("recompute_flops", _F, "FLOPs", "Their FLOPs, as the run's step pricer counts them "
     "(over the cached prefix, under cost.attention_mask: causal by default)."),
    ("recompute_s", _F, "s", "Time recomputing: the run's step pricer's seconds for that "
     "prefill alone in the scheduler's chunks (calibration included); resume_stall_s "
     "adds the wait for admission and the steps it shared."),
    ("outcome", _S, "-", "resumed (KV resident at tool return and at the next turn's "
     "admission), reloaded, recomputed (also a hold dropped under memory pressure), "
     "released, cancelled, open, refused (its next turn was refused, at submission or at "
     "admission: beyond the context window, never fits the pool; ended_s is then; before "
     "2026-12-05 such a pause read resumed, reloaded or recomputed, or open)."),
    ("ended_s", _F, "s", "When it ended."),
    ("hint", _S, "-", "The harness's KV hint for this pause (`pin=..s demote=host "
     "prefetch=..s`, `release`; empty: none; docs/pause_policies.md, Agent KV hints)."),
    ("hint_refused", _S, "-", "The part of the hint not honoured, and why (empty: none)."),
    ("oracle_action", _S, "-", "The pause oracle's cheapest action with the true wait "
     "known (empty while open)."),
    ("oracle_cost_s", _F, "s", "Its cost: HBM pool-seconds + recompute s (the step "
     "pricer's, of the whole context) + exposed reload s (sim.policy.oracle; NaN while open)."),
    ("policy_cost_s", _F, "s", "What the policy's pause cost as it happened, in the same "
     "unit: HBM byte-seconds held / pool bytes + recompute_s + reload stall."),
)  # fmt: skip

GROUP_TABLE = _cols(
    ("t_s", _F, "s", "The memory.parquet row this split belongs to (it holds from then on)."),
    ("group", _S, "-", "Layer group name, as in the model profile (`draft`: a speculative "
     "drafter's KV)."),
    ("kind", _S, "-", "Its kind: full, sliding_window, chunked_local, mla, indexer, mamba, "
     "linear_attention, draft."),
    ("allocated_bytes", _F, "bytes", "Allocated bytes of this group (all GPUs); the groups "
     "of a row sum to its allocated_bytes (see peak_allocated_bytes_by_group for how the "
     "block table and the side blocks are split)."),
)  # fmt: skip

#: tables written only by some runs (table -> the summary key that says it is there)
OPTIONAL_TABLES = {"memory_groups": "peak_allocated_bytes_by_group"}

#: table name -> a paragraph docs/metrics.md prints above its columns (how to read its rows)
TABLE_NOTES: dict[str, str] = {
    "memory": (
        "One row per engine decision (and when the engine goes idle): a run of steps is one "
        "decision, so the KV a run's decodes add shows at the next row, and rows are not "
        "evenly spaced in time. Average a column over time (each row weighted by how long it "
        "holds), not over rows; `summary.json`'s means (`eta_alloc_mean`, "
        "`paused_kv_bytes_mean`, ...) are integrated step by step."
    ),
}

#: table name -> its declared columns, in file order
#: the last column of every table: the node that recorded the row (0 on one node; in a
#: cluster run -1 for requests the router refused and trajectories never placed)
NODE_COLUMN = Column("node", _I, "-",
                     "Node id (0 on one node; trajectories: the node of their latest call; "
                     "-1: none, e.g. a request the router refused).")  # fmt: skip

TABLES: dict[str, tuple[Column, ...]] = {
    name: (*cols, NODE_COLUMN)
    for name, cols in (
        ("requests", REQUEST_TABLE),
        ("steps", STEP_TABLE),
        ("memory", MEMORY_TABLE),
        ("trajectories", TRAJECTORY_TABLE),
        ("pauses", PAUSE_TABLE),
        ("memory_groups", GROUP_TABLE),
    )
}
_BY_NAME = {k.name: k for k in SUMMARY_KEYS}


# ------------------------------------------------------------------------- checks
def _value_problem(key: Key, v: Any) -> str | None:
    """Why ``v`` is not a valid value of ``key`` (None when it is)."""
    if v is None:
        return None if key.nullable else "is null"
    if value_type_ok(key.kind, v):
        return None
    return f"is {json.dumps(v)[:60]}, not a valid {key.kind}"


def _number(x: Any, finite: bool) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and (not finite or math.isfinite(x))


def value_type_ok(kind: str, v: Any, *, loose: bool = False) -> bool:
    """Whether ``v`` (not null) is a value of ``kind`` (``KINDS``). ``loose``: as a run
    folder of an older kvsim may hold it (``sim.report.data.summary_type_problem``): only
    the JSON types a reader computes with, not a distribution's or an accuracy's field
    set, an accuracy's basis name, a versions object's values or numbers' finiteness."""
    finite = not loose
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        return _number(v, finite)
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "dist":
        return isinstance(v, dict) and (loose or tuple(v) == DIST_KEYS) and all(
            x is None or _number(x, finite) for x in v.values()
        )
    if kind == "counts":
        return isinstance(v, dict) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in v.values()
        )
    if kind in ("texts", "argv"):
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "accuracy":
        return _accuracy_ok(v, loose)
    if kind == "floats":
        return isinstance(v, dict) and all(
            (loose and x is None) or _number(x, finite) for x in v.values()
        )
    if kind == "nodes":
        return isinstance(v, list) and all(isinstance(x, dict) and "node_id" in x for x in v)
    # versions
    return isinstance(v, dict) and (loose or all(isinstance(x, str) for x in v.values()))


def _accuracy_ok(v: Any, loose: bool = False) -> bool:
    if loose:  # (any basis name and field set; the fields a reader uses, typed)
        if not isinstance(v, dict) or not isinstance(v.get("basis"), str):
            return False
        if any(k not in v for k in ("median_rel_error", "worst_rel_error", "source",
                                    "outside_domain", "detail")):  # fmt: skip
            return False
        return (all(x is None or _number(x, False) for x in (v["median_rel_error"], v["worst_rel_error"]))
                and (v["source"] is None or isinstance(v["source"], str))
                and isinstance(v["outside_domain"], list) and isinstance(v["detail"], str)
                and isinstance(v.get("not_measured", {}), dict))  # fmt: skip
    if not isinstance(v, dict) or v.get("basis") not in ACCURACY_BASES:
        return False
    if tuple(v) != ACCURACY_KEYS and tuple(v) != ACCURACY_KEYS_BEFORE_NOT_MEASURED:
        return False
    shares = v.get("not_measured", {})
    if not isinstance(shares, dict) or not all(
        isinstance(k, str) and (x is None or (isinstance(x, int | float) and not isinstance(x, bool)
                                              and math.isfinite(x) and x >= 0.0))
        for k, x in shares.items()
    ):
        return False
    errors = (v["median_rel_error"], v["worst_rel_error"])
    return (
        all(x is None or (isinstance(x, int | float) and math.isfinite(x)) for x in errors)
        and (v["source"] is None or isinstance(v["source"], str))
        and isinstance(v["outside_domain"], list)
        and all(isinstance(x, str) for x in v["outside_domain"])
        and isinstance(v["detail"], str)
    )


def check_summary(summary: dict) -> list[str]:
    """One line per problem: an undeclared key, a missing key, a value of the wrong kind."""
    out = [f"summary.json: {k}: not declared in sim/metrics/schema.py" for k in summary
           if k not in _BY_NAME]  # fmt: skip
    for key in SUMMARY_KEYS:
        if key.name not in summary:
            if not key.optional:
                out.append(f"summary.json: {key.name}: missing")
            continue
        why = _value_problem(key, summary[key.name])
        if why:
            out.append(f"summary.json: {key.name}: {why}")
    if not out and "nodes" in summary:
        for entry in summary["nodes"]:
            out += [p.replace("summary.json:", f"summary.json: nodes[{entry['node_id']}]:")
                    for p in _check_node(entry)]  # fmt: skip
    return out


def _check_node(entry: dict) -> list[str]:
    """A ``nodes`` entry: the run's keys but ``RUN_ONLY_KEYS``, with ``node_id``."""
    out = [f"summary.json: {k}: not declared for a node" for k in entry
           if k not in _BY_NAME or k in RUN_ONLY_KEYS]  # fmt: skip
    for key in SUMMARY_KEYS:
        if key.name in RUN_ONLY_KEYS:
            continue
        if key.name not in entry:
            if not key.optional:
                out.append(f"summary.json: {key.name}: missing")
            continue
        why = _value_problem(key, entry[key.name])
        if why:
            out.append(f"summary.json: {key.name}: {why}")
    return out


_DTYPE_KINDS = {"int": "iu", "float": "f", "str": "OUS"}


def check_table(name: str, frame) -> list[str]:
    """One line per problem: columns not as declared (names and order), a column whose
    dtype is not the declared one."""
    cols = TABLES[name]
    want = [c.name for c in cols]
    have = list(frame.columns)
    if have != want:
        extra = [c for c in have if c not in want]
        missing = [c for c in want if c not in have]
        return [f"{name}.parquet: columns differ from the schema (undeclared {extra}, "
                f"missing {missing})"]  # fmt: skip
    out = []
    for c in cols:
        kind = frame[c.name].dtype.kind
        if kind not in _DTYPE_KINDS[c.dtype] and not (len(frame) == 0 and kind in "Of"):
            out.append(f"{name}.parquet: {c.name}: dtype {frame[c.name].dtype}, declared {c.dtype}")
    return out


def check_run_folder(folder: str | Path) -> list[str]:
    """Every problem of a run folder's summary.json and tables against the schema."""
    import pandas as pd

    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    out = check_summary(summary)
    for name in TABLES:
        path = folder / f"{name}.parquet"
        if path.exists():
            out += check_table(name, pd.read_parquet(path))
        elif name not in OPTIONAL_TABLES or OPTIONAL_TABLES[name] in summary:
            out.append(f"{name}.parquet: missing")
    return out


# ------------------------------------------------------------------------- docs
def metrics_markdown() -> str:
    """docs/metrics.md: every summary key and every table column, with unit and meaning."""
    lines = [
        "# Metrics: what a run folder holds",
        "",
        "<!-- generated by docs/gen_metrics.py from sim/metrics/schema.py; do not edit -->",
        "",
        "Every `kvsim run` writes `summary.json` and one Parquet table per record kind. "
        "Each is declared once in `sim/metrics/schema.py` (name, type, unit, meaning); a "
        "test checks every run's outputs against it (`sim.metrics.schema.check_run_folder`).",
        "Distributions (`dist`) are `{mean, p50, p90, p95, p99}`; `counts` are `{name: int}`, "
        "`floats` `{name: number}`. "
        "Percentiles are numpy's default (`numpy.percentile`, linear interpolation between "
        "the two nearest ranks: p of n sorted values sits at rank p/100 x (n - 1)), as vLLM's "
        "serving benchmark computes its own (`benchmark_serving.py`); ITL's weighted sample "
        "(a step gap weighted by the sequences that decoded across it) is that of each value "
        "repeated by its weight "
        "(`sim/metrics/stats.py`). A latency `dist` covers only the requests that reached "
        "its end point by the end of the run: a run stopped at `duration_s` with requests "
        "`unfinished` leaves them out and says so in `warnings` (with a lower bound of the "
        "TTFT percentiles counting each wait so far). "
        "GB is 10^9 bytes. Counts and byte totals are integers.",
        "",
        "## summary.json",
        "",
        "| key | type | unit | meaning |",
        "|---|---|---|---|",
    ]
    for k in SUMMARY_KEYS:
        notes = []
        if k.nullable:
            notes.append("null when undefined")
        if k.optional:
            notes.append(f"only for {k.when}")
        if k.alias_of:
            notes.append(f"alias of `{k.alias_of}`")
        extra = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"| `{k.name}` | {k.kind} | {k.unit} | {k.meaning}{extra} |")
    for name, cols in TABLES.items():
        lines += ["", f"## {name}.parquet", ""]
        if name in TABLE_NOTES:
            lines += [TABLE_NOTES[name], ""]
        lines += ["| column | type | unit | meaning |", "|---|---|---|---|"]
        lines += [f"| `{c.name}` | {c.dtype} | {c.unit} | {c.meaning} |" for c in cols]
    return "\n".join(lines) + "\n"

"""``kvsim trace-replay``: prefix-cache hit rates of a block-hash trace, without timing.

Invariant: the command only parses flags and prints; the rules live in
``sim.prefix.trace_replay`` and are restated in ``HELP``. ``--json`` prints one object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import print_json, print_warnings
from sim.errors import KvsimError

_PARAGRAPHS = [
    "Replay a request trace through a radix prefix cache and print its prefix hit rate "
    "(F17: hit tokens / prompt tokens), with no timing.",
    'Mooncake format: one JSON object per line, {"timestamp": ms, "input_length", '
    '"output_length", "hash_ids": [...]}; each hash id is a 512-token block, equal ids mean '
    "equal content and equal prefix, the last block may be partial.",
    "Rules: requests are processed in file order, each finished before the next; a request "
    "hits the longest run of its leading blocks that are cached, hit tokens = min(matched "
    "blocks x B, input_length); then all its blocks are cached as the most recently used; "
    "while the cache holds more than --cache-tokens (counted in whole blocks of B tokens), "
    "dormant leaves are evicted oldest first by the --eviction strategy (ties: deepest "
    "first), the request's own blocks included, so the cache never holds more than "
    "--cache-tokens (a request larger than the cache keeps, with lru, its leading blocks "
    "that fit; calls_not_fitting counts them). No recompute cap is applied (the engine keeps at least one prompt token to "
    "compute; this mode does not) unless --recompute-last-token: then hit tokens = "
    "floor(min(matched blocks x B, input_length - 1) / B) x B, the engine's radix-cache rule "
    "(whole blocks only; a prompt cached whole recomputes its last block); what is cached "
    "does not change. With --block-size B other than 512, B must divide 512 "
    "and each trace block (the partial last one included) becomes 512/B blocks.",
    "Claude Code format (--format claude-code): a .jsonl or .jsonl.gz file with one session "
    "per line (calls with 'in', 'out' and 64-token block ids as 'hash_runs' [\\[first_id, "
    "count], ...]) or a folder of upstream per-session .json files ('hash_ids' lists); "
    "docs/prefix_cache.md describes the fields. Sessions are replayed one after another in "
    "file order; within a session the top-level calls in order, and at a subagent entry "
    "that subagent's calls in order (depth first). Block ids are namespaced per session "
    "(hash_id_scope: local); the block size is the file's (--block-size, if given, must "
    "equal it). A call's hit tokens are its longest cached block prefix x block size "
    "(capped at its prompt); then all its blocks are inserted or touched at the call's time "
    "(its index in the replay); over --cache-tokens, the least recently used leaf block "
    "(one no cached block extends) that the current call does not use is evicted, deeper "
    "first on ties; a call of more blocks than the cache holds caches its leading "
    "floor(--cache-tokens / B) blocks only and counts in calls_not_fitting.",
    "Sessions in flight (claude-code): --concurrency N runs N sessions at once, each slot "
    "running sessions back to back; calls are served by their own times (--interleave time) "
    "or in turn (round-robin), so sessions compete for the cache. --eviction also takes "
    "belady (furthest next use first, read from the trace's future: an offline reference, "
    "not a proven optimum under the leaf constraint), ttl_pin (lease --ttl-s after a call "
    "whose session pauses briefly) and hints (pin_for_s leases of the expected pause up to "
    "--pin-max-s, retain_priority, release at session end; --hint-noise X puts the "
    "expected pause off by a factor in [1/X, X]); leases past --max-pinned-fraction of the "
    "cache are refused and counted. docs/prefix_cache.md describes them.",
    "Model (--model NAME, a model profile): what is cached does not change, but a call's "
    "hit is the longest prefix every layer group of the model serves (vLLM's hybrid rule): "
    "sliding-window and chunked groups are cached with the block table and keep its hits; "
    "a state-space group (mamba, linear attention) saves no state, so such a hybrid gets no "
    "hit. The output adds table_hit_tokens (the block table's own hits), "
    "hit_tokens_lost_by_group and hits_limited_by (the group that took the most).",
    "hit_rate_last_half is the same ratio over the requests from index requests // 2 on "
    "(after warm-up).",
    "Example: kvsim trace-replay workloads/data/mooncake/synthetic_trace.jsonl "
    "--format mooncake --cache-tokens 1000000 --json; kvsim trace-replay "
    "workloads/data/claude_code/sessions.jsonl.gz --format claude-code --cache-tokens 2e6",
]
HELP = "\n\n".join(_PARAGRAPHS)


def register(app: typer.Typer) -> None:
    """Add ``trace-replay`` to the app."""
    app.command("trace-replay", help=HELP)(trace_replay)


def parse_cache_tokens(raw: str) -> int | None:
    """``inf`` -> None (unbounded); otherwise a whole number of tokens >= 0."""
    text = raw.strip().lower().replace("_", "")
    if text in ("inf", "infinity", "unbounded"):
        return None
    try:
        value = float(text) if "e" in text else int(text)
    except ValueError:
        raise KvsimError(f"--cache-tokens: {raw!r} is not a whole number or 'inf'") from None
    if value < 0 or value != int(value):
        raise KvsimError(f"--cache-tokens: {raw!r} must be a whole number >= 0 or 'inf'")
    return int(value)


def trace_replay(
    file: Annotated[Path, typer.Argument(help="Trace file.", show_default=False)],
    format: Annotated[
        str | None,
        typer.Option("--format", help="Trace format: mooncake or claude-code (required).",
                     show_default=False),
    ] = None,  # required, checked below: one kvsim line, not click's usage block
    block_size: Annotated[
        int | None,
        typer.Option(
            help="Tokens per cache block: mooncake, a divisor of 512 (default 512); "
            "claude-code, the file's (default)."
        ),
    ] = None,
    cache_tokens: Annotated[
        str, typer.Option(help="Cache capacity in tokens, or 'inf' for unbounded.")
    ] = "inf",
    eviction: Annotated[
        str,
        typer.Option(
            help="Eviction strategy: lru, lfu, fifo or priority; claude-code also belady "
            "(offline reference), ttl_pin or hints."
        ),
    ] = "lru",
    concurrency: Annotated[
        int, typer.Option(help="claude-code: sessions in flight at once (they share the cache).")
    ] = 1,
    interleave: Annotated[
        str,
        typer.Option(
            help="claude-code: serve calls by their times (time) or in turn (round-robin)."
        ),
    ] = "time",
    ttl_s: Annotated[float, typer.Option(help="ttl_pin: lease length (s).")] = 2.0,
    short_wait_s: Annotated[
        float, typer.Option(help="ttl_pin: pin when the predicted pause is at most this (s).")
    ] = 2.0,
    pin_max_s: Annotated[
        float, typer.Option(help="hints: no lease for an expected pause longer than this (s).")
    ] = 60.0,
    hint_noise: Annotated[
        float,
        typer.Option(help="hints: expected pause off by a factor in [1/x, x] (1 = exact)."),
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="hints: seed of the noise draws.")] = 0,
    max_pinned_fraction: Annotated[
        float, typer.Option(help="ttl_pin, hints: leases refused past this share of the cache.")
    ] = 0.5,
    model: Annotated[
        str | None,
        typer.Option(
            help="Apply this model's layer groups' prefix-hit rule (hybrid: windowed, "
            "state-space); default: the block table alone.",
            show_default=False,
        ),
    ] = None,
    mamba_cache_mode: Annotated[
        str,
        typer.Option(
            help="With --model: saved states of its Mamba / linear-attention layers, as "
            "vLLM's --mamba-cache-mode: auto (what vLLM runs with prefix caching: all for "
            "Mamba layers; linear attention's align is not modelled, so none, warned), none "
            "(no state saved: no hit; a what-if, warned) or all (a state at every block "
            "boundary); align is refused (not modelled).",
        ),
    ] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    recompute_last_token: Annotated[
        bool,
        typer.Option(
            "--recompute-last-token",
            help="Apply the engine's rule: at least one prompt token is computed, whole "
            "blocks only.",
        ),
    ] = False,
) -> None:
    """Parse the flags, replay, print."""
    if format is None:
        from sim.prefix.trace_replay import FORMATS

        raise KvsimError(f"--format: missing (the trace's format); valid: {', '.join(sorted(FORMATS))}")
    capacity = parse_cache_tokens(cache_tokens)
    hit_rule = None
    if model is not None:
        from sim.prefix.replay_hit_rule import model_hit_rule

        hit_rule = model_hit_rule(model, mamba_cache_mode)
        print_warnings([hit_rule.warning] if hit_rule.warning else [])
    elif mamba_cache_mode not in ("auto", "none"):  # none saves nothing: nothing to apply
        raise KvsimError("--mamba-cache-mode: needs --model (the layer groups it applies to)")
    extra: dict = {}
    if format == "claude-code":
        from sim.prefix.replay_policies import ReplayPolicyOptions

        opts = ReplayPolicyOptions(
            ttl_s, short_wait_s, pin_max_s, hint_noise, seed, max_pinned_fraction
        )
        session = (concurrency, interleave, opts, hit_rule)
        result, extra = _claude_code(
            file, block_size, capacity, eviction, recompute_last_token, session
        )
        block_size = result.block_size
    else:
        from sim.prefix.replay_policies import REPLAY_POLICIES
        from sim.prefix.trace_replay import load_trace, replay

        if eviction in REPLAY_POLICIES or concurrency != 1:
            what = f"--eviction {eviction}" if eviction in REPLAY_POLICIES else "--concurrency"
            raise KvsimError(f"{what}: needs --format claude-code (sessions); got {format}")

        block_size = 512 if block_size is None else block_size
        requests = load_trace(file, format)
        result = replay(
            requests,
            block_size=block_size,
            cache_tokens=capacity,
            eviction=eviction,
            recompute_last_token=recompute_last_token,
            hit_rule=hit_rule,
        )
    out = {**result.to_dict(), **extra}
    out["cache_tokens"] = "inf" if capacity is None else capacity
    out["file"] = str(file)
    out["format"] = format
    if json_out:
        print_json(out)
        return
    cap = "unbounded" if capacity is None else f"{capacity:,} tokens"
    rule = ", recompute last token" if recompute_last_token else ""
    typer.echo(
        f"{file}: {result.requests:,} requests, block size {block_size}, cache {cap}, "
        f"eviction {result.eviction}{rule}"
    )
    typer.echo(f"  prompt tokens      {result.prompt_tokens:,}")
    typer.echo(f"  hit tokens         {result.hit_tokens:,}")
    typer.echo(f"  hit rate           {result.hit_rate:.4f}")
    typer.echo(f"  hit rate last half {result.hit_rate_last_half:.4f}")
    typer.echo(f"  evicted blocks     {result.evicted_blocks:,}")
    typer.echo(f"  peak cached tokens {result.peak_cached_tokens:,}")
    typer.echo(f"  calls not fitting  {result.calls_not_fitting:,}")
    if result.model is not None:
        _echo_model(result)
    if format == "claude-code":
        _echo_sessions(result)


def _echo_model(result) -> None:
    lost = ", ".join(f"{g} {n:,}" for g, n in result.hit_tokens_lost_by_group.items())
    typer.echo(f"  model              {result.model} (its layer groups' hit rule)")
    typer.echo(f"  table hit tokens   {result.table_hit_tokens:,} (the block table alone)")
    typer.echo(f"  hits limited by    {result.hits_limited_by or 'no group'}"
               + (f" (hit tokens lost: {lost})" if lost else ""))  # fmt: skip


def _echo_sessions(result) -> None:
    typer.echo(f"  concurrency        {result.concurrency} ({result.interleave})")
    if result.pins_placed or result.pins_refused:
        typer.echo(
            f"  leases             {result.pins_placed:,} placed, {result.pins_refused:,} "
            f"refused, {result.pins_hit:,} held to the return, {result.pins_expired:,} expired"
        )
        typer.echo(f"  calls cut by pins  {result.calls_cut_by_pins:,}")
    if result.released_blocks:
        typer.echo(f"  released blocks    {result.released_blocks:,}")
    if result.bound:
        typer.echo(f"  note: {result.bound}")


def _claude_code(
    file: Path, block_size: int | None, capacity, eviction: str, recompute: bool, session
):
    """Replay Claude Code sessions; (result, extra JSON keys). ``session``: (concurrency,
    interleave mode, ``ReplayPolicyOptions``, the ``--model`` hit rule or None)."""
    from sim.prefix.session_trace import load_sessions
    from sim.prefix.trace_replay import replay_sessions

    sessions = load_sessions(file)
    sizes = sorted({s.block_size for s in sessions})
    if block_size is not None and sizes != [block_size]:
        raise KvsimError(
            f"--block-size {block_size}: the claude-code file's block size is "
            f"{', '.join(map(str, sizes))}; leave --block-size out"
        )
    concurrency, mode, opts, rule = session
    result = replay_sessions(
        sessions, capacity, eviction, recompute, concurrency, mode, opts, hit_rule=rule
    )
    return result, {"sessions": len(sessions)}

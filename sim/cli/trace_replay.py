"""``kvsim trace-replay``: prefix-cache hit rates of a block-hash trace, without timing.

Invariant: the command only parses flags and prints; the rules live in
``sim.prefix.trace_replay`` and are restated in ``HELP``. ``--json`` prints one object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli._common import print_json
from sim.errors import KvsimError

_PARAGRAPHS = [
    "Replay a request trace through a radix prefix cache and print its prefix hit rate "
    "(SPEC F17: hit tokens / prompt tokens), with no timing.",
    'Mooncake format: one JSON object per line, {"timestamp": ms, "input_length", '
    '"output_length", "hash_ids": [...]}; each hash id is a 512-token block, equal ids mean '
    "equal content and equal prefix, the last block may be partial.",
    "Rules: requests are processed in file order, each finished before the next; a request "
    "hits the longest run of its leading blocks that are cached, hit tokens = min(matched "
    "blocks x B, input_length); then all its blocks are cached as the most recently used; "
    "while the cache holds more than --cache-tokens (counted in whole blocks of B tokens), "
    "dormant leaves are evicted oldest first by the --eviction strategy (ties: deepest "
    "first). No recompute cap is applied (the engine keeps at least one prompt token to "
    "compute; this mode does not). With --block-size B other than 512, B must divide 512 "
    "and each trace block (the partial last one included) becomes 512/B blocks.",
    "hit_rate_last_half is the same ratio over the requests from index requests // 2 on "
    "(after warm-up).",
    "Example: kvsim trace-replay workloads/data/mooncake/synthetic_trace.jsonl "
    "--format mooncake --cache-tokens 1000000 --json",
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
    format: Annotated[str, typer.Option("--format", help="Trace format: mooncake.")],
    block_size: Annotated[int, typer.Option(help="Tokens per cache block; divides 512.")] = 512,
    cache_tokens: Annotated[
        str, typer.Option(help="Cache capacity in tokens, or 'inf' for unbounded.")
    ] = "inf",
    eviction: Annotated[
        str, typer.Option(help="Eviction strategy: lru, lfu, fifo or priority.")
    ] = "lru",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Parse the flags, replay, print."""
    from sim.prefix.trace_replay import load_trace, replay

    capacity = parse_cache_tokens(cache_tokens)
    requests = load_trace(file, format)
    result = replay(requests, block_size=block_size, cache_tokens=capacity, eviction=eviction)
    out = result.to_dict()
    out["cache_tokens"] = "inf" if capacity is None else capacity
    out["file"] = str(file)
    out["format"] = format
    if json_out:
        print_json(out)
        return
    cap = "unbounded" if capacity is None else f"{capacity:,} tokens"
    typer.echo(
        f"{file}: {result.requests:,} requests, block size {block_size}, cache {cap}, "
        f"eviction {result.eviction}"
    )
    typer.echo(f"  prompt tokens      {result.prompt_tokens:,}")
    typer.echo(f"  hit tokens         {result.hit_tokens:,}")
    typer.echo(f"  hit rate           {result.hit_rate:.4f}")
    typer.echo(f"  hit rate last half {result.hit_rate_last_half:.4f}")
    typer.echo(f"  evicted blocks     {result.evicted_blocks:,}")

"""Prefix hit rate of agent prompts through a radix tree: what each harness choice costs.

Responsibility: replay the prompts of one or more trajectories (``sim.prefix.prompt``)
through a radix tree, call by call, and report F17 per call, per trajectory and overall,
both as raw match and as tokens actually served. Each call is finished before the next:
its prompt and reply are cached (whole blocks) as the most recently used, less the
reply's last token, whose KV is never computed (as the engine holds a finished call:
``P + K - 1`` tokens). Trajectories are interleaved turn by turn, so a fleet shares the
system prompt and tools.

Served tokens follow the engine's rules: at least one prompt token is computed (the match
is capped at ``prompt - 1``), then ``truncate`` keeps whole blocks (F18) while
``cow_tail`` also serves the partial tail block by copying it.

Invariant: deterministic; the numbers in ``docs/prefix_cache.md`` come from
``perturbation_examples()`` (run ``python -m sim.prefix.harness``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.errors import KvsimError
from sim.prefix.pool import CountingPool
from sim.prefix.prompt import AgentPromptSpec, Prompt, build_trajectory
from sim.prefix.radix import RadixTree
from sim.prefix.spans import concat, n_tokens, slice_tokens

TAIL_POLICIES = ("truncate", "cow_tail")


@dataclass(frozen=True)
class CallHit:
    """F17 inputs of one call."""

    trajectory: str
    turn: int
    prompt_tokens: int
    matched_tokens: int  # raw longest-prefix match
    hit_tokens: int  # served from cache after the recompute cap and the tail policy


@dataclass
class HitReport:
    """Calls in replay order, with F17 aggregates."""

    calls: list[CallHit]

    def _sum(self, attr: str, trajectory: str | None) -> int:
        return sum(
            getattr(c, attr) for c in self.calls if trajectory is None or c.trajectory == trajectory
        )

    def hit_rate(self, trajectory: str | None = None) -> float:
        """F17: served tokens / prompt tokens (overall, or one trajectory)."""
        total = self._sum("prompt_tokens", trajectory)
        return self._sum("hit_tokens", trajectory) / total if total else 0.0

    def match_rate(self, trajectory: str | None = None) -> float:
        """Raw matched tokens / prompt tokens (before the cap and truncation)."""
        total = self._sum("prompt_tokens", trajectory)
        return self._sum("matched_tokens", trajectory) / total if total else 0.0

    def per_trajectory(self) -> dict[str, float]:
        """F17 per trajectory (rule 3.8: the figure a harness change should move)."""
        return {t: self.hit_rate(t) for t in dict.fromkeys(c.trajectory for c in self.calls)}


def replay_prompts(
    trajectories: list[list[Prompt]],
    block_size: int = 16,
    cache_tokens: int | None = None,
    eviction: str = "lru",
    tail_policy: str = "truncate",
) -> HitReport:
    """Replay trajectories turn by turn through one radix tree (see module docstring)."""
    if tail_policy not in TAIL_POLICIES:
        raise ValueError(f"tail_policy must be one of {TAIL_POLICIES}, got {tail_policy!r}")
    pool = CountingPool()
    tree = RadixTree(block_size, pool, eviction=eviction)
    cap = None if cache_tokens is None else cache_tokens // block_size
    calls: list[CallHit] = []
    order = [
        p
        for turn in range(max(map(len, trajectories), default=0))
        for traj in trajectories
        if turn < len(traj)
        for p in (traj[turn],)
    ]
    for now, p in enumerate(order):
        tree.content_priority.update(p.priorities)
        m = tree.match(p.segments, now=now, limit_tokens=p.n_tokens - 1)
        hit = m.hit_tokens + (m.tail_tokens if tail_policy == "cow_tail" else 0)
        calls.append(CallHit(p.trajectory, p.turn, p.n_tokens, m.matched_tokens, hit))
        # the call's KV: its prompt and every reply token but the last, which is sampled
        # and never computed (vLLM keeps num_computed = P + K - 1; SGLang caches
        # (input + output)[:-1])
        full = concat(p.segments, p.output)
        computed = n_tokens(full) - 1
        whole = slice_tokens(full, 0, computed // block_size * block_size)
        have = tree.match(whole).block_ids
        tree.insert(whole, have + pool.take(n_tokens(whole) // block_size - len(have)), now)
        if cap is not None and tree.total_blocks > cap:
            tree.evict(tree.total_blocks - cap)
    return HitReport(calls)


def replay_on_allocator(trajectories: list[list[Prompt]], allocator) -> HitReport:
    """Run the calls through an allocator with a prefix cache (``radix``, ``paged_hash``).

    Each call is admitted with its prompt's content, generates its reply and finishes
    before the next (turn-major across trajectories); the allocator's own records give the
    hits, so the two designs can be compared on one workload and one pool.
    """
    calls: list[CallHit] = []
    order = [
        p
        for turn in range(max(map(len, trajectories), default=0))
        for traj in trajectories
        if turn < len(traj)
        for p in (traj[turn],)
    ]
    for now, p in enumerate(order):
        allocator.set_time(float(now))
        seq = (p.trajectory, p.turn)
        if not allocator.allocate(seq, p.n_tokens, content=p.segments):
            raise KvsimError(f"call {seq} ({p.n_tokens} tokens) does not fit the pool")
        reply = n_tokens(p.output) - 1  # the last sampled token's KV is never computed
        if reply > 0 and not allocator.append(seq, reply, content=slice_tokens(p.output, 0, reply)):
            raise KvsimError(f"the reply of call {seq} does not fit the pool")
        allocator.free(seq)
        rec = allocator.index.stats.records[-1]
        calls.append(CallHit(p.trajectory, p.turn, p.n_tokens, rec.matched_tokens, rec.hit_tokens))
    return HitReport(calls)


#: the harness of the worked examples in docs/prefix_cache.md
EXAMPLE_SPEC = AgentPromptSpec(
    system_tokens=2048,
    tool_tokens=(256,) * 8,
    task_tokens=256,
    output_tokens=128,
    observation_tokens=512,
    recent_turns=2,
    summary_tokens=1024,
)

#: name -> (what the harness does, the spec changes)
PERTURBATIONS: dict[str, tuple[str, dict]] = {
    "baseline": ("stable layout, append-only history", {}),
    "per_call_front": (
        "16-token timestamp at the front of every call",
        {"per_call_field_tokens": 16, "per_call_field_at": "front"},
    ),
    "per_call_end": (
        "the same timestamp moved to the end (the fix)",
        {"per_call_field_tokens": 16, "per_call_field_at": "end"},
    ),
    "tool_change": ("one tool definition changes every 5 calls", {"tool_change_every": 5}),
    "unstable_order": (
        "tool definitions serialized in a random order per call",
        {"unstable_tool_order": True},
    ),
    "compaction": ("history summarised every 10 calls", {"compact_every": 10}),
}


def perturbation_examples(
    n_turns: int = 20, block_size: int = 16, spec: AgentPromptSpec = EXAMPLE_SPEC
) -> list[dict]:
    """One row per harness perturbation: prompt tokens, hit rate, match rate."""
    rows = []
    for name, (what, changes) in PERTURBATIONS.items():
        report = replay_prompts(
            [build_trajectory(replace(spec, **changes), n_turns)], block_size=block_size
        )
        rows.append(
            {
                "perturbation": name,
                "what": what,
                "prompt_tokens": sum(c.prompt_tokens for c in report.calls),
                "hit_tokens": sum(c.hit_tokens for c in report.calls),
                "hit_rate": report.hit_rate(),
                "match_rate": report.match_rate(),
            }
        )
    return rows


if __name__ == "__main__":  # pragma: no cover - prints the docs table
    print("| perturbation | what the harness does | prompt tokens | hit tokens | hit rate |")
    print("|---|---|---:|---:|---:|")
    for r in perturbation_examples():
        print(
            f"| `{r['perturbation']}` | {r['what']} | {r['prompt_tokens']:,} | "
            f"{r['hit_tokens']:,} | {r['hit_rate']:.1%} |"
        )

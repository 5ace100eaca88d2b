"""Trace replay without timing: prefix hit rates of a request trace through the radix tree.

Responsibility: read a block-hash trace (Mooncake format) and count, request by request,
how many prompt tokens a prefix cache of a given capacity would serve.

Semantics (the CLI ``--help`` states the same):
- requests are processed in file order, each finished before the next one starts;
- a request hits the longest run of its leading blocks that are cached;
  ``hit tokens = min(matched blocks x B, input_length)``; no recompute cap is applied (the
  engine applies "at least one prompt token is computed", this mode does not) unless
  ``recompute_last_token``: then, as the engine's radix cache does, ``hit tokens =
  floor(min(matched blocks x B, input_length - 1) / B) x B`` (whole blocks only, and a
  prompt that is cached whole recomputes its last block); what is cached is the same;
- then all its blocks are cached as the most recently used (time = request index);
- while the cache holds more than ``cache_tokens`` (counted in whole blocks of B tokens),
  dormant leaves of other requests are evicted first, oldest first by the chosen strategy,
  ties deepest first (the request's path is locked meanwhile, as SGLang locks a running
  request's: under ``lfu`` its never-hit new blocks would otherwise go first); only then
  its own deepest blocks, so a request of more blocks than the cache keeps its leading
  blocks that fit, and counts in ``calls_not_fitting``; ``evicted_blocks`` counts those
  own blocks too (they were inserted, then evicted);
- a trace block is 512 tokens; with ``block_size`` B (B divides 512) each trace block,
  the partial last one included, becomes 512/B blocks.

Claude Code sessions (``--format claude-code``, ``replay_sessions``; the file format is
``sim.prefix.session_trace``) follow the same rules with these differences:
- sessions are replayed one after another in file order; within a session the top-level
  calls in order, and at a subagent entry that subagent's calls in order (depth first);
  with ``concurrency`` N, N sessions are in flight and their calls interleaved
  (``sim.prefix.replay_order``); the clock is a call's index in that order;
- the block size B is the file's (64); a call has floor(in / B) block ids (no partial
  block), so ``hit tokens = min(matched blocks x B, in)`` (or the recompute rule above);
- block ids are namespaced per session (``hash_id_scope: local``; ``global`` shares them);
- the call's blocks are inserted or touched at its time (its index in the replay order)
  and are not evicted for that call: while the cache holds more than ``cache_tokens``,
  the least recently used leaf block (one no cached block extends) that the current call
  does not use goes first, deeper first on ties (the radix cache's leaf LRU, rule 3.7);
  a call of more blocks than the cache holds caches its leading ``floor(cache_tokens /
  B)`` blocks only (everything else is evicted) and counts in ``calls_not_fitting``;
  the blocks past them are never inserted, so ``evicted_blocks`` does not count them (the
  Mooncake replay inserts them, then evicts and counts them);
- ``eviction`` also takes the replay policies of ``sim.prefix.replay_policies``
  (``belady``, ``ttl_pin``, ``hints``): a lease (``pin_for_s``) locks a call's path until
  its session's next call or its expiry (by call time), within a pin budget (refused past
  it); a call whose blocks leases crowd out caches fewer of them (``calls_cut_by_pins``);
  ``release`` drops a session's path at its last call.

With ``--model NAME`` (``hit_rule``; ``sim.prefix.replay_hit_rule``) what is cached is the
same, but a call's hit is the longest prefix every layer group of the model serves
(``sim.prefix.hybrid_hit.longest_hit``, vLLM's hybrid rule) given the blocks matched: a
windowed model keeps them, a state-space hybrid gets none without saved states
(``--mamba-cache-mode none``) and keeps them with a state at every block boundary
(``all``); the output adds the block table's own hits and the hit tokens each group took
away.

Invariant: the cache never holds more than ``floor(cache_tokens / B)`` blocks after a
request (``peak_cached_tokens <= cache_tokens``); replay is deterministic and does work
per trace block (per run of consecutive block ids for sessions), never per token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from sim.errors import ConfigError, KvsimError, UnknownNameError
from sim.prefix.pool import CountingPool
from sim.prefix.radix import RadixTree
from sim.prefix.replay_hit_rule import ModelHitRule
from sim.prefix.replay_order import interleave
from sim.prefix.replay_policies import ReplayPolicyOptions, build_plan
from sim.prefix.session_trace import BlockRuns, Session
from sim.yamlio import json_value

#: tokens per hash id in the Mooncake format
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a block-hash trace."""

    timestamp_ms: float  # arrival, ms from trace start (unused by replay; kept for users)
    input_length: int  # prompt tokens
    output_length: int  # generated tokens
    hash_ids: tuple[int, ...]  # one id per 512-token block; equal ids = equal prefix


# ---------------------------------------------------------------------- loading
def _field(obj: dict, name: str, where: str, kind: str, minimum: float):
    if name not in obj:
        raise ConfigError("missing field", location=where, field=name)
    v = obj[name]
    ok = isinstance(v, int) if kind == "int" else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or v < minimum or (kind == "num" and not math.isfinite(v)):
        what = "a whole number" if kind == "int" else "a number"
        raise ConfigError(f"must be {what} >= {minimum}, got {v!r}", location=where, field=name)
    return v


def parse_mooncake_line(line: str, where: str) -> TraceRequest:
    """One Mooncake JSON line -> request; errors name ``where`` (``file:line``) and field."""
    obj = json_value(line, where)
    if not isinstance(obj, dict):
        raise ConfigError("expected a JSON object", location=where)
    ts = _field(obj, "timestamp", where, "num", 0)
    n_in = _field(obj, "input_length", where, "int", 1)
    n_out = _field(obj, "output_length", where, "int", 0)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in ids
    ):
        raise ConfigError("must be a list of whole numbers", location=where, field="hash_ids")
    want = -(-n_in // MOONCAKE_BLOCK_TOKENS)
    if len(ids) != want:
        raise ConfigError(
            f"has {len(ids)} ids but input_length {n_in} needs {want} blocks of "
            f"{MOONCAKE_BLOCK_TOKENS}",
            location=where,
            field="hash_ids",
        )
    return TraceRequest(float(ts), n_in, n_out, tuple(ids))


def load_mooncake(path: str | Path) -> list[TraceRequest]:
    """Read a Mooncake trace (one JSON object per line; blank lines skipped)."""
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_fifo()):  # /dev/zero never ends
        raise KvsimError(f"{path}: cannot read trace: not a regular file or pipe")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KvsimError(f"{path}: cannot read trace: {getattr(exc, 'strerror', exc)}") from None
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            out.append(parse_mooncake_line(line, f"{path}:{i}"))
    if not out:
        raise KvsimError(f"{path}: the trace has no requests")
    return out


TRACE_FORMATS = {"mooncake": load_mooncake}
#: every format ``kvsim trace-replay`` reads (claude-code: ``replay_sessions``)
FORMATS = (*TRACE_FORMATS, "claude-code")


def load_trace(path: str | Path, fmt: str) -> list[TraceRequest]:
    """Load a trace by format name."""
    try:
        loader = TRACE_FORMATS[fmt]
    except KeyError:
        raise UnknownNameError("trace format", fmt, list(FORMATS)) from None
    return loader(path)


# ---------------------------------------------------------------------- replay
@dataclass
class ReplayResult:
    """Hit counts of one replay (F17 over the trace and over its second half)."""

    requests: int
    prompt_tokens: int
    hit_tokens: int
    hit_rate: float
    hit_rate_last_half: float  # requests with index >= requests // 2 (after warm-up)
    block_size: int
    cache_tokens: int | None  # None = unbounded
    eviction: str
    evicted_blocks: int
    peak_cached_tokens: int  # whole blocks x B, after each request's eviction
    #: requests of more blocks than the cache holds (only their leading blocks are cached)
    calls_not_fitting: int = 0
    hits: list[int] = field(default_factory=list, repr=False)  # per request
    recompute_last_token: bool = False  # the engine's rule: at least one token is computed
    #: ``--model``: the model whose layer groups decide hits (None: the block table alone)
    model: str | None = None
    #: ``--model``: the hit tokens the block table alone would serve (hit_tokens' upper bound)
    table_hit_tokens: int | None = None
    #: ``--model``: group -> hit tokens it took away from the table's hits
    hit_tokens_lost_by_group: dict[str, int] | None = None
    #: ``--model``: the group that took away the most hit tokens (None: none took any)
    hits_limited_by: str | None = None
    #: ``--model``: the state layers' saved states (``--mamba-cache-mode``: none or all)
    mamba_cache_mode: str | None = None

    def to_dict(self, per_request: bool = False) -> dict:
        d = asdict(self)
        if not per_request:
            d.pop("hits")
        if self.model is None:  # without --model the output is exactly as before it existed
            for k in MODEL_KEYS:
                d.pop(k)
        return d


#: the keys ``--model`` adds to a replay's output
MODEL_KEYS = ("model", "table_hit_tokens", "hit_tokens_lost_by_group", "hits_limited_by",
              "mamba_cache_mode")  # fmt: skip


def replay(
    requests: list[TraceRequest],
    block_size: int = MOONCAKE_BLOCK_TOKENS,
    cache_tokens: int | None = None,
    eviction: str = "lru",
    recompute_last_token: bool = False,
    hit_rule: ModelHitRule | None = None,
) -> ReplayResult:
    """Replay ``requests`` through a radix tree (see the module docstring for the rules);
    ``hit_rule`` (``--model``): a model's layer groups decide each hit."""
    if not isinstance(block_size, int) or block_size < 1 or MOONCAKE_BLOCK_TOKENS % block_size:
        raise KvsimError(f"block size must divide {MOONCAKE_BLOCK_TOKENS}, got {block_size}")
    if cache_tokens is not None and cache_tokens < 0:
        raise KvsimError(f"cache tokens must be >= 0 or inf, got {cache_tokens}")
    pool = CountingPool()
    tree = RadixTree(block_size, pool, eviction=eviction)
    cap = None if cache_tokens is None else cache_tokens // block_size
    per_trace_block = MOONCAKE_BLOCK_TOKENS // block_size
    hits: list[int] = []
    peak = not_fitting = table_hits = 0
    for i, req in enumerate(requests):
        not_fitting += cap is not None and len(req.hash_ids) * per_trace_block > cap
        content = tuple((h, 0, MOONCAKE_BLOCK_TOKENS) for h in req.hash_ids)
        m = tree.match(content, now=i)
        matched = len(m.block_ids)
        hit, table = _call_hit(matched, block_size, req.input_length, recompute_last_token,
                               hit_rule)  # fmt: skip
        hits.append(hit)
        table_hits += table
        new = pool.take(len(req.hash_ids) * per_trace_block - matched)
        ins = tree.insert(content, m.block_ids + new, now=i)
        if cap is not None and tree.total_blocks > cap:
            tree.lock(ins.node)  # the request's own blocks go last (SGLang locks them)
            tree.evict(tree.total_blocks - cap)
            tree.unlock(ins.node)
            if tree.total_blocks > cap:  # larger than the cache: its own deepest go
                tree.evict(tree.total_blocks - cap)
        peak = max(peak, tree.total_blocks)
    prompts = [r.input_length for r in requests]
    base = _result(
        prompts, hits, tree, block_size, cache_tokens, peak, recompute_last_token, not_fitting
    )
    return _with_model(base, hit_rule, table_hits)


def _result(
    prompts: list[int],
    hits: list[int],
    tree: RadixTree,
    block_size: int,
    cache_tokens: int | None,
    peak_blocks: int,
    recompute_last_token: bool,
    not_fitting: int,
) -> ReplayResult:
    prompt = sum(prompts)
    half = len(prompts) // 2
    prompt_late = sum(prompts[half:])
    hit_late = sum(hits[half:])
    return ReplayResult(
        requests=len(prompts),
        prompt_tokens=prompt,
        hit_tokens=sum(hits),
        hit_rate=sum(hits) / prompt if prompt else 0.0,
        hit_rate_last_half=hit_late / prompt_late if prompt_late else 0.0,
        block_size=block_size,
        cache_tokens=cache_tokens,
        eviction=tree.strategy.name,
        evicted_blocks=tree.evicted_blocks,
        peak_cached_tokens=peak_blocks * block_size,
        hits=hits,
        recompute_last_token=recompute_last_token,
        calls_not_fitting=not_fitting,
    )


def _hit_tokens(matched_blocks: int, block_size: int, prompt: int, recompute: bool) -> int:
    if recompute:
        return min(matched_blocks * block_size, prompt - 1) // block_size * block_size
    return min(matched_blocks * block_size, prompt)


def _call_hit(matched_blocks: int, block_size: int, prompt: int, recompute: bool,
              rule: ModelHitRule | None) -> tuple[int, int]:  # fmt: skip
    """(hit tokens, the hit tokens of the block table alone) of one call."""
    table = _hit_tokens(matched_blocks, block_size, prompt, recompute)
    if rule is None:
        return table, table
    h = rule.hit(matched_blocks, block_size)
    hit = _hit_tokens(h.blocks, block_size, prompt, recompute)
    rule.count(h.limited_by, table, hit)
    return hit, table


def _with_model(base: ReplayResult, rule: ModelHitRule | None, table_hits: int) -> ReplayResult:
    """``base`` with the ``--model`` keys filled in (unchanged without a model)."""
    if rule is None:
        return base
    base.model = rule.model
    base.table_hit_tokens = table_hits
    base.hit_tokens_lost_by_group = dict(sorted(rule.lost_tokens.items()))
    base.hits_limited_by = rule.limited_by
    base.mamba_cache_mode = "all" if rule.saved_states else "none"
    return base


def block_content(key: int | str, block_ids: Sequence[int], block_size: int) -> tuple:
    """The content of a prompt given as block ids: block ``x`` is tokens ``x * B`` ..
    ``x * B + B - 1`` of the content ``key``, so a run of consecutive ids is one segment
    and equal ids (under one key) are equal blocks. ``BlockRuns`` (maximal runs) are read
    run by run, never id by id."""
    if isinstance(block_ids, BlockRuns):
        return tuple((key, first * block_size, n * block_size) for first, n in block_ids.runs)
    out: list[tuple] = []
    start = prev = None
    for x in block_ids:
        if prev is not None and x == prev + 1:
            prev = x
            continue
        if start is not None:
            out.append((key, start * block_size, (prev - start + 1) * block_size))
        start = prev = x
    if start is not None:
        out.append((key, start * block_size, (prev - start + 1) * block_size))
    return tuple(out)


@dataclass
class SessionReplayResult(ReplayResult):
    """A session replay's counts: ``ReplayResult`` plus concurrency and the leases."""

    concurrency: int = 1
    interleave: str = "time"
    pins_placed: int = 0  # leases granted
    pins_refused: int = 0  # leases asked for past the pin budget (or for an evicted path)
    pins_hit: int = 0  # sessions that came back while their lease held
    pins_expired: int = 0  # leases that ran out before their session came back
    calls_cut_by_pins: int = 0  # calls that cached fewer blocks because leases held the rest
    released_blocks: int = 0  # blocks dropped by ``release`` at a session's last call
    #: how to read the number (Belady is an offline reference, not a proven optimum)
    bound: str = ""


BELADY_NOTE = (
    "belady reads the trace's future: an offline reference, not a proven optimum under "
    "the leaf constraint"
)


def replay_sessions(
    sessions: list[Session],
    cache_tokens: int | None = None,
    eviction: str = "lru",
    recompute_last_token: bool = False,
    concurrency: int = 1,
    interleave_mode: str = "time",
    options: ReplayPolicyOptions | None = None,
    hit_rule: ModelHitRule | None = None,
) -> SessionReplayResult:
    """Replay Claude Code sessions through a radix tree (module docstring: the rules);
    ``hit_rule`` (``--model``): a model's layer groups decide each hit."""
    sizes = {s.block_size for s in sessions}
    if len(sizes) != 1:
        raise KvsimError(f"sessions have different block sizes {sorted(sizes)}; replay one size")
    (bs,) = sizes
    if cache_tokens is not None and cache_tokens < 0:
        raise KvsimError(f"cache tokens must be >= 0 or inf, got {cache_tokens}")
    opts = options or ReplayPolicyOptions()
    order = interleave(sessions, concurrency, interleave_mode)
    keys = [i if s.scope == "local" else "global" for i, s in enumerate(sessions)]
    contents = [block_content(keys[rc.session], rc.call.block_ids, bs) for rc in order]
    plan = build_plan(eviction, order, contents, opts)
    pool = CountingPool()
    tree = RadixTree(bs, pool, eviction=plan.strategy)
    cap = None if cache_tokens is None else cache_tokens // bs
    budget = None if cap is None else int(cap * opts.max_pinned_fraction)
    leases = _Leases(tree, budget)
    prompts: list[int] = []
    hits: list[int] = []
    peak = not_fitting = cut = released = table_hits = 0
    for rc, content in zip(order, contents, strict=True):
        call = rc.call
        leases.advance(rc.t_s, rc.session)
        m = tree.match(content, now=rc.index)
        prompts.append(call.prompt_tokens)
        hit, table = _call_hit(len(m.block_ids), bs, call.prompt_tokens, recompute_last_token,
                               hit_rule)  # fmt: skip
        hits.append(hit)
        table_hits += table
        keep = len(call.block_ids) if cap is None else min(cap, len(call.block_ids))
        not_fitting += keep < len(call.block_ids)
        node = None
        if keep:  # (keep 0: no blocks, or a cache of 0 blocks, which stays empty)
            head = content if keep == len(call.block_ids) else block_content(
                keys[rc.session], call.block_ids[:keep], bs)  # fmt: skip
            node, short = _cache_leading(tree, pool, head, m.block_ids[:keep], keep, cap, rc.index)
            cut += short
        pin_s = plan.pin_rule(rc) if plan.pin_rule else plan.pin_for_s[rc.index]
        if pin_s is not None:
            leases.pin(rc.session, node, rc.t_s + pin_s)
        if plan.release and rc.next_t_s is None and node is not None and node.alive:
            released += len(tree.evict_path(node))
        peak = max(peak, tree.total_blocks)
    base = _result(prompts, hits, tree, bs, cache_tokens, peak, recompute_last_token, not_fitting)
    base = _with_model(base, hit_rule, table_hits)
    return _session_result(base, eviction, concurrency, interleave_mode, leases, cut, released)


def _session_result(base: ReplayResult, eviction: str, concurrency: int, mode: str,
                    leases: _Leases, cut: int, released: int) -> SessionReplayResult:  # fmt: skip
    same = {f.name: getattr(base, f.name) for f in fields(ReplayResult)}
    same["eviction"] = eviction  # the policy's name (ttl_pin evicts by lru)
    return SessionReplayResult(
        **same,
        concurrency=concurrency,
        interleave=mode,
        pins_placed=leases.placed,
        pins_refused=leases.refused,
        pins_hit=leases.hit,
        pins_expired=leases.expired,
        calls_cut_by_pins=cut,
        released_blocks=released,
        bound=BELADY_NOTE if eviction == "belady" else "",
    )


class _Leases:
    """Pinned paths (``pin_for_s``): one per session, held until it expires or the session
    comes back; a lease that would pin more than ``budget`` blocks is refused."""

    def __init__(self, tree: RadixTree, budget: int | None) -> None:
        self.tree = tree
        self.budget = budget
        self.active: dict[int, tuple[float, object]] = {}  # session -> (expiry s, node)
        self.placed = self.refused = self.hit = self.expired = 0

    def advance(self, now_s: float, session: int) -> None:
        """Expire leases that ran out before ``now_s``; ``session`` is back: its lease ends."""
        for s in [s for s, (exp, _) in self.active.items() if exp < now_s]:
            self.expired += 1
            self._drop(s)
        if session in self.active:
            self.hit += 1
            self._drop(session)

    def _drop(self, session: int) -> None:
        _, node = self.active.pop(session)
        self.tree.unlock(node)

    def pin(self, session: int, node, expiry_s: float) -> None:
        tree = self.tree
        if node is None or not node.alive:
            self.refused += 1
            return
        pinned = tree.total_blocks - tree.evictable_blocks
        if self.budget is not None and pinned + tree.unlocked_blocks_on_path(node) > self.budget:
            self.refused += 1
            return
        tree.lock(node)
        self.active[session] = (expiry_s, node)
        self.placed += 1


def _cache_leading(tree, pool, content, matched: list[int], keep: int, cap, now: int):
    """Insert or touch a call's leading ``keep`` blocks (``keep <= cap``), then evict other
    blocks down to ``cap``: the call's own are locked, so they are never the victims unless
    leases hold the rest (then its own deepest go). Returns (its node, 1 if it was cut)."""
    ins = tree.insert(content, matched + pool.take(keep - len(matched)), now)
    if cap is None or tree.total_blocks <= cap:
        return ins.node, 0
    tree.lock(ins.node)  # the current call's blocks are not candidates
    tree.evict(tree.total_blocks - cap)
    tree.unlock(ins.node)
    if tree.total_blocks <= cap:
        return ins.node, 0
    tree.evict(tree.total_blocks - cap)  # only the call's own unpinned blocks are left
    return ins.node, 1

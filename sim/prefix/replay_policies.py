"""Eviction policies of a session replay, registered by name: the tree's strategies, Belady's
offline reference, TTL pinning and agent KV hints.

Responsibility: given the whole interleaved call sequence (``sim.prefix.replay_order``),
say how a replay ranks dormant leaves (an ``EvictionStrategy`` for the radix tree) and,
after each call, which lease (``pin_for_s``) to ask for and whether to drop the session's
blocks (``release``). The replay loop (``sim.prefix.trace_replay.replay_sessions``) honours
leases within its pin budget and counts refusals.

- ``lru`` (and every other name in ``sim.prefix.eviction``): that strategy, no pins.
- ``belady``: among evictable leaf blocks, the one whose next use (the next call whose
  prompt contains the block's whole path) is furthest goes first, never-used-again first,
  ties deeper first. It reads the future from the trace, so it is an offline reference; it
  is not a proven optimum: only leaves may go (a block stays while a cached block extends
  it) and a call caches all its blocks, so the best eviction sequence can differ.
- ``ttl_pin``: as the engine's ``ttl_pin`` pause policy (Continuum): after a call that is
  not its session's last, pin its path for ``ttl_s`` when the session's predicted pause
  (the running mean of its pauses so far; unknown at first) is at most ``short_wait_s`` or
  unknown; eviction is LRU.
- ``hints``: the agent KV hints of vLLM RFCs #51428 (Pin / Retain), #52113, #57103 and
  SGLang #27574, computed from the trace's own future: the expected return time is the
  session's true pause times a factor drawn log-uniformly in ``[1/hint_noise, hint_noise]``
  (seeded; ``hint_noise`` 1 = exact). ``pin_for_s`` = the expected pause when it is at most
  ``pin_max_s``; ``retain_priority`` 1 then, else 0 (a leaf's class is the one its last
  call hinted; lower class first, ties LRU); ``release`` at a session's last call drops
  its path.

Invariant: every name in ``REPLAY_POLICIES`` or ``sim.prefix.eviction`` resolves to a plan;
an unknown name raises ``UnknownNameError`` listing both; plans depend only on the calls,
the options and the seed. A plug-in's plan is checked as ``build_plan`` receives it (a
``ReplayPlan``; leases None or finite seconds >= 0: NaN or inf never expired), in one line
naming the policy; the shipped builds' plans are not.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import TYPE_CHECKING, ClassVar

from sim.errors import KvsimError, UnknownNameError
from sim.lazy_numpy import numpy_on_first_use
from sim.prefix.eviction import (
    EVICTION_STRATEGIES,
    EvictionStrategy,
    _trust_keys,
    get_strategy,
)
from sim.prefix.replay_order import ReplayCall
from sim.prefix.spans import Segments, common_prefix, concat, n_tokens

if TYPE_CHECKING:
    import numpy as np
else:  # a plan's noise draws alone use it: reading a Mooncake trace (kvsim validate) does not
    np = numpy_on_first_use(globals())

NEVER = math.inf


@dataclass(frozen=True)
class ReplayPolicyOptions:
    """Knobs of the pinning policies (defaults: the engine's ``ttl_pin``)."""

    ttl_s: float = 2.0  # ttl_pin: lease length
    short_wait_s: float = 2.0  # ttl_pin: pin when the predicted pause is at most this
    pin_max_s: float = 60.0  # hints: no lease for an expected pause longer than this
    hint_noise: float = 1.0  # hints: expected pause off by a factor in [1/x, x]
    seed: int = 0  # hints: the noise draws
    max_pinned_fraction: float = 0.5  # leases refused past this share of the capacity

    def __post_init__(self) -> None:
        for name in ("ttl_s", "short_wait_s", "pin_max_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise KvsimError(f"{name}: must be a number >= 0, got {v!r}")
        if not (math.isfinite(self.hint_noise) and self.hint_noise >= 1):
            raise KvsimError(
                f"hint_noise: must be a number >= 1 (1 = exact), got {self.hint_noise!r}"
            )
        if not 0 <= self.max_pinned_fraction <= 1:
            raise KvsimError(
                f"max_pinned_fraction: must be in [0, 1], got {self.max_pinned_fraction!r}"
            )


@dataclass
class ReplayPlan:
    """What a policy asks of the replay loop."""

    strategy: EvictionStrategy
    pin_for_s: list[float | None] = field(default_factory=list)  # per call index
    release: bool = False  # drop a session's path at its last call
    #: a lease is decided after the call (needs the session's past pauses): call -> seconds
    pin_rule: Callable[[ReplayCall], float | None] | None = None


# ------------------------------------------------------------------ Belady's rule
class CallFuture:
    """Which later call uses a path: calls grouped by their first content id."""

    def __init__(self, order: list[ReplayCall], contents: list[Segments]) -> None:
        self._groups: dict[object, tuple[list[int], list[Segments]]] = {}
        for rc, segs in zip(order, contents, strict=True):
            if not segs:
                continue
            idx, cs = self._groups.setdefault(segs[0][0], ([], []))
            idx.append(rc.index)
            cs.append(segs)

    def next_use(self, path: Segments, after: int) -> tuple[float, int]:
        """(index of the next call after ``after`` containing all of ``path``, or NEVER;
        the longest common prefix in tokens of the calls in between)."""
        if not path:
            return NEVER, 0
        group = self._groups.get(path[0][0])
        if group is None:
            return NEVER, 0
        idx, cs = group
        end, deepest = n_tokens(path), 0
        for m in range(bisect_right(idx, after), len(idx)):
            common = common_prefix(cs[m], path)
            if common >= end:
                return idx[m], deepest
            deepest = max(deepest, common)
        return NEVER, deepest


def _path(node) -> Segments:
    labels = []
    while node.parent is not None:
        labels.append(node.label)
        node = node.parent
    return concat(*reversed(labels))


class Belady(EvictionStrategy):
    """Furthest next use first (offline: reads the future of the replayed trace)."""

    name: ClassVar[str] = "belady"

    def __init__(self, future: CallFuture) -> None:
        self.future = future
        self._memo: dict[tuple, tuple[float, int]] = {}

    def _lookup(self, node) -> tuple[float, int]:
        # a leaf's rank changes only when it is touched (last_access) or trimmed (end):
        # its next use after its last access is the next call that touches it
        k = (node.serial, node.end_tokens, node.last_access)
        got = self._memo.get(k)
        if got is None:
            if len(self._memo) > 1 << 16:
                self._memo.clear()
            got = self.future.next_use(_path(node), int(node.last_access))
            self._memo[k] = got
        return got

    def key(self, node, tree) -> tuple:
        return (-self._lookup(node)[0],)

    def same_rank_blocks(self, node, tree) -> int:
        """Trailing blocks no call before the last block's next use touches."""
        deepest = self._lookup(node)[1]
        start = node.end_tokens - node.n_tokens
        used = max(0, deepest - start) // tree.block_size
        return max(1, len(node.block_ids) - used)


# ------------------------------------------------------------------ hints
class Retain(EvictionStrategy):
    """``retain_priority``: leaves of sessions expected back soon go last; ties LRU."""

    name: ClassVar[str] = "hints"
    merges_extensions: ClassVar[bool] = True  # ranks by last access, as lru

    def __init__(self, retain_priority: list[int]) -> None:
        self.retain_priority = retain_priority

    def key(self, node, tree) -> tuple:
        # the hint of the call that last touched the leaf (its index is the clock); a class,
        # not a time: a time would go stale once the session has moved on to another branch
        return (self.retain_priority[int(node.last_access)], node.last_access)


_trust_keys(Belady.key, Retain.key)  # no NaN: the tree trusts their ranks


def expected_pauses(order: list[ReplayCall], noise: float, seed: int) -> list[float]:
    """Per call, its session's expected pause until the next call (NEVER after the last):
    the true pause times a seeded log-uniform factor in ``[1/noise, noise]``."""
    rng = np.random.default_rng(seed)
    factors = np.exp(rng.uniform(-1.0, 1.0, len(order)) * math.log(noise))
    return [
        NEVER if rc.next_t_s is None else (rc.next_t_s - rc.t_s) * float(f)
        for rc, f in zip(order, factors, strict=True)
    ]


# ------------------------------------------------------------------ registry
def _plain(name: str) -> Callable:
    def build(order, contents, opts: ReplayPolicyOptions) -> ReplayPlan:
        return ReplayPlan(get_strategy(name), [None] * len(order))

    return build


def _belady(order, contents, opts: ReplayPolicyOptions) -> ReplayPlan:
    return ReplayPlan(Belady(CallFuture(order, contents)), [None] * len(order))


def _ttl_pin(order, contents, opts: ReplayPolicyOptions) -> ReplayPlan:
    total_s: dict[int, float] = {}  # session -> sum of its pauses so far
    count: dict[int, int] = {}
    last_t: dict[int, float] = {}

    def rule(rc: ReplayCall) -> float | None:
        k = rc.session
        if k in last_t:  # the pause that just ended is now known
            total_s[k] = total_s.get(k, 0.0) + rc.t_s - last_t[k]
            count[k] = count.get(k, 0) + 1
        last_t[k] = rc.t_s
        if rc.next_t_s is None:
            return None  # last step: never pinned
        predicted = total_s[k] / count[k] if k in count else None
        return opts.ttl_s if predicted is None or predicted <= opts.short_wait_s else None

    return ReplayPlan(get_strategy("lru"), [None] * len(order), pin_rule=rule)


def _hints(order, contents, opts: ReplayPolicyOptions) -> ReplayPlan:
    pauses = expected_pauses(order, opts.hint_noise, opts.seed)
    pins = [p if p <= opts.pin_max_s else None for p in pauses]
    return ReplayPlan(Retain([int(p is not None) for p in pins]), pins, release=True)


#: replay-only policies (they need the whole trace); the tree's strategies are added below
REPLAY_POLICIES: dict[str, Callable] = {"belady": _belady, "ttl_pin": _ttl_pin, "hints": _hints}
#: the shipped builds: a plan from any other (a plug-in's, ``build_plan``) is checked
_SHIPPED_BUILDS: dict[str, Callable] = dict(REPLAY_POLICIES)


def register_replay_policy(name: str, build: Callable) -> None:
    """Add a policy: ``build(order, contents, options) -> ReplayPlan``."""
    REPLAY_POLICIES[name] = build


def policy_names() -> list[str]:
    """Every name ``--eviction`` takes in a session replay."""
    return sorted({*EVICTION_STRATEGIES, *REPLAY_POLICIES})


def build_plan(
    name: str, order: list[ReplayCall], contents: list[Segments], opts: ReplayPolicyOptions
) -> ReplayPlan:
    """The plan of policy ``name`` for this call sequence."""
    if name in REPLAY_POLICIES:
        build = REPLAY_POLICIES[name]
        plan = build(order, contents, opts)
        if build is not _SHIPPED_BUILDS.get(name):
            plan = _checked_plan(name, plan, len(order))
        return plan
    if name in EVICTION_STRATEGIES:
        return _plain(name)(order, contents, opts)
    raise UnknownNameError("eviction policy", name, policy_names())


def _checked_plan(name: str, plan: object, n_calls: int) -> ReplayPlan:
    """A plug-in's plan as the replay loop needs it: a ``ReplayPlan`` with an
    ``EvictionStrategy`` and a lease per call (``pin_for_s``, checked here: O(calls) once)
    or a ``pin_rule`` (each lease it returns checked as it comes: O(1) per call); a lease is
    None or a finite number of seconds >= 0 (NaN never expired)."""
    if not isinstance(plan, ReplayPlan):
        raise KvsimError(
            f"replay policy {name!r} returned {type(plan).__name__}, not a "
            "sim.prefix.replay_policies.ReplayPlan (docs/prefix_cache.md)"
        )
    if not isinstance(plan.strategy, EvictionStrategy):
        raise KvsimError(
            f"replay policy {name!r}: its plan's strategy is {plan.strategy!r}, not an "
            "EvictionStrategy (docs/prefix_cache.md)"
        )
    rule = plan.pin_rule
    if rule is None:
        leases = plan.pin_for_s
        if not isinstance(leases, Sequence) or len(leases) != n_calls:
            seq = isinstance(leases, Sequence)
            held = f"holds {len(leases)} leases" if seq else "is not a list"
            raise KvsimError(
                f"replay policy {name!r}: pin_for_s {held} for {n_calls} calls; give one "
                "lease per call (None: no lease) or a pin_rule"
            )
        for i, lease in enumerate(plan.pin_for_s):
            if lease is not None:
                _check_lease(name, lease, i)
        return plan

    def checked(rc: ReplayCall) -> float | None:
        lease = rule(rc)
        if lease is not None:
            _check_lease(name, lease, rc.index)
        return lease

    plan.pin_rule = checked
    return plan


def _check_lease(name: str, lease: object, call: int) -> None:
    """Refuse a lease that is not a finite number of seconds >= 0, naming the policy."""
    if isinstance(lease, bool) or not isinstance(lease, Real) or not 0 <= float(lease) < math.inf:
        raise KvsimError(
            f"replay policy {name!r}: lease (pin_for_s) {lease!r} for call {call}; a lease "
            "is a finite number of seconds >= 0, or None for no lease (docs/prefix_cache.md)"
        )

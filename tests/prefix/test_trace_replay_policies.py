"""Session replay with concurrency and the replay policies (belady, ttl_pin, hints).

Hand-built traces give exact hit counts worked out by hand in the comments; Belady is
checked against a brute-force optimum written from the rule (every legal eviction
sequence tried): it never beats the optimum, equals it where the classic theorem applies
(one block per call: Belady's MIN), and is not worse than LRU on most small traces.
"""

from __future__ import annotations

import json
import math
import random
import re
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import KvsimError
from sim.prefix.eviction import get_strategy
from sim.prefix.replay_order import interleave
from sim.prefix.replay_policies import REPLAY_POLICIES, ReplayPlan, ReplayPolicyOptions
from sim.prefix.session_trace import parse_session
from sim.prefix.trace_replay import replay_sessions

BS = 64


def _session(name: str, calls, scope: str = "local"):
    """calls: (t_s, block ids) -> a parsed session of 64-token blocks."""
    reqs = [{"t": t, "in": len(ids) * BS, "out": 1, "hash_ids": list(ids)} for t, ids in calls]
    return parse_session(
        {"id": name, "block_size": BS, "hash_id_scope": scope, "requests": reqs}, name
    )


A = [(0, [0, 1, 2, 3]), (10, [0, 1, 2, 3, 4, 5])]
B = [(0, [0, 1, 2, 3]), (5, [0, 1, 2, 3, 4, 5])]


def test_two_sessions_compete_for_a_small_cache_exactly():
    ss = [_session("a", A), _session("b", B)]
    cap = 8 * BS
    # one after another: a0 miss, a1 hits 4 blocks; b0 miss (a trimmed to 4), b1 hits 4
    seq = replay_sessions(ss, cap)
    assert seq.hits == [0, 256, 0, 256]
    # 2 in flight by time: a0, b0 (t 0), b1 (t 5) hits 4 and trims a to 2 blocks, a1 (t 10)
    # hits those 2 and trims b to 2
    conc = replay_sessions(ss, cap, concurrency=2)
    assert [(c.session, c.t_s) for c in interleave(ss, 2)] == [(0, 0), (1, 0), (1, 5), (0, 10)]
    assert conc.hits == [0, 0, 256, 128]
    assert conc.peak_cached_tokens <= cap and conc.evicted_blocks == 2 + 4
    # round-robin: a0, b0, a1 (hits 4, trims b to 2), b1 (hits 2)
    rr = replay_sessions(ss, cap, concurrency=2, interleave_mode="round-robin")
    assert rr.hits == [0, 0, 256, 128] and rr.interleave == "round-robin"
    # unbounded: concurrency changes nothing (local ids: sessions share no content)
    assert replay_sessions(ss, None, concurrency=2).hit_tokens == 512


def test_a_slot_runs_its_sessions_back_to_back():
    ss = [_session("a", [(0, [0]), (3, [0, 1])]), _session("b", [(0, [0])]),
          _session("c", [(1, [0])])]  # fmt: skip
    order = interleave(ss, 2)
    # b ends at 0 on slot 1, so c starts there at 0 (+1 s): c before a's second call
    assert [(c.session, c.t_s) for c in order] == [(0, 0), (1, 0), (2, 1), (0, 3)]
    assert [c.next_t_s for c in order] == [3, None, None, None]


def test_exact_hints_pin_a_session_that_returns_soon():
    # a pauses 4 s; b's long prompt in between would push a's path out under lru
    a = _session("a", [(0, [0, 1, 2, 3]), (4, [0, 1, 2, 3, 4])])
    b = _session("b", [(1, list(range(6)))])
    opts = ReplayPolicyOptions(max_pinned_fraction=1.0)
    lru = replay_sessions([a, b], 8 * BS, "lru", concurrency=2, options=opts)
    assert lru.hits == [0, 0, 2 * BS]  # b trimmed a to 2 blocks
    hints = replay_sessions([a, b], 8 * BS, "hints", concurrency=2, options=opts)
    # a's 4 blocks are pinned until it comes back: b keeps 4 of its 6, a hits all 4
    assert hints.hits == [0, 0, 4 * BS]
    assert (hints.pins_placed, hints.pins_hit, hints.pins_refused) == (1, 1, 0)
    assert hints.calls_cut_by_pins == 1 and hints.peak_cached_tokens <= 8 * BS
    # a's last call releases its path (5 blocks); b released its own at its last call
    assert hints.released_blocks == 5 + 4
    # a hint that is 3x too short expires before the return: no better than lru
    noisy = ReplayPolicyOptions(max_pinned_fraction=1.0, hint_noise=3.0, seed=1)
    got = replay_sessions([a, b], 8 * BS, "hints", concurrency=2, options=noisy)
    assert got.pins_hit + got.pins_expired == got.pins_placed


def test_leases_past_the_budget_are_refused_and_ttl_pin_expires():
    a = _session("a", [(0, [0, 1]), (1, [0, 1, 2]), (30, [0, 1, 2, 3])])
    none = ReplayPolicyOptions(max_pinned_fraction=0.0)
    r = replay_sessions([a], 8 * BS, "hints", options=none)
    assert (r.pins_placed, r.pins_refused) == (0, 2)  # the last call asks for no lease
    ttl = replay_sessions([a], 8 * BS, "ttl_pin", options=ReplayPolicyOptions(ttl_s=2.0))
    # unknown pause at call 0: pinned, back after 1 s (held); mean pause 1 s <= 2: pinned
    # again, back after 29 s (expired)
    assert (ttl.pins_placed, ttl.pins_hit, ttl.pins_expired) == (2, 1, 1)


def test_policy_knobs_are_checked():
    with pytest.raises(KvsimError, match="hint_noise"):
        ReplayPolicyOptions(hint_noise=0.5)
    with pytest.raises(KvsimError, match="concurrency"):
        replay_sessions([_session("a", A)], None, concurrency=0)
    with pytest.raises(KvsimError, match="valid: belady, fifo, hints, lfu, lru"):
        replay_sessions([_session("a", A)], None, "magic")


def _lease_policy(lease, rule: bool = False):
    """A plug-in replay policy: LRU, a lease of ``lease`` after every call but a session's
    last (a ``pin_rule`` when ``rule``)."""

    def lease_of(rc):
        return None if rc.next_t_s is None else lease

    def build(order, contents, opts):
        if rule:
            return ReplayPlan(get_strategy("lru"), [], pin_rule=lease_of)
        return ReplayPlan(get_strategy("lru"), [lease_of(rc) for rc in order])

    return build


LEASED = [_session("a", [(0, [0, 1]), (1, [0, 1, 2]), (30, [0, 1, 2, 3])]),
          _session("b", [(0, [5, 6]), (100, [5, 6, 7])])]  # fmt: skip
ALL_PINNABLE = ReplayPolicyOptions(max_pinned_fraction=1.0)


@pytest.mark.parametrize("rule", [False, True])
@pytest.mark.parametrize("lease", [math.nan, math.inf, -5.0, "2", True])
def test_a_plugin_replay_policys_lease_that_is_not_finite_seconds_is_refused(
    monkeypatch, lease, rule
):
    """A NaN lease never expired (``exp < now`` is never true): counted as held to the
    return; inf likewise (the contract's leases are seconds, as the engine's ``pin_for_s``);
    a negative one expired at once. Each is refused in one line naming the policy."""
    monkeypatch.setitem(REPLAY_POLICIES, "lease_test", _lease_policy(lease, rule))
    with pytest.raises(KvsimError) as exc:
        replay_sessions(LEASED, 8 * BS, "lease_test", concurrency=2)
    assert str(exc.value) == (
        f"replay policy 'lease_test': lease (pin_for_s) {lease!r} for call 0; a lease is a "
        "finite number of seconds >= 0, or None for no lease (docs/prefix_cache.md)"
    )


@pytest.mark.parametrize("rule", [False, True])
def test_a_plugin_replay_policys_finite_leases_are_held_as_before(monkeypatch, rule):
    """2 s leases: a's first is back after 1 s (held), its second expires (29 s away), b's
    expires (100 s away); 0 is a lease too."""
    monkeypatch.setitem(REPLAY_POLICIES, "lease_test", _lease_policy(2, rule))
    r = replay_sessions(LEASED, 8 * BS, "lease_test", concurrency=2, options=ALL_PINNABLE)
    assert (r.pins_placed, r.pins_hit, r.pins_expired, r.pins_refused) == (3, 1, 2, 0)
    monkeypatch.setitem(REPLAY_POLICIES, "lease_test", _lease_policy(0.0, rule))
    r = replay_sessions(LEASED, 8 * BS, "lease_test", concurrency=2, options=ALL_PINNABLE)
    assert r.pins_placed == 3


def test_a_plugin_replay_policys_plan_is_checked_for_shape(monkeypatch):
    order = interleave(LEASED, 2)
    cases = [
        (lambda o, c, opts: None, "returned NoneType, not a sim.prefix.replay_policies.ReplayPlan"),
        (lambda o, c, opts: ReplayPlan("lru", [None] * len(o)),
         "its plan's strategy is 'lru', not an EvictionStrategy"),
        (lambda o, c, opts: ReplayPlan(get_strategy("lru"), [None]),
         f"pin_for_s holds 1 leases for {len(order)} calls"),
    ]  # fmt: skip
    for build, message in cases:
        monkeypatch.setitem(REPLAY_POLICIES, "plan_test", build)
        pattern = rf"^replay policy 'plan_test'[:]? {re.escape(message)}"
        with pytest.raises(KvsimError, match=pattern):
            replay_sessions(LEASED, 8 * BS, "plan_test", concurrency=2)


# ------------------------------------------------------------------ properties
trie_st = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=7)


def _calls_from_trie(spec) -> list[list[int]]:
    """Calls as paths of a trie: each extends an earlier call's prefix with fresh ids, so
    equal ids mean equal prefix (as in the recorded sessions)."""
    calls: list[list[int]] = []
    fresh = 0
    for parent, extra in spec:
        base = calls[parent % len(calls)][: max(1, extra)] if calls else []
        new = list(range(fresh, fresh + extra + (0 if base else 1)))
        fresh += len(new)
        calls.append(base + new)
    return calls


@settings(max_examples=80, deadline=None)
@given(
    specs=st.lists(trie_st, min_size=1, max_size=3),
    conc=st.integers(1, 3),
    policy=st.sampled_from(["lru", "belady", "ttl_pin", "hints"]),
    cap_blocks=st.integers(0, 10),
    fraction=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_every_policy_keeps_capacity_and_serves_each_call_once(
    specs, conc, policy, cap_blocks, fraction
):
    ss = [_session(f"s{i}", [(j, ids) for j, ids in enumerate(_calls_from_trie(s))])
          for i, s in enumerate(specs)]  # fmt: skip
    order = interleave(ss, conc)
    for k, s in enumerate(ss):  # each call once, in its session's order
        assert [c.call for c in order if c.session == k] == list(s.calls())
    assert all(a.t_s <= b.t_s for a, b in zip(order, order[1:], strict=False))
    opts = ReplayPolicyOptions(max_pinned_fraction=fraction, hint_noise=2.0)
    r = replay_sessions(ss, cap_blocks * BS, policy, concurrency=conc, options=opts)
    assert r.peak_cached_tokens <= cap_blocks * BS
    assert r.pins_hit + r.pins_expired <= r.pins_placed
    unbounded = replay_sessions(ss, None, "lru", concurrency=conc)
    assert r.hit_tokens <= unbounded.hit_tokens


def brute_force_best(calls: list[list[int]], cap: int) -> int:
    """The most hit blocks any eviction sequence of the replay's model achieves: a call hits
    its cached leading blocks, caches its leading ``min(cap, len)`` blocks, then leaf blocks
    it did not cache are evicted, any of them, until ``cap`` blocks are left."""
    chains = [[tuple(c[: j + 1]) for j in range(len(c))] for c in calls]

    @cache
    def best(i: int, cached: frozenset) -> int:
        if i == len(chains):
            return 0
        k = 0
        while k < len(chains[i]) and chains[i][k] in cached:
            k += 1
        mine = frozenset(chains[i][: min(cap, len(chains[i]))])
        full = cached | mine
        return k + max(best(i + 1, s) for s in _evictions(full, mine, len(full) - cap))

    return best(0, frozenset())


def _evictions(cached: frozenset, mine: frozenset, n: int):
    """Every set left after removing ``n`` leaf blocks one by one (not the call's own)."""
    if n <= 0:
        yield cached
        return
    seen = set()
    for p in cached - mine:
        if any(len(q) == len(p) + 1 and q[: len(p)] == p for q in cached):
            continue  # not a leaf
        for rest in _evictions(cached - {p}, mine, n - 1):
            if rest not in seen:
                seen.add(rest)
                yield rest


def _hit_blocks(calls, cap: int, policy: str) -> int:
    s = _session("s", [(j, c) for j, c in enumerate(calls)])
    return replay_sessions([s], cap * BS, policy).hit_tokens // BS


@settings(max_examples=60, deadline=None)
@given(spec=trie_st, cap=st.integers(1, 5))
def test_belady_never_beats_the_brute_force_optimum(spec, cap):
    calls = _calls_from_trie(spec)
    best = brute_force_best(calls, cap)
    assert _hit_blocks(calls, cap, "belady") <= best
    assert _hit_blocks(calls, cap, "lru") <= best


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 5), min_size=1, max_size=12), cap=st.integers(1, 4))
def test_belady_is_optimal_with_one_block_per_call(ids, cap):
    """One block per call, every block cached on use: Belady's MIN is optimal."""
    s = _session("s", [(j, [x]) for j, x in enumerate(ids)], scope="global")
    got = replay_sessions([s], cap * BS, "belady").hit_tokens // BS
    # MIN optimum for single blocks (hand check of the brute force on the same model)
    assert got == brute_force_best([[x] for x in ids], cap)


def test_belady_beats_or_ties_lru_on_most_small_traces():
    """Not guaranteed under the leaf constraint: counted over 200 seeded traces."""
    rng = random.Random(7)
    ties_or_better = better = 0
    for _ in range(200):
        spec = [(rng.randrange(6), rng.randrange(4)) for _ in range(rng.randrange(6, 11))]
        calls, cap = _calls_from_trie(spec), rng.randrange(2, 7)
        b, lru = _hit_blocks(calls, cap, "belady"), _hit_blocks(calls, cap, "lru")
        ties_or_better += b >= lru
        better += b > lru
        assert b <= brute_force_best(calls, cap)
    # measured when written: 200 ties-or-better, 20 better (LRU below the optimum on 20)
    assert ties_or_better >= 190 and better >= 10, (ties_or_better, better)


# ------------------------------------------------------------------ the command line
def _write_ab(tmp_path) -> str:
    path = tmp_path / "ab.jsonl"
    lines = []
    for name, calls in (("a", A), ("b", B)):
        reqs = [{"t": t, "in": len(ids) * BS, "out": 1, "hash_ids": ids} for t, ids in calls]
        lines.append(json.dumps({"id": name, "block_size": BS, "requests": reqs}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cli(args: list[str], capsys) -> tuple[int, str]:
    from sim.cli import main

    code = main(args)
    got = capsys.readouterr()
    return code, got.out + got.err


def test_cli_concurrency_and_policies(tmp_path, capsys):
    base = ["trace-replay", _write_ab(tmp_path), "--format", "claude-code"]
    code, text = _cli([*base, "--cache-tokens", "512", "--concurrency", "2", "--json"], capsys)
    assert code == 0, text
    out = json.loads(text)
    assert (out["hit_tokens"], out["concurrency"], out["interleave"]) == (384, 2, "time")
    assert out["bound"] == "" and out["pins_placed"] == 0
    code, text = _cli([*base, "--cache-tokens", "512", "--eviction", "belady"], capsys)
    assert code == 0 and "not a proven optimum" in text
    code, text = _cli([*base, "--eviction", "hints", "--hint-noise", "0.5"], capsys)
    assert code == 2 and text.count("\n") == 1 and "hint_noise: must be a number >= 1" in text


def test_cli_session_policies_need_sessions(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1,
                                 "hash_ids": [1]}) + "\n")  # fmt: skip
    code, text = _cli(["trace-replay", str(trace), "--format", "mooncake", "--eviction",
                       "belady"], capsys)  # fmt: skip
    assert code == 2 and "--eviction belady: needs --format claude-code" in text
    code, text = _cli(["trace-replay", str(trace), "--format", "mooncake", "--concurrency",
                       "3"], capsys)  # fmt: skip
    assert code == 2 and "--concurrency: needs --format claude-code" in text

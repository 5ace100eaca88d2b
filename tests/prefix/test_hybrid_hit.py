"""The hybrid prefix-hit rule (issue 27 item 3), case by case from vLLM's managers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.prefix.hybrid_hit import HitGroup, engine_limiting_group, longest_hit

B = 16
T, F = True, False


def full(cached):
    return HitGroup("full", "full", cached)


def test_full_attention_hits_from_the_left():
    assert longest_hit([full([T, T, F, T])], B, 4).blocks == 2
    assert longest_hit([full([T, T, T, T])], B, 4).limited_by is None


def test_sliding_window_needs_only_the_last_window():
    # window 33 tokens: ceil(32 / 16) = 2 contiguous blocks before the hit point
    sliding = HitGroup("swa", "sliding_window", [F, F, T, T, F, T], 33)
    assert longest_hit([sliding], B, 6).blocks == 4  # blocks 2-3 cached: hit = 4 blocks
    hit = longest_hit([full([T] * 6), sliding], B, 6)
    assert (hit.blocks, hit.tokens, hit.limited_by) == (4, 64, "swa")


def test_sliding_window_run_from_block_zero():
    sliding = HitGroup("swa", "sliding_window", [T, F, F], 1024)
    assert longest_hit([sliding], B, 3).blocks == 1


def test_full_limits_first_then_sliding_agrees():
    sliding = HitGroup("swa", "sliding_window", [T] * 6, 33)
    hit = longest_hit([sliding, full([T, T, T, F, T, T])], B, 6)
    assert (hit.blocks, hit.limited_by) == (3, "full")


def test_state_needs_a_saved_state_at_the_boundary():
    state = HitGroup("mamba", "mamba", [F, T, F, F, T, F])
    hit = longest_hit([full([T] * 4 + [F, F]), state], B, 6)
    # full serves 4 blocks; the last saved state within them is at the end of block 1
    assert (hit.blocks, hit.limited_by) == (2, "mamba")


def test_no_saved_state_no_hit():
    hit = longest_hit([full([T] * 5), HitGroup("la", "linear_attention", [F] * 5)], B, 5)
    assert (hit.blocks, hit.limited_by) == (0, "la")


def test_chunked_local_needs_its_chunk():
    # chunk 32 tokens = 2 blocks. A candidate of 3 blocks (48 tokens) is in the chunk that
    # starts at block 2: blocks 0-1 are served without a cache, block 2 must be cached
    assert longest_hit([HitGroup("local", "chunked_local", [F, F, T, F], 32)], B, 3).blocks == 3
    assert longest_hit([HitGroup("local", "chunked_local", [F, F, F, F], 32)], B, 3).blocks == 2
    # a candidate of 4 blocks (64 tokens) starts a new chunk: nothing before it is needed
    assert longest_hit([HitGroup("local", "chunked_local", [F, F, F, F], 32)], B, 4).blocks == 4


def test_fixed_point_over_several_groups():
    # sliding lowers 6 -> 4; state lowers 4 -> 2; sliding at 2 needs blocks 0-1: cached
    sliding = HitGroup("swa", "sliding_window", [T, T, T, T, F, T], 33)
    state = HitGroup("mamba", "mamba", [F, T, F, F, F, T])
    hit = longest_hit([full([T] * 6), sliding, state], B, 6)
    assert (hit.blocks, hit.limited_by) == (2, "mamba")


@given(st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=4),
       st.integers(0, 6))  # fmt: skip
def test_hit_is_no_longer_than_any_group(cached_lists, max_blocks):
    kinds = ["full", "sliding_window", "mamba", "chunked_local"]
    groups = [HitGroup(f"g{i}", kinds[i], c, 40) for i, c in enumerate(cached_lists)]
    hit = longest_hit(groups, B, max_blocks)
    assert 0 <= hit.blocks <= max_blocks
    if groups[0].kind == "full":
        assert all(groups[0].cached[:hit.blocks])
    if hit.blocks < max_blocks:
        assert hit.limited_by is not None


@pytest.mark.parametrize(
    ("kinds", "who"),
    [
        ([("full", "full", 0), ("sliding", "sliding_window", 1024)], None),
        ([("full", "full", 0), ("local", "chunked_local", 8192)], None),
        ([("attn", "full", 0), ("gdn", "linear_attention", 0)], "gdn"),
        ([("mla", "mla", 0), ("index", "indexer", 0)], None),
    ],
)
def test_engine_limiting_group(kinds, who):
    assert engine_limiting_group(kinds) == who
    assert engine_limiting_group(kinds, state_prefix_caching=True) is None

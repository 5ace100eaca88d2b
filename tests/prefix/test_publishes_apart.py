"""``publishes_apart``: whether publishing a held-back prompt can only cache blocks of its
own (the engine's runs may then evict before that publication, ``KVManager.plan_decode_run``)."""

from __future__ import annotations

from sim.memory import make_allocator

B = 4  # tokens per block


def radix(blocks: int = 64):
    return make_allocator("radix", pool_bytes=blocks * B, kv_bytes_per_token=1, block_size=B)


def test_a_prompt_no_other_sequence_holds_publishes_apart():
    a = radix()
    a.allocate("x", 10, content=[("P", 0, 10)], hold_back=True)
    assert a.publishes_apart("x")  # nothing under the root starts with its first block
    a.publish("x", 4)  # its first block is a leaf only x pins: later ones lengthen it
    assert a.publishes_apart("x")
    a.publish("x", 10)
    assert a.publishes_apart("x")  # nothing held back any more


def test_a_prompt_another_sequence_published_meanwhile_would_pin_its_blocks():
    a = radix()
    a.allocate("x", 10, content=[("P", 0, 10)], hold_back=True)
    a.allocate("y", 10, content=[("P", 0, 10)], hold_back=True)  # x's KV not there: no hit
    assert a.publishes_apart("x") and a.publishes_apart("y")
    a.publish("x", 10)  # x's two full blocks enter the tree
    assert not a.publishes_apart("y")  # y's would share them, not cache its own
    a.free("x")  # now dormant: an eviction could take what y's publication would pin
    assert a.available_blocks() - a.free_blocks == 2
    assert not a.publishes_apart("y")
    a.publish("y", 10)
    assert a.available_blocks() == a.free_blocks  # y pinned x's cached blocks
    assert a.publishes_apart("y")


def test_a_hit_then_its_own_content_publishes_apart():
    a = radix()
    a.allocate("x", 8, content=[("S", 0, 8)])  # a shared prefix, cached at once
    a.free("x")
    hit = a.allocate("y", 14, content=[("S", 0, 8), ("Q", 0, 6)], hold_back=True)
    assert hit.matched_tokens == 8
    assert a.publishes_apart("y")  # S's node has no child starting with Q's first block
    a.allocate("z", 14, content=[("S", 0, 8), ("Q", 0, 6)], hold_back=True)
    a.publish("z", 14)
    assert not a.publishes_apart("y")  # z cached Q's first block under S


def test_kinds_without_a_radix_index_never_say_apart():
    for kind in ("paged", "paged_hash"):
        a = make_allocator(kind, pool_bytes=64 * B, kv_bytes_per_token=1, block_size=B)
        a.allocate("x", 10, content=[("P", 0, 10)], hold_back=True)
        assert not a.publishes_apart("x")

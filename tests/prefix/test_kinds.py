"""The prefix-cache kinds are the paged core composed with an index (no hook overridden),
registered by ``sim.prefix``; invariant failures are ``InvariantError`` everywhere."""

from __future__ import annotations

import pytest
from tree_fixtures import t33_tree_unpinned

from sim.errors import ConfigError, InvariantError
from sim.memory import PagedAllocator, allocator_class, allocator_options, make_allocator
from sim.prefix.hash_index import HashIndex
from sim.prefix.kinds import HashPagedAllocator, RadixAllocator
from sim.prefix.radix_index import RadixIndex
from sim.prefix.sharing import FamilyLedger

KV = 10


@pytest.mark.parametrize(
    ("cls", "index"), [(RadixAllocator, RadixIndex), (HashPagedAllocator, HashIndex)]
)
def test_a_kind_is_a_constructor_only(cls, index):
    """Composition, not subclassing: the kind names itself and its options and builds the
    core with its index; every method is the core's (``PagedAllocator``) or the index's."""
    own = {name for name, v in vars(cls).items() if callable(v) or isinstance(v, property)}
    assert own == {"__init__"}
    assert {name for name in vars(cls) if not name.startswith("_")} == {"kind", "uses_content"}
    assert allocator_class(cls.kind) is cls
    a = make_allocator(cls.kind, pool_bytes=64 * 16 * KV, kv_bytes_per_token=KV)
    assert type(a.index) is index and a.pool is a.index.pool and a.uses_content


def test_options_are_the_constructors_as_before():
    assert allocator_options("radix") == {
        "block_size": 16,
        "tail_policy": "truncate",
        "eviction": "lru",
        "tau_low_blocks": 0,
        "target_free_blocks": 0,
        "content_priority": None,
    }
    assert allocator_options("paged_hash") == {  # current vLLM's rules (0.33.0)
        "block_size": 16,
        "null_block": True,
        "unhashed_to_head": True,
    }


@pytest.mark.parametrize(("blocks", "options"), [(0, {}), (1, {"null_block": True})])
def test_a_hashed_pool_too_small_for_a_block_is_a_config_error(blocks, options):
    """Was an InvariantError (a traceback in the CLI): the pool is the user's input."""
    with pytest.raises(ConfigError, match="pool_bytes: the pool holds") as exc:
        make_allocator(
            "paged_hash", pool_bytes=blocks * 16 * KV + 1, kv_bytes_per_token=KV, **options
        )
    assert exc.value.field == "pool_bytes"


def test_a_bad_null_block_flag_is_a_config_error():
    """Was a TypeError (``1 + "yes"``) before the flag was checked."""
    with pytest.raises(ConfigError, match="null_block: must be true or false"):
        make_allocator("paged_hash", pool_bytes=10, kv_bytes_per_token=1, null_block="yes")


def test_the_tree_reports_a_broken_invariant_as_invariant_error():
    tree, _, (n1, n2, n3, n4) = t33_tree_unpinned()
    tree.evictable_blocks += 1
    with pytest.raises(InvariantError, match="evictable_blocks"):
        tree.check_invariants()
    tree.evictable_blocks -= 1
    n4.block_ids.append(1)  # block 1 is N1's too
    with pytest.raises(InvariantError, match="block 1 owned by"):
        tree.check_invariants()


def test_the_ledger_reports_a_broken_invariant_as_invariant_error():
    ledger = FamilyLedger(4)
    ledger.new("a")
    ledger.map("a", [7])
    ledger.check({"a": [7]})
    ledger.excess_tokens = 4
    with pytest.raises(InvariantError, match="ledger: excess 4 != 0"):
        ledger.check({"a": [7]})
    with pytest.raises(InvariantError, match="live sequences differ"):
        ledger.check({})


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_an_allocator_names_its_kind_in_a_broken_index_invariant(kind):
    a = make_allocator(kind, pool_bytes=64 * 4 * KV, kv_bytes_per_token=KV, block_size=4)
    a.allocate("x", 9, content=[("s", 9)])
    a.check_invariants()
    a.index.ledger.excess_tokens += 4
    with pytest.raises(InvariantError, match=f"^{kind}: ledger: excess"):
        a.check_invariants()


def test_the_core_is_a_plain_paged_allocator():
    assert (
        issubclass(RadixAllocator, PagedAllocator) and RadixAllocator.__mro__[1] is PagedAllocator
    )
    assert HashPagedAllocator.__mro__[1] is PagedAllocator

"""The allocator factory: kinds by name, options checked, registration by class."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.errors import ConfigError, UnknownNameError
from sim.memory import (
    PagedAllocator,
    allocator_kinds,
    allocator_options,
    make_allocator,
    register_allocator,
)
from sim.memory import registry as reg


def test_builtin_kinds_are_registered():
    assert {"static", "contiguous", "buddy", "paged", "radix"} <= set(allocator_kinds())
    assert type(make_allocator("paged", pool_bytes=1024, kv_bytes_per_token=2)).kind == "paged"


def test_unknown_kind_lists_the_valid_kinds():
    with pytest.raises(UnknownNameError) as exc:
        make_allocator("pagd", pool_bytes=1024, kv_bytes_per_token=1)
    msg = str(exc.value)
    assert "unknown allocator kind 'pagd'" in msg
    assert "buddy, contiguous, paged" in msg


def test_unknown_option_names_the_valid_options():
    with pytest.raises(ConfigError) as exc:
        make_allocator("contiguous", pool_bytes=1024, kv_bytes_per_token=1, block_size=16)
    assert str(exc.value) == (
        "block_size: unknown option of kind 'contiguous'; valid: grow_in_place, growth, placement, "
        "reservation, window_tokens"
    )


def test_missing_required_option():
    with pytest.raises(ConfigError, match="max_tokens: required option of kind 'static'"):
        make_allocator("static", pool_bytes=1024, kv_bytes_per_token=1)


@pytest.mark.parametrize(
    ("kind", "options", "field"),
    [
        ("paged", {"block_size": 0}, "block_size"),
        ("paged", {"block_size": 1.5}, "block_size"),
        ("contiguous", {"placement": "worst_fit"}, "placement"),
        ("contiguous", {"growth": "triple"}, "growth"),
        ("contiguous", {"grow_in_place": "yes"}, "grow_in_place"),
        ("buddy", {"min_block_tokens": -4}, "min_block_tokens"),
        ("static", {"max_tokens": True}, "max_tokens"),
    ],
)
def test_bad_option_values_are_config_errors(kind, options, field):
    with pytest.raises(ConfigError) as exc:
        make_allocator(kind, pool_bytes=1024, kv_bytes_per_token=1, **options)
    assert exc.value.field == field


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "1GiB", None, True])
def test_pool_and_kv_sizes_must_be_positive_numbers(value):
    with pytest.raises(ConfigError, match="pool_bytes"):
        make_allocator("paged", pool_bytes=value, kv_bytes_per_token=1)
    with pytest.raises(ConfigError, match="kv_bytes_per_token"):
        make_allocator("paged", pool_bytes=1024, kv_bytes_per_token=value)


def test_options_come_from_the_constructor_signature():
    assert allocator_options("paged") == {"block_size": 16}
    assert allocator_options("contiguous") == {
        "growth": "double",
        "placement": "first_fit",
        "grow_in_place": False,
        "reservation": "none",
        "window_tokens": None,
    }


def test_register_a_class(monkeypatch):
    monkeypatch.setattr(reg, "_REGISTRY", dict(reg._REGISTRY))

    class Paged8(PagedAllocator):
        kind = "paged8"

    register_allocator("paged8", Paged8)
    a = make_allocator("paged8", pool_bytes=1024, kv_bytes_per_token=1)
    assert isinstance(a, Paged8)
    with pytest.raises(ValueError, match="already registered"):
        register_allocator("paged8", PagedAllocator)
    register_allocator("paged8", PagedAllocator, replace=True)
    assert type(make_allocator("paged8", pool_bytes=64, kv_bytes_per_token=1)) is PagedAllocator
    register_allocator("paged", PagedAllocator)  # the same class again: no conflict
    with pytest.raises(TypeError):
        register_allocator("bad", dict)


@pytest.mark.parametrize("entry", ["sim.memory.paged:PagedAllocator", "sim.nowhere:Ghost"])
def test_a_kind_is_a_class_never_a_module_path(monkeypatch, entry):
    """Kinds above memory register their classes from their own module (the import graph
    shows where each kind lives); a ``"module:Class"`` string is refused."""
    monkeypatch.setattr(reg, "_REGISTRY", dict(reg._REGISTRY))
    with pytest.raises(TypeError, match="must be an Allocator subclass"):
        register_allocator("lazy", entry)
    assert "lazy" not in allocator_kinds()
    assert all(isinstance(c, type) for c in reg._REGISTRY.values())


def test_the_prefix_kinds_are_the_classes_sim_prefix_registers():
    from sim.prefix.hash_index import HashIndex
    from sim.prefix.kinds import HashPagedAllocator, RadixAllocator
    from sim.prefix.radix_index import RadixIndex

    assert reg.allocator_class("radix") is RadixAllocator
    assert reg.allocator_class("paged_hash") is HashPagedAllocator
    common = dict(pool_bytes=64 * 16 * 100, kv_bytes_per_token=100)
    assert isinstance(make_allocator("radix", **common).index, RadixIndex)
    assert isinstance(make_allocator("paged_hash", **common).index, HashIndex)
    assert make_allocator("paged", **common).index is None


def test_a_fresh_interpreter_knows_every_kind_whatever_it_imports_first():
    """``import sim`` registers the prefix kinds, so ``sim.memory`` alone makes a radix."""
    code = (
        "from sim.memory import make_allocator, allocator_kinds; "
        "a = make_allocator('radix', pool_bytes=64 * 16, kv_bytes_per_token=1); "
        "print(a.kind, sorted(allocator_kinds()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1)[0] == "radix" and "'paged_hash'" in out.stdout


def test_sim_memory_loads_no_engine_no_torch():
    """At run time ``import sim.memory`` loads ``sim`` (which registers the prefix kinds
    through ``sim.prefix``) and nothing heavier; which module may import which is the
    import-graph test's job (tests/test_layers.py)."""
    code = (
        "import sys, sim.memory, sim.memory.replay; "
        "bad = [m for m in sys.modules if m.startswith(('torch', 'sim.engine',"
        " 'sim.sched', 'sim.cli', 'sim.run', 'sim.scenario', 'simpy'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_paged_prefix_caching_selects_the_cache_kind():
    """``paged`` + ``prefix_caching: hash`` is vLLM's hashed cache; ``radix`` the tree."""
    from sim.errors import ConfigError
    from sim.memory import make_allocator

    common = dict(pool_bytes=64 * 16 * 100, kv_bytes_per_token=100)
    assert make_allocator("paged", prefix_caching="hash", **common).kind == "paged_hash"
    assert make_allocator("paged", prefix_caching="radix", **common).kind == "radix"
    assert make_allocator("paged", prefix_caching="none", **common).kind == "paged"
    import pytest

    with pytest.raises(ConfigError, match="valid: none, hash, radix"):
        make_allocator("paged", prefix_caching="lru", **common)

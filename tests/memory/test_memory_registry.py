"""The allocator factory: kinds by name, options checked, lazy registration, layering."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.errors import ConfigError, KvsimError, UnknownNameError
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
        "block_size: unknown option of kind 'contiguous'; valid: grow_in_place, growth, placement"
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
    }


def test_register_a_class_and_a_lazy_path(monkeypatch):
    monkeypatch.setattr(reg, "_REGISTRY", dict(reg._REGISTRY))

    class Paged8(PagedAllocator):
        kind = "paged8"

    register_allocator("paged8", Paged8)
    a = make_allocator("paged8", pool_bytes=1024, kv_bytes_per_token=1)
    assert isinstance(a, Paged8)
    with pytest.raises(ValueError, match="already registered"):
        register_allocator("paged8", PagedAllocator)
    register_allocator("lazy-paged", "sim.memory.paged:PagedAllocator")
    assert type(make_allocator("lazy-paged", pool_bytes=64, kv_bytes_per_token=1)).__name__ == (
        "PagedAllocator"
    )
    register_allocator("paged", PagedAllocator)  # the class its lazy path names: no conflict
    with pytest.raises(ValueError, match="module:Class"):
        register_allocator("bad", "sim.memory.paged.PagedAllocator")
    with pytest.raises(TypeError):
        register_allocator("bad", dict)


def test_a_lazy_kind_whose_module_is_absent_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(reg, "_REGISTRY", dict(reg._REGISTRY))
    register_allocator("ghost", "sim.nowhere.ghost:GhostAllocator")
    with pytest.raises(KvsimError, match="'ghost' is registered at sim.nowhere.ghost"):
        make_allocator("ghost", pool_bytes=64, kv_bytes_per_token=1)


def test_sim_memory_imports_no_upper_layer_and_no_torch():
    code = (
        "import sys, sim.memory, sim.memory.replay; "
        "bad = [m for m in sys.modules if m.startswith(('torch', 'sim.prefix', 'sim.engine',"
        " 'sim.sched', 'sim.cli', 'simpy'))]; print(bad); sys.exit(1 if bad else 0)"
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

"""The allocator section's option types (``sim.scenario.schema._json_safe``): a type
pydantic describes is kept, any other accepts any value; the answer is the same whether
the type is looked up in the per-type cache or, unhashable, checked without it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from sim.scenario.schema import _describable, _json_safe


class _Opaque:
    """A plain class: pydantic has no schema for it."""


def test_a_described_type_is_kept_and_an_opaque_one_accepts_anything():
    assert _json_safe(int) is int
    assert _json_safe(dict | None) == dict | None
    assert _json_safe(_Opaque) is Any
    assert _json_safe(_Opaque) is Any  # again, from the cache
    assert _describable.cache_info().hits >= 1


def test_a_type_equal_to_a_cached_one_is_kept_as_it_is():
    """``Literal['y', 'x'] == Literal['x', 'y']``: the cache answers yes for both, and each
    kind keeps its own (its choices' order in the schema and in messages)."""
    first, second = Literal["x", "y"], Literal["y", "x"]
    assert first == second
    assert _json_safe(first) is first
    assert _json_safe(second) is second


def test_an_unhashable_annotation_is_checked_without_the_cache():
    unhashable = Annotated[int, {"not": "hashable"}]
    try:
        hash(unhashable)
    except TypeError:
        pass
    else:  # pragma: no cover  (a typing version that hashes it: the cached path answers)
        assert _json_safe(unhashable) == unhashable
        return
    assert _json_safe(unhashable) == unhashable
    assert _json_safe(Annotated[_Opaque, {"x": 1}]) is Any

"""The allocator section's option types (``sim.scenario.schema._json_safe``): a type
pydantic describes is kept, any other accepts any value; the answer is the same whether
the type is looked up in the per-type cache or, unhashable, checked without it."""

from __future__ import annotations

from typing import Annotated, Any

from sim.scenario.schema import _described, _json_safe


class _Opaque:
    """A plain class: pydantic has no schema for it."""


def test_a_described_type_is_kept_and_an_opaque_one_accepts_anything():
    assert _json_safe(int) is int
    assert _json_safe(dict | None) == dict | None
    assert _json_safe(_Opaque) is Any
    assert _json_safe(_Opaque) is Any  # again, from the cache
    assert _described.cache_info().hits >= 1


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

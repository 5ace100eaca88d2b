"""``sim.lazy_numpy``: numpy imported on the first attribute read, then bound in place.

numpy is imported in this process already (other tests), so what is checked is the
binding: the placeholder hands out numpy's attributes and replaces itself in the
namespace it was given; that ``kvsim validate`` never imports numpy is checked in a fresh
interpreter (tests/cli/test_startup_imports.py)."""

from __future__ import annotations

import numpy

from sim.cost.linear import GemmTable
from sim.lazy_numpy import numpy_on_first_use


def test_the_first_attribute_read_puts_numpy_in_the_placeholders_place():
    ns: dict = {}
    ns["np"] = placeholder = numpy_on_first_use(ns)
    assert ns["np"] is placeholder and "numpy" in repr(placeholder)
    assert placeholder.float64 is numpy.float64
    assert ns["np"] is numpy  # later reads are plain global look-ups of numpy itself
    assert placeholder.asarray([1, 2]).tolist() == [1, 2]  # a stale reference still works
    assert ns["np"] is numpy


def test_a_name_rebound_meanwhile_is_left_alone():
    ns: dict = {}
    placeholder = numpy_on_first_use(ns, "xp")
    ns["xp"] = "something else"
    assert placeholder.int64 is numpy.int64
    assert ns["xp"] == "something else"


def test_a_module_using_it_binds_numpy_on_first_use():
    import sim.workload.rng as rng

    rng.np.random  # noqa: B018  (the first read, if no test read it before)
    assert rng.np is numpy


def test_gemm_table_looks_up_without_arrays():
    """A look-up bisects the table's tuples (it once made numpy arrays on the first one):
    a loaded calibration holds no arrays, before or after pricing."""
    t = GemmTable(4096, 4096, (1, 64, 128), (10e-6, 12e-6, 20e-6))
    assert t.time_at(64) == 12e-6 and t.time_at(65) == 20e-6 and t.time_at(256) == 40e-6
    assert not any(isinstance(v, numpy.ndarray) for v in vars(t).values())
    assert t == GemmTable(4096, 4096, (1, 64, 128), (10e-6, 12e-6, 20e-6))  # fields only

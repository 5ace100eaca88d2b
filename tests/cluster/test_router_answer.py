"""A router's answer is a node index in ``range(n_nodes)`` or None: -1 used to route to
the last node (Python's negative index), 3 of 3 nodes and 1.0 were an IndexError or
TypeError deep in the front; each is now one line naming the router and the range. Any
integer type but a bool is taken (a numpy index routes as the int)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

import sim.cluster.routers as router_registry
from sim.cluster.routers import Router, _Options, register
from sim.errors import KvsimError
from sim.run import run_scenario


class Fixed(Router):
    """Routes every request to ``ANSWER`` (a class attribute the tests set)."""

    kind = "fixed"
    ANSWER: object = 0

    class Options(_Options):
        kind: Literal["fixed"] = "fixed"

    def route(self, req, view):
        return Fixed.ANSWER


@pytest.fixture
def fixed():
    register(Fixed)
    yield Fixed
    del router_registry._REGISTRY["fixed"]
    Fixed.ANSWER = 0


def _scenario(router: str) -> dict:
    return {
        "schema_version": 1,
        "model": "llama-3.1-8b",
        "hardware": {"accelerator": "h100-sxm-80gb"},
        "cluster": {"nodes": [{"count": 3}], "router": {"kind": router}},
        "workload": {"kind": "requests", "requests": [
            {"count": 2, "at_s": 0.0, "prompt_tokens": 64, "output_tokens": 4}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "shown"),
    [(-1, "int -1"), (3, "int 3"), (1.0, "float 1.0"), (True, "bool True"), ("0", "str '0'"),
     (np.int64(-1), f"int64 {np.int64(-1)!r}")],
)  # fmt: skip
def test_an_answer_out_of_range_or_not_an_index_is_one_line(fixed, answer, shown):
    fixed.ANSWER = answer
    with pytest.raises(KvsimError) as exc:
        run_scenario(_scenario("fixed"))
    assert str(exc.value) == (
        f"router 'fixed' (test_router_answer.Fixed) returned {shown} for request 0; it must "
        "return a node index in 0..2 (an int) or None to refuse the request "
        "(docs/cluster.md, routers)"
    )


@pytest.mark.parametrize("answer", [2, np.int64(2)])
def test_an_index_in_range_routes_there(fixed, answer):
    fixed.ANSWER = answer
    r = run_scenario(_scenario("fixed"))
    assert r.requests.node.tolist() == [2, 2]
    assert [n["requests_completed"] for n in r.summary["nodes"]] == [0, 0, 2]

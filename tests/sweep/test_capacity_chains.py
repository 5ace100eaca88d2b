"""The capacity search's replications run as chains (``Executor.run_chains``): the answer
and its JSON do not depend on which probe finishes first, and equal the round-by-round
search (every replication's probe of a round judged before the next round starts) that
the chains replaced."""

from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import KvsimError
from sim.sweep import capacity as cap
from sim.sweep import find_capacities, find_capacity, parse_slo
from sim.sweep.executor import Executor, LocalExecutor
from sim.sweep.task import warm_up

SLO = [parse_slo("ttft_p99_s=0.5")]
MEM = "hardware.accelerator_overrides.memory_bytes"


class _Shuffled(Executor):
    """Finishes the ready tasks in an order drawn from ``rng``: any interleaving of the
    chains a pool of workers could produce; its workers answer with ``probe`` instead of
    running the scenario."""

    def __init__(self, rng: random.Random, probe) -> None:
        self.rng, self.probe = rng, probe

    def run_chains(self, fn, tasks, follow):
        ready = list(tasks)
        while ready:
            task = ready.pop(self.rng.randrange(len(ready)))
            result = self.probe(task)
            nxt = follow(task, result)
            if nxt is not None:
                ready.append(nxt)
            yield task, result


def _rounds(plan: cap._Plan, fn) -> dict:
    """The search as it ran before the chains: one round at a time, every replication's
    probe of the round judged before the next round starts."""
    while not all(s.done for s in plan.searches):
        tasks = [t for i in range(len(plan.searches)) if (t := plan.task(i, 0)) is not None]
        for task in tasks:
            plan.record(fn(task))
    return plan.result().to_dict()


@pytest.fixture
def template(tiny):
    """The tiny scenario's plan, and one real probe of it to copy."""
    plan = cap._Plan(tiny, SLO, "concurrency", {}, 3, None, 10, 0.2)
    return plan, cap.run_probe(plan.task(0, 0))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(passes=st.lists(st.sets(st.integers(1, 40)), min_size=3, max_size=3),
       order_seed=st.integers(0, 2**32 - 1), max_points=st.integers(2, 12))  # fmt: skip
def test_chains_in_any_order_give_the_round_by_round_answer(template, passes, order_seed, max_points):
    """Any pass/fail pattern (not even monotone) per replication, any finishing order."""
    base, probe = template

    def fake(task: dict) -> dict:
        out = copy.deepcopy(probe)
        out.update(load=task["load"], replication=task["replication"], seed=task["seed"],
                   passed=task["load"] in passes[task["replication"]])  # fmt: skip
        return out

    def fresh() -> cap._Plan:
        plan = copy.copy(base)
        plan.max_points = max_points
        plan.points = []
        plan.searches = [cap._new_search("concurrency", base.searches[0].next) for _ in range(3)]
        return plan

    want = _rounds(fresh(), fake)
    plan = fresh()
    got = cap._run_plans(_Shuffled(random.Random(order_seed), fake), [plan], None)[0].to_dict()
    assert json.dumps(got, default=str) == json.dumps(want, default=str)
    assert [p["load"] for p in got["points"]] == [p["load"] for p in want["points"]]


def test_a_pool_of_two_gives_the_inline_answer_byte_for_byte(tiny):
    inline = find_capacity(tiny, SLO, replications=3, executor="inline").to_dict()
    pool = find_capacity(tiny, SLO, replications=3, executor="local", workers=2).to_dict()
    assert json.dumps(pool, default=str) == json.dumps(inline, default=str)
    assert len(pool["points"]) >= 3 * 2  # each replication bracketed and bisected


def test_vary_runs_its_configurations_together_with_each_ones_own_answer(tiny):
    values = [18e9, 20e9]
    comp = find_capacities(tiny, SLO, (MEM, values), replications=2, executor="local", workers=2)
    for value, got in zip(values, comp.results, strict=True):
        alone = find_capacity(tiny, SLO, sets={MEM: value}, replications=2, executor="inline")
        assert json.dumps(got.to_dict(), default=str) == json.dumps(alone.to_dict(), default=str)


def test_find_capacities_refuses_an_unknown_option(tiny):
    with pytest.raises(TypeError, match="max_pionts"):
        find_capacities(tiny, SLO, (MEM, [18e9]), executor="inline", max_pionts=3)


def test_the_workers_are_warmed_once_the_scenario_checks_out(tiny):
    calls = []

    class Spy(Executor):
        def warm(self, fn, arg):
            calls.append((fn, arg))

    with pytest.raises(KvsimError):
        find_capacity(tiny, SLO, sets={"allocator.kind": "no_such_kind"}, executor=Spy())
    assert calls == []  # a scenario that fails its checks starts no worker
    find_capacity(tiny, SLO, replications=1, max_points=2, executor=Spy())
    assert calls == [(warm_up, None)]


def test_a_local_pool_starts_every_worker_when_warmed():
    with LocalExecutor(2) as ex:
        assert len(ex._pool._processes) == 0  # a pool starts its workers on demand
        ex.warm(warm_up, None)
        ex.warm(warm_up, None)  # once per executor
        assert len(ex._pool._processes) == 2
        got = [r for _, r in ex.run(abs, [-1, -2])]
    assert sorted(got) == [1, 2]


@pytest.mark.parametrize("kind", ["inline", "local", "dask"])
def test_every_executor_runs_each_chain_to_its_end(kind):
    """Chains 3 -> 2 -> 1 and 5 -> 4 -> ... -> 1 (``follow``: the task less one, until 1):
    every task runs once, each chain's tasks in order."""
    from sim.sweep import make_executor

    seen = []

    def follow(task, result):
        seen.append(task)
        return task - 1 if task > 1 else None

    with make_executor(kind, 2) as ex:
        got = [(t, r) for t, r in ex.run_chains(abs, [3, 5], follow)]
    assert sorted(got) == sorted((t, t) for t in (3, 2, 1, 5, 4, 3, 2, 1))
    assert [t for t, _ in got] == seen  # yielded as judged
    assert seen.index(5) < seen.index(4)  # a chain's next task runs after its last one

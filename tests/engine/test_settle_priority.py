"""The node's settling relies on simpy's event heap layout (time, priority, id, event) and
on events scheduled at a priority after URGENT and NORMAL; pinned here so a simpy upgrade
that changes them fails loudly."""

import simpy

from sim.engine.node import SETTLE_PRIORITY, _busy_now, _settle


def test_the_heap_holds_time_priority_id_event():
    env = simpy.Environment()
    ev = env.timeout(1.5)
    t, prio, _eid, event = env._queue[0]
    assert (t, prio, event) == (1.5, simpy.events.NORMAL, ev)
    assert simpy.events.URGENT < simpy.events.NORMAL < SETTLE_PRIORITY


def test_settling_runs_after_every_other_event_of_the_same_time():
    env = simpy.Environment()
    order = []

    def settler(name):
        while _busy_now(env, env.now):
            yield _settle(env)
        order.append(name)

    def worker():
        for i in range(3):
            order.append(f"work{i}")
            yield env.timeout(0)

    env.process(settler("a"))
    env.process(settler("b"))
    env.process(worker())
    env.run()
    assert order[:3] == ["work0", "work1", "work2"]
    assert sorted(order[3:]) == ["a", "b"]  # both settle; neither waits on the other

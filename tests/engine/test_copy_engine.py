"""Copy engines: exact SimPy timelines for fifo and fair links, both directions, TP, NVMe."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.copy_engine import Channel, CopyEngines, Transfer
from sim.errors import UnknownNameError
from sim.profiles.registry import load_accelerator, load_node

GB = 1e9


def _run(env, ops):
    """Start each (delay, label, make_event) and log start/done with the simulated time."""
    log = []

    def proc(delay, label, make):
        if delay:
            yield env.timeout(delay)
        log.append((env.now, "start", label))
        result = yield make()
        log.append((env.now, "done", label))
        return result

    procs = [env.process(proc(*op)) for op in ops]
    env.run(until=env.all_of(procs))
    return log, [p.value for p in procs]


def test_e24_copy_out_on_eight_links():
    env = simpy.Environment()
    ce = CopyEngines(env, 8, 64e9)
    log, (value,) = _run(env, [(0, 1, lambda: ce.copy_out(32768 * 40960))])
    assert log == [(0.0, "start", 1), (0.02097152, "done", 1)]
    assert value == Transfer(0.0, 0.02097152, 32768 * 40960)
    assert ce.bytes_moved() == {"d2h": 8 * 32768 * 40960, "h2d": 0.0, "nvme": 0.0}


def test_fifo_serves_in_order_and_directions_run_concurrently():
    env = simpy.Environment()
    ce = CopyEngines(env, 1, 1 * GB)
    log, _ = _run(
        env,
        [
            (0, "out1", lambda: ce.copy_out(2 * GB)),
            (0, "out2", lambda: ce.copy_out(1 * GB)),
            (0, "in", lambda: ce.copy_in(1 * GB)),
        ],
    )
    assert log == [
        (0.0, "start", "out1"),
        (0.0, "start", "out2"),
        (0.0, "start", "in"),
        (1.0, "done", "in"),  # h2d is its own engine: not behind the copy-outs
        (2.0, "done", "out1"),
        (3.0, "done", "out2"),  # waits for out1: one DMA queue per direction
    ]


def test_fair_shares_the_link():
    env = simpy.Environment()
    ce = CopyEngines(env, 1, 1 * GB, sharing="fair")
    log, values = _run(
        env,
        [
            (0, "a", lambda: ce.copy_out(1 * GB)),
            (0.5, "b", lambda: ce.copy_out(1 * GB)),
            (0, "c", lambda: ce.copy_in(1 * GB)),
        ],
    )
    assert log == [
        (0.0, "start", "a"),
        (0.0, "start", "c"),
        (0.5, "start", "b"),
        (1.0, "done", "c"),
        (1.5, "done", "a"),  # 0.5 GB alone, then 0.5 GB at half rate
        (2.0, "done", "b"),  # 0.5 GB at half rate, then 0.5 GB alone
    ]
    assert values[1] == Transfer(0.5, 2.0, 1 * GB)


def test_fair_equal_transfers_finish_together():
    env = simpy.Environment()
    ch = Channel(env, 1 * GB, sharing="fair")
    log, _ = _run(env, [(0, i, lambda: ch.transfer(1 * GB)) for i in range(3)])
    assert [t for t, kind, _ in log if kind == "done"] == [3.0, 3.0, 3.0]
    assert ch.bytes_moved == 3 * GB and ch.transfers == 3 and ch.in_flight == 0


def test_per_transfer_overhead_fifo_vs_fair():
    env = simpy.Environment()
    fifo = Channel(env, 1 * GB, overhead_s=0.5)
    log, _ = _run(env, [(0, i, lambda: fifo.transfer(1 * GB)) for i in (1, 2)])
    assert [t for t, kind, _ in log if kind == "done"] == [1.5, 3.0]
    env = simpy.Environment()
    fair = Channel(env, 1 * GB, overhead_s=0.5, sharing="fair")
    log, values = _run(env, [(0, i, lambda: fair.transfer(1 * GB)) for i in (1, 2)])
    assert [t for t, kind, _ in log if kind == "done"] == [2.5, 2.5]
    assert values[0].start_s == 0.5  # the overhead is latency, not link time


def test_tp_group_waits_for_its_slowest_rank():
    env = simpy.Environment()
    ce = CopyEngines(env, 4, 1 * GB)
    log, _ = _run(
        env,
        [
            (0, "gpu3 busy", lambda: ce.copy_out(1 * GB, gpus=[3])),
            (0, "group", lambda: ce.copy_out(1 * GB)),
            (0, "pair", lambda: ce.copy_out(1 * GB, gpus=[0, 1])),
        ],
    )
    assert [(t, lab) for t, kind, lab in log if kind == "done"] == [
        (1.0, "gpu3 busy"),
        (2.0, "group"),
        (2.0, "pair"),  # behind the group on GPUs 0 and 1
    ]
    with pytest.raises(ValueError, match="subset"):
        ce.copy_out(1, gpus=[4])


def test_nvme_staged_through_host_or_gds():
    env = simpy.Environment()
    ce = CopyEngines(env, 2, 1 * GB, nvme_bw_bytes_per_s=4 * GB)
    log, values = _run(
        env,
        [
            (0, "out", lambda: ce.to_nvme(1 * GB, 8 * GB)),
            (0, "demote", lambda: ce.host_to_nvme(4 * GB)),
        ],
    )
    # the drives take the demotion first (0-1 s), the staged write waits for them
    assert [(t, lab) for t, kind, lab in log if kind == "done"] == [(1.0, "demote"), (3.0, "out")]
    assert values[0] == Transfer(0.0, 3.0, 8 * GB)
    env = simpy.Environment()
    ce = CopyEngines(env, 2, 1 * GB, nvme_bw_bytes_per_s=4 * GB)
    log, _ = _run(env, [(0, "in", lambda: ce.from_nvme(1 * GB, 8 * GB))])
    assert log[-1] == (3.0, "done", "in")  # drives 2 s, then the links 1 s
    env = simpy.Environment()
    gds = CopyEngines(env, 2, 1 * GB, nvme_bw_bytes_per_s=4 * GB, gds=True)
    log, _ = _run(env, [(0, "in", lambda: gds.from_nvme(1 * GB, 8 * GB))])
    assert log[-1] == (2.0, "done", "in")  # both legs at once: the drives set the time
    assert gds.bytes_moved() == {"d2h": 0.0, "h2d": 2 * GB, "nvme": 8 * GB}


def test_e26_one_drive():
    env = simpy.Environment()
    ce = CopyEngines(env, 1, 1e15, nvme_bw_bytes_per_s=7e9)
    log, _ = _run(env, [(0, 1, lambda: ce.nvme_to_host(5e9))])
    assert log[-1][0] == pytest.approx(5 / 7)


def test_profiles_and_bad_names():
    env = simpy.Environment()
    ce = CopyEngines.from_profiles(env, load_accelerator("h100-sxm-80gb"), 8, load_node("dgx-h100"))
    assert ce.d2h[0].bw_bytes_per_s == 54e9  # effective DMA, not the 64 GB/s theory
    assert ce.drives.bw_bytes_per_s == 8 * 7e9
    cal = CopyEngines.from_profiles(
        env, load_accelerator("h100-sxm-80gb"), 8, link_bw_bytes_per_s=64e9
    )
    assert cal.h2d[7].bw_bytes_per_s == 64e9 and cal.drives is None
    with pytest.raises(ValueError, match="no NVMe"):
        cal.to_nvme(1, 1)
    with pytest.raises(UnknownNameError, match="valid: fair, fifo"):
        Channel(env, 1.0, sharing="round_robin")


def test_fair_does_not_spin_late_in_a_long_run():
    env = simpy.Environment(initial_time=1e6)
    ch = Channel(env, 64e9, sharing="fair")
    log, _ = _run(env, [(i * 1e-6, i, lambda i=i: ch.transfer(1e6 * (1 + i))) for i in range(4)])
    assert len(log) == 8 and ch.in_flight == 0
    assert max(t for t, _, _ in log) == pytest.approx(1e6 + 1e7 / 64e9, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), min_size=1, max_size=8),
    st.sampled_from(["fifo", "fair"]),
)
def test_both_sharings_conserve_work(jobs, sharing):
    """Work-conserving: the last byte leaves when the busy link has moved them all."""
    env = simpy.Environment()
    ch = Channel(env, 10.0, sharing=sharing)
    log, values = _run(
        env, [(a / 10, i, lambda b=b: ch.transfer(b)) for i, (a, b) in enumerate(jobs)]
    )
    busy_until = 0.0
    for a, b in sorted(jobs):
        busy_until = max(busy_until, a / 10) + b / 10
    assert max(v.end_s for v in values) == pytest.approx(busy_until, abs=1e-9)
    assert ch.bytes_moved == sum(b for _, b in jobs)
    for (a, b), v in zip(jobs, values, strict=True):
        assert v.end_s - v.start_s >= b / 10 - 1e-9  # never faster than the wire
        assert v.start_s >= a / 10 - 1e-12

"""Workloads: distributions, named streams, arrivals, traces, agent plans, forks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simpy
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.run import build, run_scenario
from sim.workload import Streams
from sim.workload.agent import sample_plan
from sim.workload.config import AgentWorkload, ChatWorkload
from sim.workload.distributions import Dist
from sim.workload.traces import cycle_times, read_columns, time_column, token_column

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT / "workloads/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
DIST = TypeAdapter(Dist)


def test_a_bare_number_is_a_constant_and_kinds_are_checked():
    assert DIST.validate_python(7).sample(np.random.default_rng(0), 3).tolist() == [7, 7, 7]
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        DIST.validate_python({"kind": "zipf", "a": 2})
    with pytest.raises(ValidationError, match="min"):
        DIST.validate_python({"kind": "uniform", "low": 1, "high": 2, "min": 3, "max": 1})


def test_sampling_is_numpy_with_the_given_generator_and_clipped():
    d = DIST.validate_python({"kind": "lognormal", "median": 100, "sigma": 1.0, "max": 150})
    got = d.sample(np.random.default_rng(5), 4)
    ref = np.minimum(np.random.default_rng(5).lognormal(np.log(100), 1.0, 4), 150)
    assert got.tolist() == ref.tolist()
    tokens = DIST.validate_python({"kind": "normal", "mean": 0, "std": 3}).sample_tokens(
        np.random.default_rng(1), 100
    )
    assert tokens.min() >= 1 and tokens.dtype == np.int64
    e = DIST.validate_python({"kind": "empirical", "values": [1, 2], "weights": [0, 1]})
    assert set(e.sample(np.random.default_rng(0), 20).tolist()) == {2.0}


def test_named_streams_are_independent_and_reproducible():
    a, b = Streams(3), Streams(3)
    x = a("arrivals").random(3)
    b("tokens").random(100)  # drawing from another stream does not move this one
    assert b("arrivals").random(3).tolist() == x.tolist()
    assert Streams(4)("arrivals").random(3).tolist() != x.tolist()


@pytest.mark.parametrize(
    "cell, shown",
    [("-5", "-5"), ("0", "0"), ("12.5", "12.5"), ("inf", "inf"), ("1e30", "1e30"),
     (" 0 ", "0"), ("10000001", "10000001"), ("9" * 30, "9" * 30),
     ("9" * 100_000, "9" * 37 + "..."), ("abc", "'abc'"), ("x" * 50, "'" + "x" * 36 + "..."),
     ("", "an empty cell"), ("  ", "an empty cell")],
)  # fmt: skip
def test_a_token_cell_that_is_not_a_whole_number_in_range_is_refused_at_its_line(
    tmp_path, cell, shown
):
    """Cells used to be rounded and raised to 1 silently (0, -5, 12.5), and a huge one
    overflowed int64 into a negative span deep in the run. A number is shown as written,
    other text quoted (at most 40 characters)."""
    path = tmp_path / "t.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,{cell},5\n2,7,5\n")
    cols = read_columns(path, ["ContextTokens", "GeneratedTokens"])
    with pytest.raises(ConfigError) as exc:
        token_column(path, cols["ContextTokens"], "ContextTokens")
    assert str(exc.value) == (f"{path}: data row 2: ContextTokens: expected a whole number of tokens "
                              f"in [1, 10,000,000], got {shown}")  # fmt: skip
    assert token_column(path, cols["GeneratedTokens"], "GeneratedTokens").tolist() == [5, 5, 5]
    path.write_text("ContextTokens\n10\n10000000\n1\n")
    cols = read_columns(path, ["ContextTokens"])
    assert token_column(path, cols["ContextTokens"], "ContextTokens").tolist() == [10, 10**7, 1]


def test_a_csv_the_reader_refuses_is_one_line_naming_the_file(tmp_path):
    """The csv module's bounds and shapes, each one line naming the file: a cell past its
    field limit (131,072 characters: bounded memory per cell), a row with more cells than
    the header, an empty file; blank lines are skipped (rows are counted, not lines) and a
    short row has empty cells at its end."""
    path = tmp_path / "t.csv"
    path.write_text("ContextTokens,GeneratedTokens\n10,5\n" + "9" * 200_000 + ",5\n")
    with pytest.raises(ConfigError) as exc:
        read_columns(path, ["ContextTokens"])
    assert str(exc.value) == f"{path}: cannot read trace: line 3: field larger than field limit (131072)"
    path.write_text("ContextTokens,GeneratedTokens\n10,5\n11,5,7\n")
    with pytest.raises(ConfigError) as exc:
        read_columns(path, ["ContextTokens"])
    assert str(exc.value) == f"{path}: cannot read trace: data row 2 has 3 cells, the header 2"
    path.write_text("")
    with pytest.raises(ConfigError) as exc:
        read_columns(path, ["ContextTokens"])
    assert str(exc.value) == f"{path}: cannot read trace: the file is empty"
    path.write_text("\nContextTokens,GeneratedTokens\n\n10,5\n   \n11\n")
    cols = read_columns(path, ["ContextTokens", "GeneratedTokens"])
    assert token_column(path, cols["ContextTokens"], "ContextTokens").tolist() == [10, 11]
    with pytest.raises(ConfigError) as exc:
        token_column(path, cols["GeneratedTokens"], "GeneratedTokens")
    assert str(exc.value).endswith("data row 2: GeneratedTokens: expected a whole number of "
                                   "tokens in [1, 10,000,000], got an empty cell")  # fmt: skip


@pytest.mark.parametrize("name", ["conv", "code"])
def test_trace_times_are_pandas_to_the_bit(name):
    """The Azure traces' date-times, parsed by numpy (ISO 8601, to the nanosecond) into
    whole seconds plus the rest, equal pandas' ``to_datetime`` and ``total_seconds`` (the
    reader before, whose figures the goldens hold) bit for bit; another form of date-time
    still goes to pandas."""
    import pandas as pd

    path = AZURE.with_name(f"AzureLLMInferenceTrace_{name}.csv")
    t = time_column(path, read_columns(path, ["TIMESTAMP"])["TIMESTAMP"], "TIMESTAMP")
    stamps = pd.to_datetime(pd.read_csv(path).TIMESTAMP, format="mixed")
    assert np.array_equal(t, (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy())
    other = np.array(["16/11/2023 18:15:46", "16/11/2023 18:15:47.5"], dtype=object)
    assert time_column(path, other, "TIMESTAMP").tolist() == [0.0, 1.5]
    with pytest.raises(ConfigError, match="is neither seconds nor date-times"):
        time_column(path, np.array(["2023-11-16 18:15:46", "later"], dtype=object), "TIMESTAMP")


def test_azure_trace_columns():
    cols = read_columns(AZURE, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    t = time_column(AZURE, cols["TIMESTAMP"], "TIMESTAMP")
    assert len(t) == 19366 and t[0] == 0.0 and (np.diff(t) >= 0).all()
    assert t[1] == pytest.approx(4.3145790, abs=1e-6)  # 18:15:50.995169 - 18:15:46.680590
    prompt = token_column(AZURE, cols["ContextTokens"], "ContextTokens")
    assert prompt[:4].tolist() == [374, 396, 879, 91]
    assert cycle_times(np.array([0.0, 1.0, 3.0]), 7).tolist() == [0, 1, 3, 4.5, 5.5, 7.5, 9]
    with pytest.raises(ConfigError, match="no column 'Nope'"):
        read_columns(AZURE, ["Nope"])
    with pytest.raises(ConfigError, match="trace file not found"):
        read_columns(AZURE.with_name("missing.csv"), ["x"])


def _chat(**over):
    base = {
        "kind": "chat",
        "num_requests": 6,
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "lengths": {"kind": "trace", "path": str(AZURE)},
    }
    base.update(over)
    return ChatWorkload.model_validate(base)


def test_chat_uses_trace_lengths_in_order_and_poisson_arrivals():
    res = run_scenario(
        str(ROOT / "workloads/chat_azure.yaml"),
        **{"workload.num_requests": 6, "engine.check_invariants": True},
    )
    req = res.requests
    assert req.prompt_tokens.tolist() == [374, 396, 879, 91, 91, 381]
    assert req.max_output_tokens.tolist()[:4] == [44, 109, 55, 16]
    gaps = np.random.default_rng([1, _key("arrivals")]).exponential(1 / 4.0, 6)
    assert req.arrival_s.tolist() == pytest.approx(np.cumsum(gaps).tolist(), rel=1e-12)


def _key(name):
    from sim.workload.rng import stream_key

    return stream_key(name)


def test_trace_arrivals_replay_the_timestamps():
    res = run_scenario(
        str(ROOT / "workloads/chat_azure.yaml"),
        **{"workload.num_requests": 4, "workload.arrival": {"kind": "trace", "time_scale": 0.5}},
    )
    assert res.requests.arrival_s.tolist() == pytest.approx(
        [0.0, 2.1572895, 2.2709385, 2.3552135], abs=1e-6
    )  # (t - t0) x 0.5


def test_closed_loop_never_exceeds_its_agents_and_starts_each_trajectory_once():
    over = {
        "workload.num_trajectories": 9,
        "workload.arrival.concurrency": 3,
        "workload.arrival.stagger_s": 0.0,
        "workload.fork": None,
        "workload.turns": 2,
        "hardware.kv_pool_bytes_per_gpu": 4e9,
    }
    res = run_scenario(str(ROOT / "workloads/agent_swarm.yaml"), **over)
    traj = res.trajectories
    assert sorted(traj.traj_id) == list(range(9)) and (traj.status == "completed").all()
    events = sorted(
        [(t, 1) for t in traj.start_s] + [(t, -1) for t in traj.end_s], key=lambda e: (e[0], e[1])
    )
    live = np.cumsum([d for _, d in events])
    assert live.max() == 3
    assert (traj.turns == 2).all() and (traj.requests == 2).all()


def test_agent_plans_are_drawn_at_the_start_from_their_streams():
    cfg = AgentWorkload.model_validate(
        {
            "kind": "agent",
            "num_trajectories": 2,
            "turns": 5,
            "arrival": {"kind": "closed_loop", "concurrency": 1},
            "fork": {"probability": 0.5, "branches": 3, "branch_turns": 2},
        }
    )

    class Ctx:
        streams = Streams(11)

    a, b = sample_plan(cfg, Ctx()), sample_plan(cfg, Ctx())
    Ctx.streams = Streams(11)
    again = sample_plan(cfg, Ctx())
    assert a == again and a != b
    assert len(a.turns) == 5 and a.turns[0].pause_s == 0.0 and a.turns[0].input_tokens == 256
    for t, fork in a.forks.items():
        assert 0 <= t < 4 and len(fork.branches) == 3
        assert all(len(br) == 2 for br in fork.branches) and 0 <= fork.winner < 3


def _fork_run(mode, kind="paged"):
    over = {
        "workload.num_trajectories": 2,
        "workload.arrival.concurrency": 2,
        "workload.turns": 3,
        "workload.fork": {"probability": 1.0, "branches": 3, "branch_turns": 2, "mode": mode},
        "allocator.kind": kind,
        "hardware.kv_pool_bytes_per_gpu": 4e9,
        "engine.check_invariants": True,
    }
    return run_scenario(str(ROOT / "workloads/agent_swarm.yaml"), **over)


def test_join_waits_for_every_branch_and_continues_from_one():
    res = _fork_run("join")
    traj, req = res.trajectories, res.requests
    # 3 main turns, forks after turns 0 and 1, 3 branches x 2 turns each
    assert (traj.turns == 3).all() and (traj.branches == 6).all()
    assert (traj.requests == 3 + 2 * 6).all() and (traj.status == "completed").all()
    assert (req.status == "finished").all()
    for t in range(2):
        mine = req[req.traj_id == t]
        main = mine[mine.branch == 0].sort_values("turn")
        branches = mine[mine.branch > 0]
        # the main line's next turn starts after every branch of the fork ended
        first_fork_end = branches[branches.arrival_s < main.arrival_s.iloc[1]].finish_s.max()
        assert main.arrival_s.iloc[1] > first_fork_end
        # the continuation holds the chosen branch's whole context (copy-on-write)
        assert main.held_tokens.iloc[1] > main.prompt_tokens.iloc[0]
    assert (
        res.summary["bytes_copied"]
        == res.summary["cow_copies"] * 16 * res.summary["kv_bytes_per_token"]
    )


def test_prune_continues_from_the_first_branch_and_cancels_the_rest():
    res = _fork_run("prune", kind="radix")
    req = res.requests
    assert (res.trajectories.status == "completed").all()
    cancelled = req[req.status == "cancelled"]
    assert len(cancelled) > 0 and (cancelled.branch > 0).all()
    assert res.summary["cancelled"] == len(cancelled)


def test_requests_workload_orders_by_time_and_shares_a_prefix():
    sim = build(
        str(ROOT / "workloads/seed_chunked_prefill.yaml"),
        **{
            "workload.requests": [
                {
                    "count": 2,
                    "at_s": 1.0,
                    "interval_s": 0.5,
                    "prompt_tokens": 64,
                    "output_tokens": 2,
                    "shared_prefix_tokens": 48,
                },
                {
                    "count": 1,
                    "at_s": 0.0,
                    "prompt_tokens": 64,
                    "output_tokens": 2,
                    "shared_prefix_tokens": 48,
                },
            ],
            "allocator.kind": "radix",
            "hardware.kv_pool_bytes_per_gpu": 8e9,
        },
    )
    res = sim.run()
    req = res.requests
    assert req.arrival_s.tolist() == [0.0, 1.0, 1.5]
    assert req.hit_tokens.tolist() == [0, 48, 48]  # whole blocks of the shared prefix
    assert res.summary["prefix_hit_rate"] == pytest.approx(96 / 192)
    assert isinstance(sim.env, simpy.Environment)

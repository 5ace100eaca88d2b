"""The routers (sim/cluster/routers.py) against a hand-set fake cluster view: every
decision below is computed by hand from the outstanding counts, KV use, prefix matches and
predicted TTFTs the fake reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from sim.cluster.routers import make_router, router_class, router_kinds
from sim.errors import ConfigError


@dataclass
class FakeView:
    """A ``ClusterView`` whose every answer the test sets by hand."""

    n_nodes: int
    load: list[int] = field(default_factory=list)
    kv: list[float] = field(default_factory=list)
    match: list[int] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    traj: dict[int, int] = field(default_factory=dict)
    run: list[int] = field(default_factory=list)
    ttft_calls: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = self.n_nodes
        self.load = self.load or [0] * n
        self.kv = self.kv or [0.0] * n
        self.match = self.match or [0] * n
        self.ttft = self.ttft or [0.0] * n

    def outstanding(self, node: int) -> int:
        return self.load[node]

    def kv_used_fraction(self, node: int) -> float:
        return self.kv[node]

    def match_tokens(self, req) -> list[int]:
        return list(self.match)

    def predicted_ttft_s(self, node: int, req, match_tokens: int) -> float:
        self.ttft_calls.append((node, match_tokens))
        return self.ttft[node]

    def trajectory_node(self, traj_id: int) -> int | None:
        return self.traj.get(traj_id)

    def running(self, node: int) -> int:
        return self.run[node] if self.run else 0


def req(prompt_tokens: int = 40_000, traj_id: int = 0):
    return SimpleNamespace(prompt_tokens=prompt_tokens, traj_id=traj_id)


def router(kind: str, n_nodes: int, **options):
    return make_router(router_class(kind).Options(**options), n_nodes)


def test_the_registered_kinds():
    assert router_kinds() == (
        "round_robin",
        "least_load",
        "prefix_affinity",
        "session_affinity",
        "ttft_estimate",
        "vllm_dp",
    )


def test_unknown_kind_names_the_valid_ones():
    with pytest.raises(ConfigError) as exc:
        router_class("random")
    assert exc.value.field == "cluster.router.kind"
    assert "unknown router kind 'random'; valid: round_robin, least_load" in str(exc.value)


# ----------------------------------------------------------------------- round_robin
def test_round_robin_takes_the_nodes_in_turn_whatever_the_view():
    r = router("round_robin", 3)
    view = FakeView(3, load=[9, 0, 0], match=[0, 0, 40_000])  # ignored
    assert [r.route(req(), view) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert not r.uses_directory


def test_round_robin_with_one_node():
    r = router("round_robin", 1)
    assert [r.route(req(), FakeView(1)) for _ in range(3)] == [0, 0, 0]


# ------------------------------------------------------------------------ least_load
def test_least_load_fewest_outstanding_then_kv_then_lowest_id():
    r = router("least_load", 4)
    assert r.route(req(), FakeView(4, load=[3, 1, 2, 1])) == 1  # tie 1/3 -> lowest id
    assert r.route(req(), FakeView(4, load=[0, 0, 0, 0])) == 0
    # equal loads: the lower KV use breaks the tie before the id
    assert r.route(req(), FakeView(4, load=[2, 1, 1, 1], kv=[0, 0.5, 0.4, 0.4])) == 2
    # load first: node 3 has the fewest requests even though its pool is the fullest
    assert r.route(req(), FakeView(4, load=[2, 2, 2, 1], kv=[0, 0, 0, 0.99])) == 3


def test_least_load_by_kv():
    r = router("least_load", 3, by="kv")
    assert r.route(req(), FakeView(3, load=[0, 5, 9], kv=[0.7, 0.2, 0.2])) == 1  # kv tie: load
    assert r.route(req(), FakeView(3, load=[5, 5, 0], kv=[0.1, 0.1, 0.1])) == 2
    assert r.route(req(), FakeView(3, load=[4, 4, 4], kv=[0.3, 0.3, 0.3])) == 0  # all tie


def test_least_load_by_must_be_queue_or_kv():
    with pytest.raises(ValidationError):
        router_class("least_load").Options(by="tokens")


# ------------------------------------------------------------------- prefix_affinity
def test_prefix_affinity_pure_affinity_takes_the_longest_match():
    r = router("prefix_affinity", 3, mu=1.0)
    assert r.uses_directory
    # mu = 1: the load does not count; 32,000 / 40,000 = 0.8 on node 1
    assert r.route(req(), FakeView(3, load=[0, 50, 0], match=[16_000, 32_000, 0])) == 1
    # no match anywhere: every score is 0 -> lowest id
    assert r.route(req(), FakeView(3, load=[7, 0, 0])) == 0


def test_prefix_affinity_f20_with_auto_l_max():
    """mu = 0.5, gamma = 1, L_max = max_j L_j = 8, S = 40,000:
    node 0: 0.5 * 0.8 - 0.5 * 8/8 = -0.1; node 1: 0.5 * 0.4 - 0.5 * 2/8 = 0.075;
    node 2: 0 - 0.5 * 0/8 = 0 -> node 1."""
    r = router("prefix_affinity", 3, mu=0.5)
    view = FakeView(3, load=[8, 2, 0], match=[32_000, 16_000, 0])
    assert r.route(req(), view) == 1
    # node 1 one request busier (L = 4): 0.2 - 0.25 = -0.05 < 0 -> the idle node 2
    view.load = [8, 4, 0]
    assert r.route(req(), view) == 2


def test_prefix_affinity_auto_l_max_all_idle_has_no_load_term():
    # l_max auto = max_j L_j = 0: the load term is 0, affinity alone decides (mu < 1)
    r = router("prefix_affinity", 2, mu=0.1)
    assert r.route(req(), FakeView(2, load=[0, 0], match=[0, 16])) == 1


def test_prefix_affinity_fixed_l_max_and_gamma():
    """mu = 0.5, l_max = 16, S = 40,000:
    gamma 1: node 0: 0.5 * 0.8 - 0.5 * 8/16 = 0.15; node 1: 0 - 0.5 * 1/16 = -0.03125 -> 0.
    gamma 2: node 0: 0.4 - 0.5 * 0.25 = 0.275 -> 0 as well; with auto (L_max = 8) and
    gamma 1 node 0 scores 0.4 - 0.5 = -0.1 and loses to node 1 (-0.0625)."""
    view = FakeView(2, load=[8, 1], match=[32_000, 0])
    assert router("prefix_affinity", 2, mu=0.5, l_max=16).route(req(), view) == 0
    assert router("prefix_affinity", 2, mu=0.5, l_max=16, gamma=2).route(req(), view) == 0
    assert router("prefix_affinity", 2, mu=0.5).route(req(), view) == 1
    # gamma 4 under auto: node 0: 0.4 - 0.5 = -0.1; node 1: -0.5 * (1/8)^4 = -0.000122 -> 1
    assert router("prefix_affinity", 2, mu=0.5, gamma=4).route(req(), view) == 1
    # a fixed l_max below the loads makes the penalty exceed 1: L/L_max = 8/2 = 4
    # node 0: 0.4 - 0.5 * 4 = -1.6; node 1: -0.5 * 0.5 = -0.25 -> 1
    assert router("prefix_affinity", 2, mu=0.5, l_max=2).route(req(), view) == 1


def test_prefix_affinity_mu_zero_is_least_load():
    r = router("prefix_affinity", 3, mu=0.0)
    assert r.route(req(), FakeView(3, load=[1, 0, 2], match=[40_000, 0, 40_000])) == 1


def test_prefix_affinity_mu_out_of_range():
    with pytest.raises(ValidationError):
        router_class("prefix_affinity").Options(mu=2)


# ------------------------------------------------------------------ session_affinity
def test_session_affinity_stays_until_overloaded():
    r = router("session_affinity", 3, overload_queue_depth=4)
    view = FakeView(3, load=[4, 0, 1], traj={7: 0})
    # home node 0 has 4 outstanding = the depth: stays
    assert r.route(req(traj_id=7), view) == 0
    view.load[0] = 5  # more than the depth: the least loaded node (1)
    assert r.route(req(traj_id=7), view) == 1
    # a trajectory with no home yet: least loaded, ties to the lowest id
    view.load = [2, 1, 1]
    assert r.route(req(traj_id=8), view) == 1
    # a request of no trajectory (traj_id -1) never has a home
    view.traj[-1] = 0
    assert r.route(req(traj_id=-1), view) == 1


def test_session_affinity_depth_zero_leaves_a_busy_home():
    r = router("session_affinity", 2, overload_queue_depth=0)
    assert r.route(req(traj_id=1), FakeView(2, load=[0, 3], traj={1: 1})) == 0
    assert r.route(req(traj_id=1), FakeView(2, load=[3, 0], traj={1: 0})) == 1
    assert r.route(req(traj_id=1), FakeView(2, load=[0, 0], traj={1: 1})) == 1


# --------------------------------------------------------------------- ttft_estimate
def test_ttft_estimate_takes_the_lowest_prediction_with_each_nodes_match():
    r = router("ttft_estimate", 3)
    assert r.uses_directory
    view = FakeView(3, match=[0, 32_000, 16], ttft=[0.9, 0.3, 0.3])
    assert r.route(req(), view) == 1  # tie 0.3 -> lowest id
    assert view.ttft_calls == [(0, 0), (1, 32_000), (2, 16)]
    view.ttft = [0.2, 0.3, 0.1]
    assert r.route(req(), view) == 2


def test_ttft_estimate_refuses_above_the_slo():
    r = router("ttft_estimate", 2, ttft_slo_s=0.5)
    assert r.route(req(), FakeView(2, ttft=[0.6, 0.5])) == 1  # 0.5 is not above 0.5
    assert r.route(req(), FakeView(2, ttft=[0.6, 0.7])) is None
    # no SLO: never refuses
    assert router("ttft_estimate", 2).route(req(), FakeView(2, ttft=[1e6, 2e6])) == 0


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "x"])
def test_l_max_is_auto_or_a_positive_count(bad):
    opts = router_class("prefix_affinity").Options
    assert opts(l_max=7).l_max == 7
    with pytest.raises(ValueError, match="l_max must be auto or an integer >= 1"):
        opts(l_max=bad)


def test_vllm_dp_weighs_a_waiting_request_four_times_a_running_one():
    """vLLM's DPLBAsyncMPClient: the lowest 4 x waiting + running, ties to the lowest rank."""
    r = router("vllm_dp", 3)
    # rank 0: 1 waiting + 2 running = 6; rank 1: 5 running = 5; rank 2: 2 waiting = 8
    assert r.route(req(), FakeView(3, load=[3, 5, 2], run=[2, 5, 0])) == 1
    # rank 1 with one more running: 6 = rank 0's 6, the tie goes to rank 0
    assert r.route(req(), FakeView(3, load=[3, 6, 2], run=[2, 6, 0])) == 0
    assert r.route(req(), FakeView(3)) == 0  # all idle: rank 0
    # outstanding counts requests still on their way (not yet running): they wait
    assert r.route(req(), FakeView(2, load=[1, 3], run=[0, 3])) == 1  # 4 vs 3

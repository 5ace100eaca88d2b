"""Disaggregated prefill and decode (sim/cluster/disagg.py, sim/run/disagg.py): a
hand-computed timeline of one request (prefill step, streamed or whole transfer, the
decode instance's first step and decodes, each time from the pricer and the link
formula), the transfer bytes per layer group, conditional disaggregation, a paused
agent's next turn on its decode instance, the summary keys, and bad input as one line."""

from __future__ import annotations

import copy

import pytest

from sim.cluster.config import TransferLink
from sim.cluster.disagg import link_hold_s, transfer_bytes
from sim.cost import StepWork
from sim.errors import ConfigError
from sim.metrics.schema import check_summary
from sim.profiles.registry import load_model
from sim.run import run_scenario
from sim.run.disagg import TTFT_PARTS
from sim.run.runner import build
from sim.sizing.groups import group_bytes

PROMPT, OUT = 2000, 3
#: llama-3.1-8b: 32 layers x (K + V) x 8 KV heads x 128 x 2 bytes (bf16) per token
BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2

ONE = {
    "name": "pd_timeline",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 4e9},
    "allocator": {"kind": "radix"},
    "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 8192},
    "engine": {"exact": True},
    "workload": {"kind": "requests", "requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": PROMPT, "output_tokens": OUT}]},
    "cluster": {"nodes": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode"}]},
}  # fmt: skip


def pd(link: dict, base: dict = ONE) -> dict:
    out = copy.deepcopy(base)
    out["cluster"]["transfer"] = link
    return out


@pytest.mark.parametrize(
    ("bw", "streaming", "left_after_prefill"),
    [
        (50e9, "layerwise", "last layer"),  # the link keeps up: only layer 32's share remains
        (50e9, "after_prefill", "all"),
        (0.5e9, "layerwise", "lag"),  # the link falls behind the prefill
    ],
)
def test_one_request_timeline_by_hand(bw, streaming, left_after_prefill):
    link = {"bandwidth_bytes_per_s": bw, "latency_s": 1e-3, "concurrency": 1, "streaming": streaming}
    sim = build(pd(link))
    cost_p, cost_d = sim.parts[0].cost, sim.parts[1].cost
    res = sim.run()
    # the prefill instance: one 2,000-token chunk from t = 0 (it samples one token, ends)
    prefill_s = cost_p.price(StepWork(prefill_chunks=((PROMPT, 0),))).total_s
    # the link: 2,000 tokens x 131,072 bytes, 32 layers
    nbytes = PROMPT * BYTES_PER_TOKEN
    whole = nbytes / bw
    if left_after_prefill == "last layer":
        hold = 1e-3 + whole / 32
        assert whole - prefill_s * 31 / 32 < whole / 32
    elif left_after_prefill == "all":
        hold = 1e-3 + whole
    else:
        hold = 1e-3 + whole - prefill_s * 31 / 32
        assert hold > 1e-3 + whole / 32
    arrive = prefill_s + hold
    # the decode instance: the last prompt token again (its logits), then two decodes
    first = cost_d.price(StepWork(prefill_chunks=((1, PROMPT - 1),))).total_s
    d1 = cost_d.price(StepWork(n_decode=1, decode_history_tokens=PROMPT,
                               decode_max_history_tokens=PROMPT,
                               decode_min_history_tokens=PROMPT)).total_s  # fmt: skip
    d2 = cost_d.price(StepWork(n_decode=1, decode_history_tokens=PROMPT + 1,
                               decode_max_history_tokens=PROMPT + 1,
                               decode_min_history_tokens=PROMPT + 1)).total_s  # fmt: skip
    r = res.requests
    assert len(r) == 1 and r.node.tolist() == [1]  # the prefill half is not a call
    row = r.iloc[0]
    assert row.admitted_s == pytest.approx(arrive, rel=1e-12, abs=1e-12)
    assert row.first_token_s == pytest.approx(arrive + first, rel=1e-12)
    assert row.finish_s == pytest.approx(arrive + first + d1 + d2, rel=1e-12)
    assert row.output_tokens == OUT
    s = res.summary
    assert s["kv_transfer_bytes"] == nbytes
    assert s["kv_transfer_s"] == pytest.approx(hold, rel=1e-12)
    assert s["remote_prefills"] == 1 and s["local_prefills"] == 0
    assert s["ttft_queue_s"]["mean"] == 0.0
    assert s["ttft_prefill_s"]["mean"] == pytest.approx(prefill_s, rel=1e-12)
    assert s["ttft_transfer_s"]["mean"] == pytest.approx(hold, rel=1e-12)
    assert s["ttft_decode_s"]["mean"] == pytest.approx(first, rel=1e-9)
    assert s["kv_link_wait_s"]["p99"] == 0.0
    # the decode instance computed one prompt token; the prefill instance all of them
    nodes = s["nodes"]
    assert [n["role"] for n in nodes] == ["prefill", "decode"]
    assert [n["prefill_tokens"] for n in nodes] == [PROMPT, 1]
    # the prefill half's sampled token is the prefill instance's, not the workload's
    assert [n["output_tokens"] for n in nodes] == [1, OUT] and s["output_tokens"] == OUT
    assert check_summary(s) == []


def test_the_link_queues_transfers_beyond_its_concurrency():
    """Two requests at once, one link slot: the second waits for the first's hold."""
    link = {"bandwidth_bytes_per_s": 1e9, "latency_s": 0.0, "concurrency": 1,
            "streaming": "after_prefill"}  # fmt: skip
    sc = pd(link)
    sc["workload"]["requests"][0]["count"] = 2
    s = run_scenario(sc).summary
    hold = PROMPT * BYTES_PER_TOKEN / 1e9
    assert s["kv_transfers"] == 2
    assert s["kv_transfer_s"] == pytest.approx(2 * hold, rel=1e-12)
    # both prefills end in the same step; the second transfer waits one whole hold
    assert s["kv_link_wait_s"]["mean"] == pytest.approx(hold / 2, rel=1e-12)
    assert 0 < s["kv_link_utilization"] <= 1


def test_transfer_bytes_per_layer_group():
    """Full attention ships every new token; a sliding window at most its window; a state
    group its state once; nothing when the decode side holds everything."""
    llama = group_bytes(load_model("llama-3.1-8b"))
    assert transfer_bytes(llama, 5000, 1200) == 1200 * BYTES_PER_TOKEN
    assert transfer_bytes(llama, 5000, 0) == 0.0
    for name in ("gpt-oss-20b", "qwen3-next-80b-a3b"):  # sliding windows; linear-attention states
        groups = group_bytes(load_model(name))
        want = 0.0
        for g in groups:
            if g.holds_state:
                want += g.num_layers * g.state_bytes_per_layer
            else:
                kept = min(100_000, g.held_tokens(200_000))
                want += g.num_layers * kept * g.bytes_per_token_per_layer
        assert transfer_bytes(groups, 200_000, 100_000) == pytest.approx(want, rel=1e-12)
        every_token = sum(g.num_layers * 100_000 * g.bytes_per_token_per_layer for g in groups)
        if name == "gpt-oss-20b":  # half its layers keep a 128-token window
            assert want < 0.6 * every_token
        else:  # its states are shipped once, whatever the length
            assert transfer_bytes(groups, 200_000, 1) > transfer_bytes(groups, 200_000, 1) - 1
            assert any(g.holds_state for g in groups)


def test_link_hold_formula():
    link = TransferLink(bandwidth_bytes_per_s=1e9, latency_s=0.5, streaming="layerwise")
    assert link_hold_s(link, 0.0, 32, 1.0) == 0.0
    assert link_hold_s(link, 32e9, 32, 0.0) == pytest.approx(0.5 + 32.0)  # nothing overlapped
    assert link_hold_s(link, 32e9, 32, 1e6) == pytest.approx(0.5 + 1.0)  # one layer left
    whole = TransferLink(bandwidth_bytes_per_s=1e9, latency_s=0.5, streaming="after_prefill")
    assert link_hold_s(whole, 32e9, 32, 1e6) == pytest.approx(32.5)


AGENTS = {
    **{k: v for k, v in ONE.items() if k not in ("workload", "engine")},
    "name": "pd_agents",
    "seed": 2,
    "pause_policy": {"kind": "hold"},
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 16e9},
    "workload": {"kind": "coding_agent", "num_trajectories": 3,
                 "arrival": {"kind": "closed_loop", "concurrency": 3}},
    "cluster": {"nodes": [{"count": 1, "role": "prefill"}, {"count": 2, "role": "decode"}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def agents():
    always = run_scenario(pd({"remote_prefill_min_tokens": 0}, AGENTS))
    cond = run_scenario(pd({"remote_prefill_min_tokens": 4096}, AGENTS))
    return always, cond


def test_a_paused_agent_returns_to_its_decode_instance(agents):
    for res in agents:
        r = res.requests
        assert set(r.node) <= {1, 2}
        assert (r.groupby("traj_id").node.nunique() == 1).all()
        assert res.summary["sequence_moves"] == 0
        # every turn after the first finds its context held there: few new tokens each
        later = r[r.turn > 0]
        assert (later.held_tokens > 0).mean() > 0.9


def test_conditional_disaggregation_prefills_short_suffixes_locally(agents):
    always, cond = (a.summary for a in agents)
    n = always["requests_completed"]
    assert always["remote_prefills"] == always["routing_decisions"] and always["local_prefills"] == 0
    assert cond["local_prefills"] > 0 and cond["remote_prefills"] < always["remote_prefills"]
    assert cond["remote_prefills"] + cond["local_prefills"] == cond["routing_decisions"]
    assert cond["kv_transfer_bytes"] < always["kv_transfer_bytes"]
    assert n == cond["requests_completed"]
    for s in (always, cond):
        assert check_summary(s) == []
        assert set(s["kv_pool_bytes_by_role"]) == {"prefill", "decode"}
        assert s["kv_pool_bytes_by_role"]["decode"] == 2 * s["kv_pool_bytes_by_role"]["prefill"]


def test_ttft_parts_add_up_to_ttft(agents):
    from sim.run.disagg import ttft_parts

    always = agents[0]
    sim = build(pd({"remote_prefill_min_tokens": 0}, AGENTS))
    res = sim.run()
    assert res.summary == {**always.summary, "wall_time_s": res.summary["wall_time_s"]}
    r = res.requests[res.requests.first_token_s.notna()]
    parts = ttft_parts(sim.front, r)
    assert parts.shape == (len(r), len(TTFT_PARTS))
    assert parts.sum(axis=1) == pytest.approx(r.ttft_s.to_numpy(), abs=1e-9)
    assert (parts >= -1e-12).all()


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ({"nodes": [{"count": 2, "role": "prefill"}]}, "needs a decode group"),
        ({"nodes": [{"count": 2, "role": "decode"}]}, "needs a prefill group"),
        ({"nodes": [{"role": "prefill"}, {"role": "decode"}, {"role": "both"}]}, "no both beside"),
        ({"nodes": [{"count": 2}], "transfer": {}}, "transfer needs node groups"),
        ({"nodes": [{"role": "prefill"}, {"role": "decode"}], "router": {"kind": "least_load"}},
         "drop router"),
        ({"nodes": [{"role": "prefill"}, {"role": "decode"}],
          "transfer": {"streaming": "sometimes"}}, "layerwise"),
        ({"nodes": [{"role": "prefil"}, {"role": "decode"}]}, "prefill"),
    ],
)
def test_bad_roles_are_one_line(cluster, words):
    sc = copy.deepcopy(ONE)
    sc["cluster"] = cluster
    with pytest.raises(ConfigError) as e:
        run_scenario(sc)
    msg = str(e.value)
    assert words in msg and "\n" not in msg.strip()


def test_role_both_is_every_cluster_before_roles_bit_for_bit():
    base = {**{k: v for k, v in ONE.items() if k != "cluster"},
            "cluster": {"nodes": [{"count": 2}]}}  # fmt: skip
    base["workload"] = {"kind": "requests", "requests": [
        {"count": 4, "at_s": 0.0, "interval_s": 0.01, "prompt_tokens": 512, "output_tokens": 3}]}  # fmt: skip
    explicit = copy.deepcopy(base)
    explicit["cluster"]["nodes"][0]["role"] = "both"
    a, b = run_scenario(base), run_scenario(explicit)
    drop = ("wall_time_s", "scenario_path")
    assert {k: v for k, v in a.summary.items() if k not in drop} == {
        k: v for k, v in b.summary.items() if k not in drop}  # fmt: skip
    assert a.requests.equals(b.requests)
    assert "remote_prefills" not in a.summary and "role" not in a.summary["nodes"][0]


def test_a_decode_side_without_memory_queues_the_shipped_request():
    """The decode instance's pool fits one 2,000-token request at a time: the second,
    shipped at the same instant, waits there until the first finishes and frees it."""
    sc = pd({"bandwidth_bytes_per_s": 50e9, "concurrency": 4})
    sc["workload"]["requests"][0]["count"] = 2
    sc["cluster"]["nodes"][1]["hardware"] = {"kv_pool_bytes_per_gpu": 2500 * BYTES_PER_TOKEN}
    res = run_scenario(sc)
    r = res.requests.sort_values("req_id")
    first, second = r.iloc[0], r.iloc[1]
    assert second.admitted_s >= first.finish_s  # admitted only once the first freed its KV
    parts = res.summary["ttft_decode_s"]
    assert parts["p99"] > parts["p50"]  # the second's decode part holds the first's decode
    assert res.summary["kv_transfers"] == 2 and res.summary["kv_link_wait_s"]["p99"] == 0.0


def test_a_request_cancelled_during_its_prefill_never_reaches_the_decode_instance():
    sim = build(pd({"bandwidth_bytes_per_s": 50e9}))
    prefill_s = sim.parts[0].cost.price(StepWork(prefill_chunks=((PROMPT, 0),))).total_s

    def cancel_midway():
        yield sim.env.timeout(prefill_s / 2)
        (req,) = sim.front.in_flight(1)  # booked on its decode instance, still prefilling
        sim.front.cancel(req, req.seq_id)

    sim.env.process(cancel_midway())
    res = sim.run()
    r = res.requests
    assert r.status.tolist() == ["cancelled"] and r.finish_reason.tolist() == ["cancelled"]
    assert r.finish_s.iloc[0] == pytest.approx(prefill_s, rel=1e-12)  # ended with its prefill
    assert res.summary["kv_transfers"] == 0 and res.summary["kv_transfer_bytes"] == 0
    assert set(res.steps.node) == {0}  # the decode instance never stepped
    assert sim.front.outstanding(1) == 0

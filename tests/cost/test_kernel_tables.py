"""Kernel-table pricing (``cost.step_pricing: kernel_tables``): the table laws, a step priced
from a tiny hand-made table, the run equality the fast path needs, TP communication, MoE,
errors, and the shipped LLMServingSim calibrations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from sim.cost import CostConfig, CostModel, StepWork
from sim.cost.calibration import as_mapping, load_calibration
from sim.cost.kernel_tables import (
    AttentionGrid,
    Curve,
    expected_active_experts,
    fill_attention_holes,
)
from sim.errors import ConfigError
from sim.profiles import load_accelerator, load_model
from sim.profiles.schema import ModelProfile, SlidingWindowSpec

US = 1e-6
PRO6000 = load_accelerator("rtx-pro-6000-server-96gb")
TINY = ModelProfile(name="tiny", attention="gqa", num_layers=2, num_q_heads=4, num_kv_heads=2,
                    head_dim=16, d_model=64, params_total=1e6, intermediate_size=128,
                    vocab_size=1000)  # fmt: skip
TINY_MOE = TINY.model_copy(update={"name": "tiny-moe", "intermediate_size": None,
                                   "num_experts": 8, "experts_per_token": 2})  # fmt: skip
NAN = float("nan")


# -- the laws -------------------------------------------------------------------------------


def test_curve_is_linear_inside_clamped_below_and_extends_its_last_segment():
    c = Curve((1, 2, 4), (1.0, 2.0, 3.0))
    assert c.at(0.5) == 1.0 and c.at(1) == 1.0 and c.at(3) == 2.5 and c.at(4) == 3.0
    assert c.at(8) == 5.0  # slope 0.5 per token past 4
    assert np.array_equal(c.at(np.array([0.5, 3.0, 8.0])), [1.0, 2.5, 5.0])
    assert Curve((1, 2), (2.0, 1.0)).at(10) == 1.0  # a falling last segment: flat, never below


def grid_2x2x2x2() -> tuple[list[int], list[int], list[int], list[int], np.ndarray]:
    """pc {0, 16}, kp {0, 16}, nd {0, 1}, kd {0, 16}: measured where the profiler measures."""
    g = np.full((2, 2, 2, 2), NAN)
    g[0, 0, 1, 1] = 10.0  # one decode of 16 tokens
    g[1, 0, 0, 0], g[1, 1, 0, 0] = 20.0, 30.0  # a 16-token chunk over 0 / 16 cached
    g[1, 0, 1, 1], g[1, 1, 1, 1] = 40.0, 50.0  # the same beside the decode
    return [0, 16], [0, 16], [0, 1], [0, 16], g


def test_attention_holes_are_filled_by_the_documented_rules():
    pc, kp, nd, kd, g = grid_2x2x2x2()
    full = fill_attention_holes(pc, kp, nd, kd, g)
    assert not np.isnan(full).any()
    assert full[0, 0, 0, 0] == 0.0 and full[0, 1, 0, 1] == 0.0  # nothing to attend
    assert full[0, 1, 1, 1] == 10.0  # no chunk: its history does not matter
    assert full[1, 1, 0, 1] == 30.0  # no decode: their context does not matter
    assert full[0, 0, 1, 0] == 10.0 and full[1, 1, 1, 0] == 50.0  # a decode's context < 16: clamp


def test_attention_grid_interpolates_each_axis_linearly():
    pc, kp, nd, kd, g = grid_2x2x2x2()
    a = AttentionGrid(*(tuple(x) for x in (pc, kp, nd, kd)), fill_attention_holes(pc, kp, nd, kd, g))
    assert a.at(0, 0, 0, 0) == 0.0
    assert a.at(0, 0, 1, 16) == 10.0 and a.at(16, 0, 0, 0) == 20.0 and a.at(16, 16, 1, 16) == 50.0
    assert a.at(16, 8, 0, 0) == 25.0  # halfway along the history
    assert a.at(8, 0, 1, 16) == 25.0  # halfway between the pure decode (10) and the mix (40)
    assert a.at(16, 32, 0, 0) == 40.0  # past the last history: the last segment extended
    kd_run = np.array([16.0, 32.0])
    assert np.array_equal(a.at(0.0, 0.0, 1.0, kd_run), [10.0, 10.0])  # kd's last segment is flat here


def test_an_attention_hole_no_rule_fills_is_refused():
    pc, kp, nd, kd, g = grid_2x2x2x2()
    g[1, 1, 1, 1] = NAN  # a mixed point inside the measured range
    with pytest.raises(ValueError, match="no rule fills: prefill_chunk 16, kv_prefill 16, n_decode 1"):
        fill_attention_holes(pc, kp, nd, kd, g)


def test_expected_active_experts():
    assert expected_active_experts(0, 128, 8) == 0.0
    assert expected_active_experts(1, 128, 8) == 8.0
    assert expected_active_experts(2, 128, 8) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert expected_active_experts(10_000, 128, 8) == pytest.approx(128.0)


# -- a step priced from a tiny hand-made table ------------------------------------------------


def tiny_tables(moe: bool = False) -> dict:
    """Two token counts, two sequence counts, the 2x2x2x2 attention grid; microseconds."""
    pc, kp, nd, kd, g = grid_2x2x2x2()
    ops = {"layernorm": 2, "qkv_proj": 1, "o_proj": 1} if moe else \
        {"layernorm": 2, "qkv_proj": 1, "o_proj": 1, "gate_up_proj": 1, "act_fn": 1, "down_proj": 1}  # fmt: skip
    dense = {"layernorm": "1 3", "qkv_proj": "10 30", "o_proj": "5 15", "gate_up_proj": "20 60",
             "act_fn": "2 6", "down_proj": "8 24", "embedding": "1 2", "final_layernorm": "1 3"}  # fmt: skip
    geometry = {"num_layers": 2, "d_model": 64, "num_q_heads": 4, "num_kv_heads": 2, "head_dim": 16,
                "vocab_size": 1000}  # fmt: skip
    geometry.update({"num_experts": 8, "experts_per_token": 2} if moe else {"intermediate_size": 128})
    tp = {
        "dense": {"tokens": "1 17", "time_us": dense},
        "per_sequence": {"sequences": "1 2", "time_us": {"lm_head": "100 110", "sampler": "3 5"}},
        "attention": {"prefill_chunk": pc, "kv_prefill": kp, "n_decode": nd, "kv_decode": kd,
                      "time_us": " ".join("nan" if math.isnan(v) else str(v) for v in g.ravel())},
    }  # fmt: skip
    if moe:
        tp["moe"] = {"tokens": [1, 17], "activated_experts": [2, 8], "time_us": "40 nan 60 120"}
    return {"source_model": "org/tiny", "geometry": geometry, "layer_ops": ops,
            "step_ops": ["embedding", "final_layernorm"], "sequence_ops": ["lm_head", "sampler"],
            "by_tp": {1: tp, 2: tp}}  # fmt: skip


def write_calibration(tmp_path, tables: dict, overhead_s: float = 0.001, **extra) -> str:
    data = {
        "schema_version": 2, "device": "tiny GPU", "driver": "", "torch_version": "", "date": "2026-01-01",
        "source": "synthetic", "reference": {"hbm_bw_bytes_per_s": 1e12, "peak_flops_per_s": 1e14},
        "step_overhead_s": overhead_s, "kernel_tables": tables, **extra,
    }  # fmt: skip
    path = tmp_path / "tiny-tables.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def tiny_cost(tmp_path, model=TINY, tp=1, **cfg) -> CostModel:
    cal = write_calibration(tmp_path, {"tiny": tiny_tables(moe=model.num_experts is not None)})
    return CostModel(model, PRO6000, tp, 1, CostConfig(calibration=cal, **cfg))


def test_auto_picks_kernel_tables_for_a_covered_model(tmp_path):
    assert tiny_cost(tmp_path).pricing == "kernel_tables"
    assert tiny_cost(tmp_path, step_pricing="roofline_max").pricing == "roofline_max"


def test_a_mixed_step_is_the_sum_of_its_measured_kernels_by_hand(tmp_path):
    """1 decode of 15 cached tokens (+ itself = 16) beside an 8-token chunk over 16 cached:
    9 tokens in the step, 2 sequences, 2 layers."""
    c = tiny_cost(tmp_path).iteration_time(StepWork(n_decode=1, decode_history_tokens=15,
                                                    prefill_chunks=((8, 16),)))  # fmt: skip
    at9 = {"layernorm": 2, "qkv_proj": 20, "o_proj": 10, "gate_up_proj": 40, "act_fn": 4,
           "down_proj": 16, "embedding": 1.5, "final_layernorm": 2}  # fmt: skip  # 9 tokens: halfway
    layer = 2 * at9["layernorm"] + at9["qkv_proj"] + at9["o_proj"] + at9["gate_up_proj"] \
        + at9["act_fn"] + at9["down_proj"]  # fmt: skip
    attention = 10.0 + (8 / 16) * (50.0 - 10.0)  # pc 8 of 16 between the decode and the mix
    expected = 1e-3 + (2 * layer + at9["embedding"] + at9["final_layernorm"] + 110 + 5
                       + 2 * attention) * US  # fmt: skip
    assert c.total_s == pytest.approx(expected, rel=1e-12)
    assert c.extra["pricing"] == "kernel_tables"
    assert c.extra["attention_group_s"] == pytest.approx(2 * attention * US, rel=1e-12)
    assert c.extra["elementwise_s"] == pytest.approx(2 * (2 * 2 + 4) * US, rel=1e-12)
    assert c.extra["lm_head_s"] == pytest.approx(115 * US, rel=1e-12)
    assert c.allreduce_s == 0.0 and c.extra["logits_gather_s"] == 0.0  # TP 1


def test_decode_runs_equal_stepping_bit_for_bit(tmp_path):
    m = tiny_cost(tmp_path)
    run = m.decode_run_times(1, 20, 5)
    one = [m.iteration_time(StepWork(n_decode=1, decode_history_tokens=20 + i)).total_s for i in range(5)]
    assert list(run) == one


def test_tp2_adds_the_all_reduces_and_the_logits_gather_from_the_accelerator_profile(tmp_path):
    """RTX PRO 6000 at TP 2: 20 us + bytes / 16 GB/s per call (its profile), 2 L + 1 calls of
    tokens x d_model x 2 B, and one gather of sequences x vocabulary x 2 B (half moves)."""
    work = StepWork(n_decode=1, decode_history_tokens=15, prefill_chunks=((8, 16),))
    c1 = tiny_cost(tmp_path, tp=1).iteration_time(work)
    c2 = tiny_cost(tmp_path, tp=2).iteration_time(work)
    ar = 5 * (20e-6 + 9 * 64 * 2 / 16e9)
    gather = 20e-6 + 0.5 * 2 * 1000 * 2 / 16e9
    assert c2.allreduce_s == pytest.approx(ar, rel=1e-12)
    assert c2.extra["logits_gather_s"] == pytest.approx(gather, rel=1e-12)
    assert c2.total_s - c1.total_s == pytest.approx(ar + gather, rel=1e-9)  # same tables at TP 2
    c3 = tiny_cost(tmp_path, tp=2, allreduce_latency_s=0.0).iteration_time(work)  # the scenario wins
    assert c3.allreduce_s == pytest.approx(5 * 9 * 64 * 2 / 16e9, rel=1e-12)


def test_moe_geometry_prices_its_expert_layer(tmp_path):
    m = tiny_cost(tmp_path, model=TINY_MOE)
    c = m.iteration_time(StepWork(n_decode=1, decode_history_tokens=15))
    # 1 token activates 2 experts: the measured 40 us, per layer
    assert c.extra["moe_s"] == pytest.approx(2 * 40 * US, rel=1e-12)
    c17 = m.iteration_time(StepWork(prefill_chunks=((17, 0),)))
    e = expected_active_experts(17, 8, 2)
    assert c17.extra["moe_s"] == pytest.approx(2 * (60 + (e - 2) / 6 * 60) * US, rel=1e-12)


def test_uncovered_model_or_tp_is_one_line_naming_what_the_file_has(tmp_path):
    with pytest.raises(ConfigError, match="no kernel tables for model 'llama-3.1-8b' at TP 1.*tiny"):
        tiny_cost(tmp_path, model=load_model("llama-3.1-8b"))
    with pytest.raises(ConfigError, match="at TP 4.*TP 1, 2"):
        tiny_cost(tmp_path, tp=4)
    with pytest.raises(ConfigError, match="needs a calibration with kernel_tables"):
        CostModel(TINY, PRO6000, 1, 1, CostConfig(step_pricing="kernel_tables"))


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda t: t["by_tp"][1]["dense"]["time_us"].update(qkv_proj="1"), "qkv_proj needs one value per token count"),
        (lambda t: t["by_tp"][1]["attention"].update(time_us="1 2 3"), "time_us needs 16 values"),
        (lambda t: t["layer_ops"].update(rmsnorm=1), "has no 'rmsnorm'"),
        (lambda t: t["geometry"].update(heads=3), "unknown field 'heads'"),
        (lambda t: t["by_tp"][1]["dense"]["time_us"].update(o_proj="5 -1"), "microseconds"),
    ],
)
def test_bad_tables_are_one_line_errors_naming_file_and_field(tmp_path, edit, message):
    t = tiny_tables()
    t["by_tp"][1] = yaml.safe_load(yaml.safe_dump(t["by_tp"][1]))  # its own copy
    edit(t)
    path = write_calibration(tmp_path, {"tiny": t})
    with pytest.raises(ConfigError) as exc:
        load_calibration(path)
    text = str(exc.value)
    assert "\n" not in text and "tiny-tables.yaml:" in text and message in text


def test_a_calibration_with_tables_round_trips(tmp_path):
    cal = load_calibration(write_calibration(tmp_path, {"tiny": tiny_tables()}))
    again_path = tmp_path / "again.yaml"
    again_path.write_text(yaml.safe_dump(as_mapping(cal), sort_keys=False))
    again = load_calibration(str(again_path))
    a, b = cal.model_tables(TINY).for_tp(1), again.model_tables(TINY).for_tp(1)
    assert np.allclose(a.attention.time_s, b.attention.time_s, rtol=1e-12)
    assert a.dense_s("qkv_proj", 9) == pytest.approx(b.dense_s("qkv_proj", 9), rel=1e-12)


# -- defaults stay as they were --------------------------------------------------------------


def test_other_calibrations_keep_their_pricing():
    l8b = load_model("llama-3-8b")
    h100 = load_accelerator("h100-sxm-80gb")
    assert CostModel(l8b, h100, 1, 1, CostConfig(calibration="h100-sxm-80gb-vidur")).pricing == "per_group"
    assert CostModel(l8b, h100, 1, 1, CostConfig()).pricing == "roofline_max"


# -- the shipped LLMServingSim calibrations --------------------------------------------------


@pytest.mark.parametrize(
    "name,model,tp",
    [("rtx-4090-24gb-llmservingsim", "llama-3.1-8b", 1),
     ("rtx-pro-6000-server-96gb-llmservingsim", "qwen3-32b", 2),
     ("rtx-pro-6000-server-96gb-llmservingsim", "llama-3.1-8b", 1),
     ("rtx-pro-6000-server-96gb-llmservingsim", "qwen3-30b-a3b", 2)],
)  # fmt: skip
def test_shipped_calibrations_cover_their_models(name, model, tp):
    cal = load_calibration(name)
    assert dict(cal.origin)["commit"] == "5daddb21a545658d5150b535712d0494584b5278"
    assert dict(cal.origin)["licence"] == "MIT"
    assert cal.model_tables(load_model(model)).for_tp(tp) is not None


def test_shipped_tables_hold_the_measured_points(repo_root=None):
    """Points copied from the CSVs (microseconds, 5 significant digits kept)."""
    t = load_calibration("rtx-4090-24gb-llmservingsim").model_tables(load_model("llama-3.1-8b")).for_tp(1)
    assert t.dense_s("qkv_proj", 2048) == pytest.approx(631.1 * US, rel=2e-4)
    assert t.sequence_s("lm_head", 1) == pytest.approx(1096.93 * US, rel=1e-4)
    assert t.attention.at(0, 0, 1, 16) == pytest.approx(9.31067 * US, rel=1e-4)
    q = load_calibration("rtx-pro-6000-server-96gb-llmservingsim").model_tables(load_model("qwen3-30b-a3b"))
    assert q.for_tp(1).moe.at(2048, 128) == pytest.approx(1066.6 * US, rel=1e-4)
    assert q.for_tp(2).moe is not None  # measured once, at TP 1


def test_shipped_files_name_their_source_in_the_header():
    from sim.cost.calibration import available_calibrations

    for name in ("rtx-4090-24gb-llmservingsim", "rtx-pro-6000-server-96gb-llmservingsim"):
        head = available_calibrations()[name].read_text()[:600]
        assert "github.com/casys-kaist/LLMServingSim" in head and "5daddb21" in head and "MIT" in head


def test_a_sliding_layers_prefill_chunk_is_priced_at_the_pairs_its_window_keeps(tmp_path):
    """TINY with one layer in two sliding over 4 tokens, a 16-token chunk over nothing: the
    table's 20 us is 16 x 17 / 2 = 136 causal pairs; the sliding layer keeps
    1 + 2 + 3 + 4 x 13 = 58 of them, so it costs 20 x 58 / 136 us and the full layer 20 us
    (before: 20 us each). A chunk inside the window keeps every pair (the table's time)."""
    window = SlidingWindowSpec(window_tokens=4, pattern=["sliding", "full"])
    hybrid = ModelProfile.model_validate({**TINY.model_dump(), "sliding_window": window.model_dump()})
    m = tiny_cost(tmp_path, model=hybrid)
    c = m.iteration_time(StepWork(n_decode=0, decode_history_tokens=0, prefill_chunks=((16, 0),)))
    assert c.extra["attention_group_s"] == pytest.approx((20.0 + 20.0 * 58 / 136) * US, rel=1e-12)
    wide = SlidingWindowSpec(window_tokens=16, pattern=["sliding", "full"])
    inside = ModelProfile.model_validate({**TINY.model_dump(), "sliding_window": wide.model_dump()})
    c = tiny_cost(tmp_path, model=inside).iteration_time(
        StepWork(n_decode=0, decode_history_tokens=0, prefill_chunks=((16, 0),)))
    assert c.extra["attention_group_s"] == pytest.approx(2 * 20.0 * US, rel=1e-12)


def test_a_sliding_layers_mixed_step_drops_only_the_skipped_prefill_time(tmp_path):
    """The chunk beside a decode of 16: the mixed table time (40 us) less the skipped share
    of the pure-prefill time, (1 - 58 / 136) x 20 us, on the sliding layer; the decode
    reads min(16, 4) = 4 tokens, which the grid prices as 16 (its kd = 0 column is filled
    from kd = 16)."""
    window = SlidingWindowSpec(window_tokens=4, pattern=["sliding", "full"])
    hybrid = ModelProfile.model_validate({**TINY.model_dump(), "sliding_window": window.model_dump()})
    c = tiny_cost(tmp_path, model=hybrid).iteration_time(
        StepWork(n_decode=1, decode_history_tokens=15, prefill_chunks=((16, 0),)))
    sliding = 40.0 - (1 - 58 / 136) * 20.0
    assert c.extra["attention_group_s"] == pytest.approx((40.0 + sliding) * US, rel=1e-12)

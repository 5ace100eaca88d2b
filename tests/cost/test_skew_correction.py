"""The kernel tables' context-skew correction (LLMServingSim's ``skew_fit``): a step priced
from a tiny hand-made table with a skew fit, where no correction applies, the fast decode
path equal to stepping with unequal contexts (cost model and engine), and the shipped
calibrations' fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from sim.cost import CostConfig, CostModel, StepWork
from sim.cost.calibration import load_calibration
from sim.profiles import load_accelerator, load_model
from sim.profiles.schema import ModelProfile

US = 1e-6
PRO6000 = load_accelerator("rtx-pro-6000-server-96gb")
TINY = ModelProfile(name="tiny", attention="gqa", num_layers=2, num_q_heads=4, num_kv_heads=2,
                    head_dim=16, d_model=64, params_total=1e6, intermediate_size=128,
                    vocab_size=1000)  # fmt: skip
NAN = float("nan")
PC, KP, ND, KD = [0, 16], [0, 16], [0, 2, 4], [0, 16, 32]


def attention_us(pc: int, kp: int, nd: int, kd: int) -> float:
    """The tiny attention kernel: 5 us + nd x kd / 4 per decode batch, a 16-token chunk
    20 us + 10 us per 16 cached tokens on top; nothing at all without work."""
    if pc == 0 and nd == 0:
        return 0.0
    return (5.0 + nd * kd / 4 if nd else 0.0) + (20.0 + 10.0 * kp / 16 if pc else 0.0) - (5.0 if pc and nd else 0.0)


def skew_fit() -> dict:
    """Buckets: n (0,2], (2,4], (4,8]; skew rate (., .15], (.15, .4], (.4, 1]; longest
    history (0,16], (16, inf); chunk history =0, >0. Two measured cells, else 0.1."""
    alpha = np.full((2, 3, 3, 2, 2), NAN)
    alpha[0, 1, 1, 1, 0] = 0.5  # no chunk, 3-4 decodes, rate 15-40 %, longest > 16
    alpha[1, 1, 1, 1, 1] = 0.25  # a 16-token chunk over cached tokens, the same decodes
    return {"alpha_default": 0.1, "prefill_chunk": [0, 16], "n_decode_edges": [0, 2, 4, 8],
            "skew_rate_edges": [-0.01, 0.15, 0.4, 1.01], "kv_decode_max_edges": [0, 16, 1e9],
            "kv_prefill_edges": [-1, 0, 1e9],
            "alpha": " ".join("nan" if np.isnan(v) else str(v) for v in alpha.ravel())}  # fmt: skip


def tiny_tables(with_skew: bool = True) -> dict:
    grid = [attention_us(a, b, c, d) for a in PC for b in KP for c in ND for d in KD]
    dense = {op: "1 2" for op in ("layernorm", "qkv_proj", "o_proj", "gate_up_proj", "act_fn", "down_proj",
                                  "embedding", "final_layernorm")}  # fmt: skip
    tp = {
        "dense": {"tokens": "1 17", "time_us": dense},
        "per_sequence": {"sequences": "1 2", "time_us": {"lm_head": "100 110", "sampler": "3 5"}},
        "attention": {"prefill_chunk": PC, "kv_prefill": KP, "n_decode": ND, "kv_decode": KD,
                      "time_us": " ".join(str(v) for v in grid)},
    }  # fmt: skip
    if with_skew:
        tp["skew_fit"] = skew_fit()
    geometry = {"num_layers": 2, "d_model": 64, "num_q_heads": 4, "num_kv_heads": 2, "head_dim": 16,
                "vocab_size": 1000, "intermediate_size": 128}  # fmt: skip
    return {"source_model": "org/tiny", "geometry": geometry,
            "layer_ops": {"layernorm": 2, "qkv_proj": 1, "o_proj": 1, "gate_up_proj": 1, "act_fn": 1,
                          "down_proj": 1},
            "step_ops": ["embedding", "final_layernorm"], "sequence_ops": ["lm_head", "sampler"],
            "by_tp": {1: tp}}  # fmt: skip


def cost(tmp_path, on: bool = True, with_skew: bool = True) -> CostModel:
    data = {"schema_version": 2, "device": "tiny GPU", "driver": "", "torch_version": "", "date": "2026-01-01",
            "source": "synthetic", "reference": {"hbm_bw_bytes_per_s": 1e12, "peak_flops_per_s": 1e14},
            "step_overhead_s": 0.0, "kernel_tables": {"tiny": tiny_tables(with_skew)}}  # fmt: skip
    path = tmp_path / f"skew-{with_skew}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return CostModel(TINY, PRO6000, 1, 1, CostConfig(calibration=str(path), skew_correction=on))


def decodes(histories: list[int], chunk: tuple[int, int] | None = None) -> StepWork:
    return StepWork(len(histories), sum(histories), (chunk,) if chunk else (), 0.0, 0,
                    max(histories), min(histories))  # fmt: skip


def attention_s(m: CostModel, work: StepWork) -> float:
    return m.iteration_time(work).extra["attention_group_s"]


def test_a_skewed_decode_batch_by_hand(tmp_path):
    """Histories 7, 7, 7, 23 (contexts 8, 8, 8, 24): mean 12, t_mean = 5 + 4 x 12 / 4 = 17 us,
    t_max = 5 + 4 x 24 / 4 = 29 us; rate (12 - 8) / 16 = 0.25, longest 23 > 16: alpha 0.5,
    so 17 + 0.5 x 12 = 23 us per layer, 2 layers."""
    work = decodes([7, 7, 7, 23])
    assert attention_s(cost(tmp_path), work) == pytest.approx(2 * 23.0 * US, rel=1e-12)
    assert attention_s(cost(tmp_path, on=False), work) == pytest.approx(2 * 17.0 * US, rel=1e-12)
    off = cost(tmp_path, on=False).iteration_time(work).total_s
    assert cost(tmp_path).iteration_time(work).total_s - off == pytest.approx(2 * 6.0 * US, rel=1e-9)


def test_a_batch_without_a_profiled_bucket_takes_the_pooled_alpha(tmp_path):
    """Two decodes (bucket n <= 2 has no cell): histories 7, 23, mean 16, t_mean 13 us,
    t_max 17 us, alpha_default 0.1: 13.4 us per layer."""
    assert attention_s(cost(tmp_path), decodes([7, 23])) == pytest.approx(2 * 13.4 * US, rel=1e-12)


def test_a_mixed_step_looks_its_chunk_up_by_its_exact_size(tmp_path):
    """The decodes above beside a 16-token chunk over 16 cached: t_mean = 20 + 10 + 4 x 12 / 4
    = 42, t_max = 54, alpha 0.25 (chunk 16, history > 0): 45 us; an 8-token chunk has no
    bucket (not a profiled size): the pooled 0.1 on the blend halfway to the chunk."""
    m = cost(tmp_path)
    assert attention_s(m, decodes([7, 7, 7, 23], (16, 16))) == pytest.approx(2 * 45.0 * US, rel=1e-12)
    t_mean = 17.0 + 0.5 * (42.0 - 17.0)
    t_max = 29.0 + 0.5 * (54.0 - 29.0)
    expected = t_mean + 0.1 * (t_max - t_mean)
    assert attention_s(m, decodes([7, 7, 7, 23], (8, 16))) == pytest.approx(2 * expected * US, rel=1e-12)


@pytest.mark.parametrize(
    "work",
    [
        StepWork(1, 23, (), 0.0, 0, 23, 23),  # one decode
        StepWork(4, 28, (), 0.0, 0, 7, 7),  # equal contexts
        StepWork(4, 44),  # the span not known (callers that do not carry it)
        StepWork(2, 30, (), 0.0, 0, 23, 7),  # the control: two unequal decodes, corrected
    ],
    ids=["one-decode", "equal-contexts", "no-span", "span"],
)
def test_no_correction_where_upstream_applies_none(tmp_path, work):
    m, off = cost(tmp_path), cost(tmp_path, on=False)
    same = attention_s(m, work) == attention_s(off, work)
    assert same is (work.n_decode <= 1 or work.decode_max_history_tokens in (None, work.decode_min_history_tokens))
    # without a skew fit in the calibration (the RTX 4090's), the switch changes nothing
    assert attention_s(cost(tmp_path, with_skew=False), work) == attention_s(off, work)


def test_the_correction_is_off_by_default(tmp_path):
    assert CostConfig().skew_correction is False


def test_a_decode_run_equals_stepping_with_unequal_contexts(tmp_path):
    """Histories 3, 3, 3, 12 for 8 steps: the longest crosses 16 at step 5, where the bucket
    (and alpha: 0.1 -> 0.5) changes; every step equal to pricing it alone, bit for bit."""
    m = cost(tmp_path)
    run = m.decode_run_times(4, 21, 8, 12, 3)
    one = [m.iteration_time(StepWork(4, 21 + 4 * i, (), 0.0, 0, 12 + i, 3 + i)).total_s for i in range(8)]
    assert list(run) == one
    flat = cost(tmp_path, on=False).decode_run_times(4, 21, 8, 12, 3)
    assert np.all(run > flat)  # corrected throughout, more from step 5 (alpha 0.5)
    steps = run - flat
    assert steps[5] > 4 * steps[3]


JOIN = {
    "schema_version": 1, "name": "skew_join", "seed": 0, "model": "qwen3-32b",
    "hardware": {"accelerator": "rtx-pro-6000-server-96gb", "tp": 2},
    "cost": {"calibration": "rtx-pro-6000-server-96gb-llmservingsim"},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 2048, "max_num_seqs": 64},
    "workload": {"kind": "requests", "requests": [
        {"count": 1, "at_s": 0.0, "prompt_tokens": 100, "output_tokens": 300},
        {"count": 1, "at_s": 0.0, "prompt_tokens": 900, "output_tokens": 300},
        {"count": 1, "at_s": 0.0, "prompt_tokens": 3000, "output_tokens": 300},
        {"count": 1, "at_s": 1.0, "prompt_tokens": 7000, "output_tokens": 60},
        {"count": 1, "at_s": 3.0, "prompt_tokens": 1500, "output_tokens": 40}]},
}  # fmt: skip


def test_engine_fast_and_exact_modes_agree_with_the_correction(tmp_path):
    """Three decodes of unequal contexts; a 7,000-token prompt in chunks beside them (a
    fast run of chunks) that then decodes with them (the prefill joining a decode run),
    another later: with the correction, fast runs equal exact stepping."""
    from sim.run import build
    from sim.scenario import load_scenario

    path = tmp_path / "skew_join.yaml"
    path.write_text(yaml.safe_dump(JOIN))
    out = {}
    for exact, on in ((True, True), (False, True), (False, False)):
        sim = build(load_scenario(str(path)), **{"engine.exact": exact, "cost.skew_correction": on,
                                                 "engine.check_invariants": True})  # fmt: skip
        out[exact, on] = sim.run()
    exact, fast, off = out[True, True], out[False, True], out[False, False]
    pd.testing.assert_frame_equal(fast.requests, exact.requests)
    assert fast.summary["sim_time_s"] == exact.summary["sim_time_s"]
    assert fast.summary["engine_decisions"] < exact.summary["engine_decisions"] // 10
    assert fast.summary["sim_time_s"] > off.summary["sim_time_s"]  # the correction was applied


def test_shipped_calibrations_carry_upstreams_fit_where_it_is_enabled():
    pro = load_calibration("rtx-pro-6000-server-96gb-llmservingsim")
    fit = pro.model_tables(load_model("qwen3-32b")).for_tp(2).skew
    assert fit.alpha_default == 0.0649 and fit.alpha.shape == (9, 9, 5, 4, 7)
    # skew_fit.csv: 0,n<=128,sr<=40%,kvB<=4k,kp=0,0.0635
    assert fit.alpha_at(0, 128, 0.3, 3000, 0) == 0.0635
    assert fit.alpha_at(860, 128, 0.3, 3000, 0) == 0.0649  # not a profiled chunk size
    assert pro.model_tables(load_model("qwen3-32b")).for_tp(1).skew.alpha_default == 0.057
    rtx = load_calibration("rtx-4090-24gb-llmservingsim")  # skew_fit.enabled: false upstream
    assert rtx.model_tables(load_model("llama-3.1-8b")).for_tp(1).skew is None


def test_the_fit_survives_a_round_trip_and_a_bad_one_is_one_line(tmp_path):
    from sim.cost.calibration import as_mapping
    from sim.errors import ConfigError

    cal = cost(tmp_path).calibration
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(as_mapping(cal), sort_keys=False))
    a = cal.kernel_tables[0][1].for_tp(1).skew
    b = load_calibration(str(again)).kernel_tables[0][1].for_tp(1).skew
    assert np.array_equal(a.alpha, b.alpha, equal_nan=True)
    assert (a.alpha_default, a.prefill_chunk, a.n_decode_edges, a.skew_rate_edges, a.kv_decode_max_edges,
            a.kv_prefill_edges) == (b.alpha_default, b.prefill_chunk, b.n_decode_edges, b.skew_rate_edges,
                                    b.kv_decode_max_edges, b.kv_prefill_edges)  # fmt: skip
    tables = tiny_tables()
    tables["by_tp"][1]["skew_fit"]["alpha"] = "0.1 0.2"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((tmp_path / "skew-True.yaml").read_text()),
                                   "kernel_tables": {"tiny": tables}}))  # fmt: skip
    with pytest.raises(ConfigError, match=r"skew_fit.*alpha needs 72 values") as err:
        load_calibration(str(bad))
    assert "\n" not in str(err.value)

"""`kvsim breakeven`: E22 and E24 as the documented command lines, and bad input."""

import json
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "pause_economics.md"
BLOCK = re.compile(r'<!-- doc-command expect="([^"]+)" -->\s*```console\s*\n\$ (.+?)\n```', re.S)


def _doc_commands():
    found = BLOCK.findall(DOC.read_text())
    assert len(found) == 3  # E22, E24, the trial's F31 case
    return found


@pytest.mark.parametrize("expect,command", _doc_commands())
def test_documented_breakeven(run_cli, expect, command):
    code, out, err = run_cli(command)
    assert code == 0, err
    data = json.loads(out)
    for pair in expect.split(","):
        key, value = pair.split("=")
        decimals = len(value.split(".")[1])
        assert round(data[key], decimals) == pytest.approx(float(value)), key


def test_e24_decides_offload_and_e22_break_even_is_round_trip(run_cli):
    _, out, _ = run_cli(_doc_commands()[1][1])
    data = json.loads(out)
    assert data["decision"] == "offload" and data["break_even_wait_s"] == data["round_trip_s"]
    code, out, _ = run_cli(
        "kvsim breakeven --model llama-3-70b --params 70e9 --num-gpus 1 "
        "--context 16384 --link-gb-per-s 50 --prefill-tflops 400 --wait 0.1 "
        "--json"
    )
    assert json.loads(out)["decision"] == "hold"


def test_mla_moves_whole_latent_per_gpu(run_cli):
    code, out, _ = run_cli(
        "kvsim breakeven --model deepseek-v3 --num-gpus 8 --context 1000 "
        "--link-gb-per-s 50 --prefill-tflops 1000 --json"
    )
    data = json.loads(out)
    assert data["kv_bytes_per_gpu"] == data["kv_bytes"] == 1000 * 70272
    assert data["kv_bytes_all_gpus"] == 8 * 1000 * 70272  # every rank holds the latent
    assert data["recompute_flops"] == pytest.approx(2 * 37e9 * 1000)


def test_mla_hold_cost_is_every_rank(run_cli):
    """The probe's command: DeepSeek-V3 (576 x 2 B x 61 layers = 70,272 B per token on each
    of 8 ranks), 16,384 tokens held 10 s: 8 x 16,384 x 70,272 = 9,210,691,584 B held,
    92.10691584 GB*s, what the engine's paused_hbm_gb_s charges for the same pause (not
    one copy's 11.51336448); the text table names the all-GPU figure too."""
    cmd = (
        "kvsim breakeven --model deepseek-v3 --gpu h200-141gb --num-gpus 8 --context 16384 "
        "--link-gb-per-s 50 --prefill-mfu 0.45 --wait 10"
    )
    code, out, err = run_cli(cmd + " --json")
    assert code == 0, err
    data = json.loads(out)
    assert data["kv_bytes"] == data["kv_bytes_per_gpu"] == 1_151_336_448
    assert data["kv_bytes_all_gpus"] == 9_210_691_584
    assert data["hold_gb_s"] == pytest.approx(92.10691584, rel=1e-12)
    code, out, err = run_cli(cmd)
    assert code == 0, err
    assert "held on all GPUs" in out and "9.211 GB" in out and "92.11 GB*s" in out  # 4 significant digits


def test_attention_term_and_shadow_prices(run_cli):
    base = (
        "kvsim breakeven --model llama-3-70b --params 70e9 --num-gpus 1 --context 4096 "
        "--link-gb-per-s 50 --prefill-tflops 400 --json"
    )
    plain = json.loads(run_cli(base)[1])
    att = json.loads(run_cli(base + " --attention")[1])
    # causal by default, as the engine prices a prefill: 4 L d S (S + 1) / 2, exactly
    assert att["recompute_flops"] - plain["recompute_flops"] == 4 * 80 * 8192 * (4096 * 4097 // 2)
    assert att["recompute_s"] == (2 * 70e9 * 4096 + 4 * 80 * 8192 * (4096 * 4097 // 2)) / 400e12
    full = json.loads(run_cli(base + " --attention --attention-mask full")[1])
    assert full["recompute_flops"] - plain["recompute_flops"] == 4 * 80 * 8192 * 4096**2  # F23
    # the mask counts only the attention term: without --attention it changes nothing
    assert json.loads(run_cli(base + " --attention-mask full")[1]) == plain
    priced = json.loads(run_cli(base + " --mu-ratio 2 --stall-s 0.5")[1])
    assert priced["break_even_wait_s"] == pytest.approx(2 * plain["round_trip_s"] + 0.5)


@pytest.mark.parametrize(
    "args,needle",
    [
        ("--model llama-3-70b --context 100 --prefill-tflops 400", "give --link-gb-per-s"),
        ("--model llama-3-70b --context 100 --link-gb-per-s 50", "give --prefill-tflops"),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --context 100 --prefill-mfu 0.5 --prefill-tflops 9",
            "not both",
        ),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --tp 4 --context 100",
            "must equal tp x pp",
        ),
        ("--model llama-3-70b --gpu h100-sxm-80gb --context 100 --mu-ratio 0.5", "--mu-ratio must be > 1, got 0.5"),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --context 100 --attention --attention-mask diagonal",
            "--attention-mask must be causal or full",
        ),
    ],
)
def test_bad_input_one_line(run_cli, args, needle):
    code, _, err = run_cli("kvsim breakeven " + args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_context_beyond_window_is_a_warning(run_cli):
    """llama-3-8b's window is 8,192 tokens: beyond it, compute anyway, exit 0, warn."""
    base = (
        "kvsim breakeven --model llama-3-8b --num-gpus 1 --link-gb-per-s 50 "
        "--prefill-tflops 400 --context "
    )
    code, out, err = run_cli(base + "8192 --json")
    assert code == 0 and json.loads(out)["warnings"] == [] and err == ""
    code, out, err = run_cli(base + "16384 --json")
    assert code == 0
    data = json.loads(out)  # stdout is still exactly one JSON object
    warning = "context 16,384 tokens exceeds llama-3-8b's window of 8,192 tokens (max_context_tokens)"
    assert data["warnings"] == [warning]
    assert data["kv_bytes"] == 16384 * 131072  # the figures are still computed
    assert err == f"kvsim: warning: {warning}\n"
    code, out, err = run_cli(base + "16384")
    assert code == 0 and "Pause economics at 16,384 tokens" in out and "warning" not in out
    assert err == f"kvsim: warning: {warning}\n"


def test_documented_e24_fits_its_window_and_the_8k_profile_warns(run_cli):
    command = _doc_commands()[1][1]
    assert json.loads(run_cli(command)[1])["warnings"] == []
    old = command.replace("llama-3.1-70b", "llama-3-70b")
    data = json.loads(run_cli(old)[1])
    assert data["warnings"] == [
        "context 32,768 tokens exceeds llama-3-70b's window of 8,192 tokens (max_context_tokens)"
    ]
    assert data["recompute_s"] == json.loads(run_cli(command)[1])["recompute_s"]


BREAKEVEN = "kvsim breakeven --model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --context 32768"


@pytest.mark.parametrize(
    "flag,message",
    [
        # before: ZeroDivisionError traceback; a NaN wait silently accepted
        ("--link-gb-per-s inf", "--link-gb-per-s must be a finite number in [1e-06, 1000000], got inf"),
        ("--link-gb-per-s 0", "--link-gb-per-s must be in [1e-06, 1000000], got 0"),
        ("--link-gb-per-s nan", "--link-gb-per-s must be a finite number in [1e-06, 1000000], got nan"),
        ("--wait nan", "--wait must be a finite number in [0, 1e+09], got nan"),
        ("--wait -1", "--wait must be in [0, 1e+09], got -1"),
        ("--prefill-tflops inf", "--prefill-tflops must be a finite number in [1e-06, 1e+12], got inf"),
        ("--prefill-mfu nan", "--prefill-mfu must be a finite number in (0, 1], got nan"),
        ("--mu-ratio nan", "--mu-ratio must be a number > 1 or inf, got nan"),
        ("--stall-s -inf", "--stall-s must be a finite number in [0, 1e+09], got -inf"),
        ("--params -1", "--params must be in (0, 1e+15], got -1"),
        ("--pp 0", "--pp must be in [1, 1000000], got 0"),
    ],
)
def test_number_flags_are_finite_and_in_range(run_cli, flag, message):
    code, out, err = run_cli(f"{BREAKEVEN} {flag}")
    assert (code, out, err) == (2, "", f"kvsim: error: {message}\n")


def test_an_infinite_mu_ratio_is_the_default_and_allowed(run_cli):
    code, out, _ = run_cli(f"{BREAKEVEN} --link-gb-per-s 64 --mu-ratio inf --json")
    assert code == 0
    assert json.loads(out)["break_even_wait_s"] == json.loads(out)["round_trip_s"]


def test_the_prefill_rate_says_its_basis(run_cli):
    """The recompute time rests on the prefill rate: the output says where it comes from.
    nemotron-h-8b on one H100 at the default MFU 0.45: 0.45 x 989.4 TFLOP/s = 445.2."""
    base = "kvsim breakeven --model nemotron-h-8b --gpu h100-sxm-80gb --context 4096 --json"
    basis = json.loads(run_cli(base)[1])["prefill_rate_basis"]
    assert basis.startswith("445.2 TFLOP/s = MFU 0.45 (the default, assumed)")
    assert "unvalidated" in basis
    given = json.loads(run_cli(base + " --prefill-mfu 0.3")[1])["prefill_rate_basis"]
    assert "MFU 0.3 (--prefill-mfu as given)" in given and "unvalidated" in given
    tf = json.loads(run_cli(base.replace("--gpu h100-sxm-80gb ", "--link-gb-per-s 50 ")
                            + " --prefill-tflops 400")[1])["prefill_rate_basis"]  # fmt: skip
    assert tf.startswith("400.0 TFLOP/s (--prefill-tflops as given)")
    code, out, _ = run_cli(base.replace(" --json", ""))
    assert code == 0 and "prefill rate (recompute)" in out


# ------------------------------------------------------- the engine's decision and count
TRIAL = "kvsim breakeven --model llama-3.1-8b --gpu h100-sxm-80gb --context 8192"


def test_the_decision_is_the_engine_policys(run_cli):
    """The third trial's cases (llama-3.1-8b, 8,192 tokens on an H100): at 10,000 TFLOP/s
    the recompute (13.16 ms) beats the 19.88 ms reload, so break_even drops (F31); an hour
    on a DGX H100 goes to NVMe (an hour with no node profile: host DRAM, no NVMe tier).
    ``decision`` keeps its meaning (F33's hold or offload alone)."""
    data = json.loads(run_cli(f"{TRIAL} --prefill-tflops 10000 --wait 5 --json")[1])
    assert data["decision"] == "offload" and data["policy_decision"] == "recompute"
    assert "F31" in data["policy_reason"] and data["horizon_s"] == 60.0
    data = json.loads(run_cli(f"{TRIAL} --node dgx-h100 --wait 3600 --json")[1])
    assert data["policy_decision"] == "offload_nvme" and data["nvme_bw_bytes_per_s"] == 56e9
    data = json.loads(run_cli(f"{TRIAL} --wait 3600 --json")[1])
    assert data["policy_decision"] == "offload_host" and data["host_free_bytes"] is None
    data = json.loads(run_cli(f"{TRIAL} --node dgx-h100 --wait 30 --horizon-s 10 --json")[1])
    assert data["policy_decision"] == "offload_nvme" and data["horizon_s"] == 10.0
    # --node alone names the GPU (its profile's accelerator): the same figures
    alone = json.loads(run_cli(TRIAL.replace("--gpu h100-sxm-80gb", "--node dgx-h100") + " --json")[1])
    assert alone["reload_s"] == data["reload_s"] and alone["policy_decision"] is None


def test_engine_count_beside_f30(run_cli):
    """--attention: F30 + F23's causal term = 149.16 TFLOP; the engine's count 131.94
    (the layers' GEMMs, one LM-head row, the same attention): -11.5 %."""
    data = json.loads(run_cli(f"{TRIAL} --attention --json")[1])
    assert round(data["recompute_flops"] / 1e12, 2) == 149.16
    assert data["engine_recompute_flops"] == 131_944_593_489_920
    assert data["engine_recompute_chunks"] == [8192] and data["engine_recompute_pricing"] == "per_group"
    code, out, _ = run_cli(f"{TRIAL} --attention")
    assert code == 0 and "131.9 TFLOP (-11.5% vs the recompute above" in out
    data = json.loads(run_cli(TRIAL.replace("--gpu h100-sxm-80gb", "--link-gb-per-s 50 --prefill-tflops 400") + " --json")[1])
    assert data["engine_recompute_flops"] is None  # no accelerator profile to price with


def test_hold_cost_and_decision_in_the_table(run_cli):
    """A 0.5 s hold of 1,073,741,824 B is 0.5369 GB*s (four significant digits, not
    "0.5"); the decision row names the policy's action and reason."""
    code, out, _ = run_cli(f"{TRIAL} --wait 0.5")
    assert code == 0 and "0.5369 GB*s" in out
    assert "offload_host: wait within the host horizon" in out
    out = run_cli(f"{TRIAL} --prefill-tflops 10000 --wait 5")[1]
    assert "recompute: no tier with room reloads faster than recompute (F31)" in " ".join(out.split())


@pytest.mark.parametrize(
    "flag,needle",
    [("--horizon-s 0", "--horizon-s must be"), ("--horizon-s nan", "--horizon-s must be"),
     ("--node no-such-node", "no-such-node")],
)  # fmt: skip
def test_new_flags_bad_input_one_line(run_cli, flag, needle):
    code, _, err = run_cli(f"{TRIAL} --wait 5 {flag}")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1

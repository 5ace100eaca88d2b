"""`kvsim plan` and `kvsim profiles`: JSON contract, flag handling, one-line errors."""

import json

import pytest

E1 = (
    "kvsim plan --model llama-3-70b --params 70.6e9 --gpu h100-sxm-80gb --gpu-mem-gib 80 "
    "--num-gpus 8 --reserve-gb-per-gpu 2.5 --context 8192,32768,131072"
)


def test_plan_json_contract(run_cli):
    code, out, _ = run_cli(E1 + " --json")
    assert code == 0
    data = json.loads(out)
    for key in (
        "kv_bytes_per_token",
        "kv_bytes_per_token_per_gpu",
        "weights_bytes",
        "kv_pool_bytes",
        "usable_kv_pool_bytes",
        "contexts",
    ):
        assert key in data
    assert data["kv_bytes_per_token"] == 327680
    assert data["kv_bytes_per_token_per_gpu"] == 40960
    assert data["weights_bytes"] == pytest.approx(141.2e9)
    assert data["kv_pool_bytes"] / 1e9 == pytest.approx(526.0, abs=0.01)
    assert [c["max_concurrent"] for c in data["contexts"]] == [195, 48, 12]
    assert [c["context_tokens"] for c in data["contexts"]] == [8192, 32768, 131072]
    assert all(
        "max_concurrent_shared" in c and c["max_concurrent_shared"] is None
        for c in data["contexts"]
    )


def test_context_flag_repeats(run_cli):
    code, out, _ = run_cli(
        "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 "
        "--context 1024 --context 2048,4096 --json"
    )
    assert code == 0
    assert [c["context_tokens"] for c in json.loads(out)["contexts"]] == [1024, 2048, 4096]


def test_gb_and_gib_flags_are_exclusive(run_cli):
    code, _, err = run_cli(E1 + " --gpu-mem-gb 80")
    assert code == 2 and "not both" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            "--model llama-70b --gpu h100-sxm-80gb --num-gpus 8 --context 8192",
            "unknown model 'llama-70b'; valid: ",
        ),
        (
            "--model llama-3-70b --gpu h100 --num-gpus 8 --context 8192",
            "unknown accelerator 'h100'; valid: ",
        ),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --tp 3 --context 8192",
            "multiple of tp x pp",
        ),
        ("--model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --context 8k", "not a whole number"),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --context 8192 --kv-dtype fp4",
            "--kv-dtype: unknown dtype 'fp4'; valid:",
        ),
        (
            "--model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --context 8192 --set layers=3",
            "expected PREFIX.FIELD=VALUE",
        ),
    ],
)
def test_bad_input_is_one_line(run_cli, args, needle):
    code, out, err = run_cli("kvsim plan " + args)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_set_overrides_profile_field(run_cli):
    code, out, _ = run_cli(
        "kvsim plan --model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 "
        "--context 8192 --set model.num_kv_heads=16 --json"
    )
    assert code == 0
    assert json.loads(out)["kv_bytes_per_token"] == 2 * 327680


def test_gpt_oss_plan_holds_the_checkpoints_weights(run_cli):
    """gpt-oss-120b on one H100: the checkpoint's 65,190,502,400 B of weights (MXFP4
    experts, bf16 rest; tests/profiles/test_profiles.py derives them), not 116.8e9 x 0.5 B
    = 58.4e9; the pool 0.9 x 85,899,345,920 - 65,190,502,400 = 12,118,908,928 B (was
    18,909,411,328). A stated --weight-dtype still prices every parameter at it (F34)."""
    base = "kvsim plan --model gpt-oss-120b --gpu h100-sxm-80gb --num-gpus 1 --context 8192 --json"
    code, out, _ = run_cli(base)
    data = json.loads(out)
    assert code == 0 and data["weights_bytes_per_gpu"] == 65_190_502_400
    assert data["kv_pool_bytes_per_gpu"] == 12_118_908_928
    code, out, _ = run_cli(base + " --weight-dtype int4")
    assert code == 0 and json.loads(out)["weights_bytes_per_gpu"] == 116.8e9 * 0.5


def test_set_with_invalid_value_names_field(run_cli):
    code, _, err = run_cli(
        "kvsim plan --model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 "
        "--context 8192 --set model.num_kv_heads=-1"
    )
    assert code == 2 and "num_kv_heads" in err and len(err.strip().splitlines()) == 1


def test_profiles_list_and_show(run_cli):
    code, out, _ = run_cli("kvsim profiles list --json")
    assert code == 0
    data = json.loads(out)
    names = {k: [p["name"] for p in v] for k, v in data.items()}
    for need in (
        "v100-32gb",
        "a100-80gb",
        "h100-sxm-80gb",
        "h200-141gb",
        "b200-192gb",
        "gh200-96gb",
        "mi300x-192gb",
    ):
        assert need in names["accelerator"]
    for need in (
        "llama-3-70b",
        "llama-3-8b",
        "llama-3.1-405b",
        "deepseek-v3",
        "mixtral-8x7b",
        "gpt-oss-120b",
    ):
        assert need in names["model"]
    code, out, _ = run_cli("kvsim profiles show deepseek-v3 --json")
    shown = json.loads(out)
    assert code == 0 and shown["kv_bytes_per_token"] == 70272 and shown["attention"] == "mla"
    code, out, _ = run_cli("kvsim profiles list --kind model")
    assert code == 0 and "llama-3-70b" in out
    code, _, err = run_cli("kvsim profiles show nope")
    assert code == 2 and "unknown profile 'nope'" in err
    code, _, err = run_cli("kvsim profiles list --kind gpu")
    assert code == 2 and "valid: accelerator, model, node" in err


@pytest.mark.parametrize("args,needle", [
    ("plan --model llama-3-70b", "Missing option '--gpu'"),
    ("plan --model a --gpu b --num-gpus many --context 1", "Invalid value for '--num-gpus'"),
    ("no-such-command", "No such command"),
])
def test_usage_errors_are_messages_not_tracebacks(run_cli, args, needle):
    code, _, err = run_cli("kvsim " + args)
    assert code == 2 and needle in err and "Traceback" not in err


PLAN = "kvsim plan --model llama-3-70b --gpu h100-sxm-80gb --num-gpus 8 --context 8192"


@pytest.mark.parametrize(
    "flag,message",
    [
        # before: OverflowError, ValueError tracebacks; silently accepted negatives
        ("--gpu-mem-gb inf", "--gpu-mem-gb must be a finite number in (0, 1e+09], got inf"),
        ("--gpu-mem-gib -80", "--gpu-mem-gib must be in (0, 1e+09], got -80"),
        ("--reserve-gb-per-gpu nan", "--reserve-gb-per-gpu must be a finite number in [0, 1e+09], got nan"),
        ("--reserve-gb-per-gpu -100", "--reserve-gb-per-gpu must be in [0, 1e+09], got -100"),
        ("--reserve-gib-per-gpu inf", "--reserve-gib-per-gpu must be a finite number in [0, 1e+09], got inf"),
        ("--params nan", "--params must be a finite number in (0, 1e+15], got nan"),
        ("--params -1", "--params must be in (0, 1e+15], got -1"),
        ("--params 1e300", "--params must be in (0, 1e+15], got 1e+300"),
        ("--output-tokens -100", "--output-tokens must be in [0, 1e+12], got -100"),
        ("--headroom nan", "--headroom must be a finite number in [0, 1), got nan"),
        ("--headroom 1", "--headroom must be in [0, 1), got 1"),
        ("--gpu-memory-utilization -inf", "--gpu-memory-utilization must be a finite number in (0, 1], got -inf"),
        ("--shared-prefix-tokens -5", "--shared-prefix-tokens must be in [0, 1e+12], got -5"),
        ("--num-gpus 0", "--num-gpus must be in [1, 1000000], got 0"),
        ("--pp 0", "--pp must be in [1, 1000000], got 0"),
        ("--tp -8", "--tp must be in [1, 1000000], got -8"),
        ("--context 1e300", "--context must be in [1, 1e+12], got 1e+300"),
        ("--context 0", "--context must be in [1, 1e+12], got 0"),
        ("--context inf", "--context: 'inf' is not a whole number"),
        ("--context 1.5e0", "--context: '1.5e0' is not a whole number"),
    ],
)
def test_number_flags_are_finite_and_in_range(run_cli, flag, message):
    code, out, err = run_cli(f"{PLAN} {flag}")
    assert (code, out, err) == (2, "", f"kvsim: error: {message}\n")

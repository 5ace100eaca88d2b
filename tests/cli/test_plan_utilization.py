"""`kvsim plan --gpu-memory-utilization` (F34's u) and the plan's warnings.

llama-3-8b on one a100-80gb: 80 GiB per GPU, 8.03e9 x 2 B of weights, 131,072 KV bytes per
token, a window of 8,192 tokens (its profile's max_context_tokens).
"""

import json
import math

import pytest

from sim.sizing.plan import RESERVE_ALONE_WARNING
from sim.units import GiB

BASE = "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 --context 4096"
MEM = 80 * GiB
WEIGHTS = 8.03e9 * 2
M_TOKEN = 131_072


def _plan(run_cli, extra: str = "") -> tuple[dict, str]:
    code, out, err = run_cli(f"{BASE} {extra} --json")
    assert code == 0, err
    return json.loads(out), err


def _expect(data: dict, util: float, reserve: float = 0.0) -> None:
    pool = MEM * util - WEIGHTS - reserve
    assert data["gpu_memory_utilization"] == util
    assert data["kv_pool_bytes_per_gpu"] == pytest.approx(pool, rel=1e-12)
    assert data["contexts"][0]["max_concurrent"] == math.floor(pool / (4096 * M_TOKEN))


def test_default_is_0_9_without_memory_or_reserve_figures(run_cli):
    data, err = _plan(run_cli)
    _expect(data, 0.9)
    assert data["kv_pool_bytes"] == 61_249_411_328  # 0.9 x 80 GiB - 16.06e9 B
    assert data["contexts"][0]["max_concurrent"] == 114  # 130 at utilization 1.0
    assert data["warnings"] == [] and err == ""


@pytest.mark.parametrize(
    "extra,reserve",
    [
        ("--reserve-gb-per-gpu 0", 0.0),
        ("--reserve-gib-per-gpu 1", GiB),
        ("--gpu-mem-gib 80", 0.0),
        ("--gpu-mem-gb 85.89934592", 0.0),
    ],
)
def test_default_is_1_0_with_a_memory_or_reserve_figure(run_cli, extra, reserve):
    data, _ = _plan(run_cli, extra)
    _expect(data, 1.0, reserve)


@pytest.mark.parametrize(
    "extra,warned",
    [
        ("--reserve-gb-per-gpu 2", True),  # 1.0 x 80 GiB - 2 GB: a larger pool than 0.9 gives
        ("--reserve-gb-per-gpu 0", False),  # no reserve: nothing it replaces
        ("--gpu-mem-gib 80 --reserve-gb-per-gpu 2", False),  # F34's own figures (E1)
        ("--gpu-memory-utilization 1 --reserve-gb-per-gpu 2", False),  # asked for
    ],
)
def test_a_reserve_alone_says_it_switched_the_utilization(run_cli, extra, warned):
    """A probe's trap: 0.9 x 80 GiB - 16.06 GB = 61.25 GB of pool without a reserve, but
    1.0 x 80 GiB - 16.06 GB - 2 GB = 67.84 GB with a 2 GB reserve: adding a reserve grew
    the pool, silently. The plan now says why, and how to plan as kvsim run does."""
    data, err = _plan(run_cli, extra)
    assert (RESERVE_ALONE_WARNING in data["warnings"]) is warned
    assert (RESERVE_ALONE_WARNING in err) is warned
    if warned:
        assert data["kv_pool_bytes_per_gpu"] == pytest.approx(MEM - WEIGHTS - 2e9, rel=1e-12)


@pytest.mark.parametrize(
    "extra,util,reserve",
    [
        ("--gpu-memory-utilization 1.0", 1.0, 0.0),
        ("--gpu-memory-utilization 0.5 --reserve-gb-per-gpu 1", 0.5, 1e9),
        ("--gpu-memory-utilization 0.95 --gpu-mem-gib 80", 0.95, 0.0),
    ],
)
def test_explicit_utilization_wins(run_cli, extra, util, reserve):
    data, _ = _plan(run_cli, extra)
    _expect(data, util, reserve)


def test_table_prints_the_utilization_used(run_cli):
    code, out, _ = run_cli(BASE)
    assert code == 0
    assert "GPU memory utilization (F34)" in out and "0.9 x memory = 77.309 GB" in out
    _, out, _ = run_cli(BASE + " --reserve-gb-per-gpu 2")
    assert "1 x memory = 85.899 GB" in out


@pytest.mark.parametrize("value", ["0", "-0.5", "1.01"])
def test_utilization_out_of_range_is_one_line(run_cli, value):
    code, _, err = run_cli(f"{BASE} --gpu-memory-utilization {value}")
    assert code == 2 and "--gpu-memory-utilization must be in (0, 1]" in err
    assert len(err.strip().splitlines()) == 1


def test_weights_beyond_memory_warn_exit_0_and_say_the_numbers(run_cli):
    """Issue: 0 trajectories fitting (say why) is a warning, exit 0 (it was exit 2)."""
    code, out, err = run_cli(f"{BASE} --gpu-memory-utilization 0.15 --json")
    assert code == 0
    data = json.loads(out)
    assert data["kv_pool_bytes_per_gpu"] == 0 and data["usable_kv_pool_bytes"] == 0
    assert [c["max_concurrent"] for c in data["contexts"]] == [0]
    # 0.15 x 80 GiB = 12.885 GB < 16.060 GB of weights: one warning, the reason (the
    # per-context "0 fit" lines would only repeat it)
    assert data["warnings"] == [
        "weights exceed memory x utilization: 16.060 GB of weights per GPU > 85.899 GB x "
        "utilization 0.15 = 12.885 GB, so the KV pool is 0 and no trajectory fits (raise "
        "--num-gpus or --tp, or lower --params)"
    ]
    assert err == f"kvsim: warning: {data['warnings'][0]}\n"


def test_reserve_beyond_what_the_weights_leave_warns(run_cli):
    code, out, err = run_cli(f"{BASE} --reserve-gb-per-gpu 80 --shared-prefix-tokens 100")
    assert code == 0 and "max concurrent" in out
    assert err.startswith(
        "kvsim: warning: weights and reserve exceed memory x utilization: 16.060 GB of "
        "weights + 80.000 GB reserved per GPU > 85.899 GB x utilization 1 = 85.899 GB,"
    )
    assert len(err.splitlines()) == 2  # and the reserve-alone note
    assert err.splitlines()[1] == f"kvsim: warning: {RESERVE_ALONE_WARNING}"


def test_context_beyond_window_warns_and_exits_0(run_cli):
    code, out, err = run_cli(
        "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 --context 8192,16384 --json"
    )
    assert code == 0
    data = json.loads(out)  # stdout is still exactly one JSON object
    assert data["warnings"] == [
        "context 16,384 tokens exceeds llama-3-8b's window of 8,192 tokens (max_context_tokens)"
    ]
    assert [c["max_concurrent"] for c in data["contexts"]] == [57, 28]  # still computed
    assert err == f"kvsim: warning: {data['warnings'][0]}\n"


def test_output_tokens_past_window_warn(run_cli):
    assert _plan(run_cli, "--context 8192")[0]["warnings"] == []  # BASE's 4096 and 8192: fine
    data, _ = _plan(run_cli, "--context 8192 --output-tokens 1")
    assert data["warnings"] == [
        "context 8,192 + 1 output = 8,193 tokens exceeds llama-3-8b's window of 8,192 tokens "
        "(max_context_tokens)"
    ]


def test_window_warning_in_table_mode_goes_to_stderr(run_cli):
    code, out, err = run_cli(
        "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 --context 16384"
    )
    assert code == 0 and "16,384" in out and "warning" not in out
    assert err.startswith("kvsim: warning: context 16,384 tokens exceeds llama-3-8b's window")


def test_nothing_fits_warns_with_the_reason(run_cli):
    code, out, err = run_cli(
        "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 --context 8000 "
        "--gpu-memory-utilization 0.19 --json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["contexts"][0]["max_concurrent"] == 0
    # usable pool 0.19 x 80 GiB - 16.06e9 = 0.261 GB; one trajectory 8000 x 131072 = 1.049 GB
    assert data["warnings"] == [
        "context 8,000: 0 trajectories fit: one needs 1.049 GB of KV per GPU and the usable "
        "KV pool per GPU is 0.261 GB"
    ]
    assert "kvsim: warning: context 8,000: 0 trajectories fit" in err


@pytest.mark.parametrize(
    "extra,reason",
    [
        ("--gpu-memory-utilization 0.19", "the prefix alone needs 0.524 GB of KV per GPU"),
        (
            "--gpu-memory-utilization 0.2 --headroom 0.1",
            "the prefix (0.524 GB per GPU) plus one trajectory's private 0.524 GB, and the "
            "usable KV pool per GPU is 1.008 GB after 10% headroom",
        ),
    ],
)
def test_nothing_fits_with_shared_prefix_says_why(run_cli, extra, reason):
    code, out, _ = run_cli(
        "kvsim plan --model llama-3-8b --gpu a100-80gb --num-gpus 1 --context 8000 "
        f"--shared-prefix-tokens 4000 {extra} --json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["contexts"][0]["max_concurrent_shared"] == 0
    shared = [w for w in data["warnings"] if "with the shared prefix" in w]
    assert len(shared) == 1 and reason in shared[0]


def test_prefix_covering_the_whole_trajectory_is_one_line(run_cli):
    code, _, err = run_cli(f"{BASE} --shared-prefix-tokens 4096")
    assert code == 2 and "capacity is unbounded" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1

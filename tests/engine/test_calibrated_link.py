"""A run's host link: a scenario naming a calibration copies KV at the calibration's fitted
pinned-copy latency and bandwidth, per direction, unless it states the link itself."""

from __future__ import annotations

import pytest
import yaml

from sim.errors import ConfigError
from sim.run import build, run_scenario

KV_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # llama-3-8b, TP 1: 131,072 B
TOKENS = 4096  # the KV at the pause: a 4,096-token task and one reply token
STATE = TOKENS * KV_PER_TOKEN  # 536,870,912 B over the link, each way

# one agent trajectory offloads its KV to host DRAM over a 5 s tool call, then reloads it
SCENARIO = {
    "schema_version": 1,
    "name": "calibrated_link",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "tp": 1, "node": "dgx-h100"},
    "cost": {"calibration": "synthetic-example"},
    "allocator": {"kind": "paged", "block_size": 16},
    "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 8192},
    "pause_policy": {"kind": "offload_host", "predictor": {"mode": "oracle"}},
    "workload": {
        "kind": "agent",
        "num_trajectories": 1,
        "arrival": {"kind": "fixed"},
        "turns": 2,
        "system_prompt_tokens": 0,
        "tool_tokens": 0,
        "task_tokens": TOKENS,
        "output_tokens": 1,
        "observation_tokens": 64,
        "pause_s": 5.0,
    },
}


def _copies(**overrides) -> tuple[float, float, float]:
    """(copy-out seconds, copy-in seconds, resume stall) of the one pause."""
    overrides.setdefault("engine.check_invariants", True)
    res = run_scenario(SCENARIO, **overrides)
    (p,) = res.pauses.itertuples()
    assert p.moved_to == "offload_host" and p.state_bytes == STATE
    return p.copy_out_done_s - p.start_s, p.copy_in_done_s - p.reload_start_s, p.resume_stall_s


def test_an_offload_takes_the_calibrated_time():
    out_s, in_s, stall_s = _copies()
    assert out_s == pytest.approx(9e-6 + STATE / 52.5e9, rel=1e-12)  # d2h fit: 10.235 ms
    assert in_s == pytest.approx(8e-6 + STATE / 53e9, rel=1e-12)  # h2d fit: 10.138 ms
    assert stall_s == pytest.approx(in_s, rel=1e-12)  # naive resume: the copy-in
    # without the calibration: the H100 profile's 54 GB/s effective DMA, no overhead
    plain_out, plain_in, _ = _copies(**{"cost.calibration": None})
    assert plain_out == pytest.approx(STATE / 54e9, rel=1e-12)
    assert plain_in == pytest.approx(STATE / 54e9, rel=1e-12)
    assert out_s > plain_out * 1.02 and in_s > plain_in * 1.01


def test_the_policies_see_the_calibrated_link():
    t = build(SCENARIO).resolved.tiers
    assert (t.link_bw_bytes_per_s, t.link_overhead_s) == (53e9, 8e-6)  # h2d: the reload
    assert (t.d2h_bw_bytes_per_s, t.d2h_overhead_s) == (52.5e9, 9e-6)


def test_the_scenarios_own_link_figures_win():
    out_s, in_s, _ = _copies(**{"hardware.host_link_bw_bytes_per_s": 64e9})
    assert out_s == pytest.approx(9e-6 + STATE / 64e9, rel=1e-12)  # fitted latency kept
    assert in_s == pytest.approx(8e-6 + STATE / 64e9, rel=1e-12)
    out_s, in_s, _ = _copies(
        **{"hardware.host_link_bw_bytes_per_s": 64e9, "hardware.host_link_overhead_s": 0.0}
    )
    assert out_s == pytest.approx(STATE / 64e9, rel=1e-12)  # E24's link, no latency
    assert in_s == pytest.approx(STATE / 64e9, rel=1e-12)


def test_an_unknown_calibration_points_at_its_scenario_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "cost": {"calibration": "no-such-device"}}))
    with pytest.raises(ConfigError) as exc:
        build(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and "cost.calibration" in msg and "synthetic-example" in msg
    line = path.read_text().splitlines().index("  calibration: no-such-device") + 1
    assert f"s.yaml:{line}" in msg

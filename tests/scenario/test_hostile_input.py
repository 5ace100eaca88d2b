"""Inputs that used to hang or explode (issue section 2): alias bombs, deep nesting,
duplicate keys, bytes that are not UTF-8, non-finite and out-of-range numbers, a run whose
clock never stops, pause policies that name a tier the hardware lacks.

Every case must end in bounded time and memory with one ``KvsimError`` line naming the
file (and line) — never a traceback, never a hang.
"""

from __future__ import annotations

import math
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.engine.node import SimTimeLimitError
from sim.errors import ConfigError
from sim.run import build, run_scenario
from sim.scenario import load_scenario, parse_set
from sim.scenario.schema import EngineConfig
from sim.workload.distributions import MAX_TOKENS, Constant, LogNormal
from sim.yamlio import MAX_DEPTH, MAX_NODES, load_yaml, loads_yaml

ROOT = Path(__file__).resolve().parents[2]
SWARM = ROOT / "workloads" / "agent_swarm.yaml"  # agent workload, no node: no host tier
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"  # a `requests` workload
SHIPPED = sorted(
    [
        *ROOT.glob("workloads/*.yaml"),
        *ROOT.glob("benchmarks/*.yaml"),
        *ROOT.glob("tests/golden/scenarios/*.yaml"),
    ]
)
SMALL = {"workload.num_trajectories": 2, "workload.turns": 3, "workload.fork": None}


def billion_laughs(levels: int = 10) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def kvsim_limited(*args: str, as_bytes: int = 1 << 30, timeout_s: int = 600):
    """``kvsim ARGS`` in a subprocess under an address-space limit; ``timeout_s`` is a hang
    guard only (a loaded machine may be slow; a hang never ends)."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))

    code = "import sys; from sim.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=limit,
        cwd=ROOT,
    )


# ------------------------------------------------------------------------- YAML loader
def test_alias_bomb_is_refused_in_bounded_time_and_memory(tmp_path):
    """A 10-level billion laughs under a scenario key: refused at the line where the
    expansion passes the bound, under a 1 GiB address-space limit."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs() + SWARM.read_text())
    proc = kvsim_limited("validate", str(bomb))  # its timeout is the hang guard
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    # a5 is the first level past 200,000 nodes (10^6 scalars); one line names file and line
    assert proc.stderr.strip().splitlines() == [
        f"kvsim: error: {bomb}:6: YAML document expands to more than {MAX_NODES:,} nodes "
        "(aliases expanded); refused as an alias bomb or an oversized file"
    ]


def test_alias_bomb_in_process_is_refused_before_any_expansion():
    """Counted in bytes, not seconds: refusing the bomb allocates next to nothing (the
    expansion it refuses would be 10^10 scalars; even the 200,000 nodes of the bound
    would take megabytes)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"^bomb.yaml:6: YAML document expands"):
            loads_yaml(billion_laughs(), "bomb.yaml")
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1 << 20


def test_node_bound_counts_aliases_exactly():
    """1,001-node list anchored once, then referenced k times: the document's expanded size
    is 1 + 2 keys + 1,001 + 1 + 1,001 k; refused exactly when that passes MAX_NODES."""
    base = "a: &x [" + ", ".join(["1"] * 1000) + "]\n"

    def doc(k: int) -> str:
        return base + "b: [" + ", ".join(["*x"] * k) + "]\n"

    fits = (MAX_NODES - 1005) // 1001
    data, _ = loads_yaml(doc(fits))
    assert len(data["b"]) == fits and data["b"][0] is data["a"]  # shared, not copied
    with pytest.raises(ConfigError, match="expands to more than 200,000 nodes"):
        loads_yaml(doc(fits + 1))


def test_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"^f.yaml:1: alias \*a is inside the node it names$"):
        loads_yaml("a: &a [1, *a]\n", "f.yaml")


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused(opener, closer):
    text = "x: " + opener * 5000 + "1" + closer * 5000 + "\n"
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads_yaml(text, "deep.yaml")


def test_deep_flow_nesting_is_refused_where_it_is_scanned():
    # refused at the opening bracket past the bound, before the scanner reads on (its
    # look-ahead for a key would otherwise run into the bad character after the brackets)
    text = "x: " + "[" * (MAX_DEPTH + 1) + "@ never scanned"
    with pytest.raises(ConfigError, match=f"^deep.yaml:1: YAML nested deeper than {MAX_DEPTH} levels$"):
        loads_yaml(text, "deep.yaml")


def test_nesting_at_the_bound_still_loads():
    data, _ = loads_yaml("[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1))
    for _ in range(MAX_DEPTH - 1):
        data = data[0]
    assert data == 1


def test_duplicate_key_names_both_lines():
    with pytest.raises(ConfigError) as exc:
        loads_yaml("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml")
    assert str(exc.value) == "f.yaml:4: b.c: duplicate key 'c' (first on line 3, again on line 4)"


def test_second_hardware_block_is_an_error_not_a_switch(tmp_path):
    """Before: the second block silently replaced the first (another GPU)."""
    text = SWARM.read_text() + "hardware:\n  accelerator: a100-80gb\n"
    f = tmp_path / "two_hw.yaml"
    f.write_text(text)
    first = 1 + SWARM.read_text().splitlines().index("hardware:")
    last = len(text.splitlines()) - 1
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(f))
    assert str(exc.value) == (
        f"{f}:{last}: hardware: duplicate key 'hardware' (first on line {first}, "
        f"again on line {last})"
    )


def test_duplicate_key_in_a_profile(tmp_path, run_cli):
    src = ROOT / "hardware_profiles" / "accelerators" / "h100-sxm-80gb.yaml"
    folder = tmp_path / "profiles"
    (folder / "accelerators").mkdir(parents=True)
    f = folder / "accelerators" / src.name
    f.write_text(src.read_text() + "vendor: someone else\n")
    code, _, err = run_cli(["profiles", "show", "h100-sxm-80gb", "--profiles", str(folder)])
    assert code == 2
    assert err.startswith(f"kvsim: error: {f}:") and "duplicate key 'vendor' (first on line" in err


def test_merge_keys_and_shared_aliases_still_load():
    text = "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\nd: [*b, *b]\n"
    data, lines = loads_yaml(text)
    assert data == yaml.safe_load(text)
    assert lines[("c", "x")] == 4 and lines[("d", 1)] == 1  # an alias: its anchor's line


def test_not_utf8_names_file_and_line(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"name: x\ndescription: caf\xe9\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(f)
    assert str(exc.value) == f"{f}:2: not UTF-8 text (byte 0xe9 at offset 24)"


@pytest.mark.parametrize(
    "text,message",
    [
        ("a: 1\nb: \x00\n", "f.yaml:2: invalid YAML: special characters are not allowed"),
        ("a: " + "9" * 5000 + "\n", "f.yaml:1: invalid YAML value '99999999999999999999"),
        # a value error names its line (before: only the file)
        ("a: 1\nb: x\nc: 2024-13-45\n", "f.yaml:3: invalid YAML value '2024-13-45': month "
         "must be in 1..12"),
        ("a:\n  - 1\n  - [2, 2024-02-30]\n", "f.yaml:3: invalid YAML value '2024-02-30': day "
         "is out of range for month"),
        ("a: 1\n---\nb: 2\n", "f.yaml:2: invalid YAML: expected a single document"),
        ("a: 1\n? [x, y]\n: 2\n", "f.yaml:2: a key must be a plain value, not a list"),
    ],
)
def test_loader_errors_are_one_line(text, message):
    with pytest.raises(ConfigError) as exc:
        loads_yaml(text, "f.yaml")
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    import sim.yamlio as yamlio

    f = tmp_path / "big.yaml"
    f.write_text("a: " + "x" * 2000 + "\n")
    monkeypatch.setattr(yamlio, "MAX_FILE_BYTES", 1000)
    with pytest.raises(ConfigError, match=r"big.yaml: file is 2,004 bytes; the limit is 1,000"):
        load_yaml(f)


def test_alias_bomb_in_a_set_value_is_refused():
    bomb = "{" + billion_laughs(9).strip().replace("\n", ", ") + "}"
    with pytest.raises(ConfigError) as exc:
        parse_set([f"model.overrides={bomb}"])
    msg = str(exc.value)
    assert msg.startswith("--set model.overrides: value '{a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lo...'")
    assert msg.endswith("is not valid YAML: YAML document expands to more than 200,000 nodes "
                        "(aliases expanded); refused as an alias bomb or an oversized file")


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "1",
         "--context", "8192", "--set", "model.num_layers=[1"],
        ["alloc-replay", "--random", "10", "--kind", "paged", "--pool", "1GiB", "--option",
         "block_size=[1"],
    ],
)
def test_bad_yaml_in_other_flags_is_one_line(argv, run_cli):
    """``kvsim plan --set`` and ``alloc-replay --option`` parse values as YAML too (before:
    a YAMLError traceback)."""
    code, _, err = run_cli(argv)
    assert code == 2
    assert err.count("\n") == 1 and "value '[1' is not valid YAML: while parsing a flow" in err


# --------------------------------------------------------------------------- numbers
@pytest.mark.parametrize(
    "key,value,message",
    [
        ("workload.pause_s", math.inf, "Input should be a finite number"),
        ("workload.pause_s", math.nan, "Input should be a finite number"),
        ("workload.pause_s", -1, "times in seconds must be in [0, 1,000,000,000]"),
        ("workload.pause_s", {"kind": "lognormal", "median": math.inf, "sigma": 1}, "finite"),
        ("workload.pause_s.min", -0.5, "min = -0.5 is out of range"),
        ("workload.output_tokens", -5, "value = -5 is out of range: token counts must be in"),
        ("workload.output_tokens", {"kind": "normal", "mean": -100, "std": 1}, "mean = -100"),
        ("workload.output_tokens", 2e7, "token counts must be in [0, 10,000,000]"),
        ("workload.task_tokens", {"kind": "uniform", "low": 5, "high": 1}, "low (5.0) must be"),
        ("workload.turns", {"kind": "lognormal", "median": 12, "sigma": 50}, "less than or equal to 10"),
        ("workload.turns", "1e9", "turn counts must be in [0, 100,000]"),
        ("workload.turns", {"kind": "gamma", "shape": 1e200, "scale": 1}, "mean (shape x scale)"),
        ("workload.num_trajectories", 10**30, "less than or equal to 10000000"),
        ("workload.num_trajectories", 20_000_000, "less than or equal to 10000000"),
        ("workload.system_prompt_tokens", -1, "greater than or equal to 0"),
        ("workload.arrival.think_s", -2, "times in seconds must be in"),
        ("workload.arrival.concurrency", 10**7, "less than or equal to 1000000"),
        ("workload.fork.branches", 5000, "branch counts must be in [0, 1,000]"),
        ("workload.observation_tokens", {"kind": "empirical", "values": [1, 2], "weights": [1e300, 1]}, "less than or equal"),
        ("hardware.host_link_bw_bytes_per_s", math.inf, "finite"),
        ("cost.step_overhead_s", math.inf, "finite"),
        ("engine.max_sim_time_s", math.inf, "finite"),
        ("engine.max_sim_time_s", 0, "greater than 0"),
    ],
)
def test_out_of_range_numbers_are_errors(key, value, message):
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(SWARM), {key: value})
    text = str(exc.value)
    assert message in text, text
    assert "\n" not in text and text.startswith("--set ")


def test_inf_pause_names_the_line(tmp_path):
    text = SWARM.read_text()
    old = next(line for line in text.splitlines() if line.startswith("  pause_s:"))
    f = tmp_path / "inf.yaml"
    f.write_text(text.replace(old, "  pause_s: .inf"))
    line = 1 + text.splitlines().index(old)
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(f))
    assert str(exc.value) == f"{f}:{line}: workload.pause_s: Input should be a finite number"


def test_requests_workload_total_is_bounded():
    groups = load_scenario(str(E20)).scenario.workload.requests
    over = {f"workload.requests.{i}.count": 9_000_000 for i in range(len(groups))}
    with pytest.raises(ConfigError, match=r"requests in all; the limit is 10,000,000"):
        load_scenario(str(E20), over)


def test_token_samples_stay_in_range_on_a_heavy_tail():
    """A lognormal with the largest sigma overflows float64 now and then; the token counts
    it gives stay in [1, MAX_TOKENS] (before: int64 overflow to negative counts)."""
    dist = LogNormal(median=1e6, sigma=10)
    x = dist.sample_tokens(np.random.default_rng(0), 10_000)
    assert x.dtype == np.int64 and x.min() >= 1 and x.max() == MAX_TOKENS


@pytest.mark.parametrize("scenario", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_scenarios_still_validate(scenario, run_cli):
    code, out, err = run_cli(["validate", str(scenario)])
    assert code == 0, err
    assert ": ok: " in out


# ------------------------------------------------------------- the simulated-time guard
def test_default_guard_is_thirty_days():
    assert EngineConfig().max_sim_time_s == 30 * 86_400


def test_pause_of_years_stops_at_the_guard_naming_trajectories(deadline):
    """The idle node stops just past the guard (it used to wait for the next post, at
    t=1e8), naming the trajectories in their tool pauses."""
    with deadline(60), pytest.raises(SimTimeLimitError) as exc:
        run_scenario(str(SWARM), **SMALL, **{"workload.pause_s": 1e8})
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("simulated time reached t=2.592e+06 s, past engine.max_sim_time_s = 2.592e+06 s")
    assert "; stuck trajectories: in a tool pause 0, 1; raise" in msg


def test_infinite_pause_cannot_spin(deadline):
    """A pause of inf (only reachable around validation) used to spin forever at t=inf
    (``env.peek() <= env.now`` is ``inf <= inf``); then it stopped at t=inf; now the idle
    node stops just past the guard."""
    loaded = load_scenario(str(SWARM), SMALL)
    wl = loaded.scenario.workload.model_copy(update={"pause_s": Constant.model_construct(value=math.inf)})
    loaded.scenario = loaded.scenario.model_copy(update={"workload": wl})
    with deadline(60), pytest.raises(SimTimeLimitError, match=r"reached t=2.592e\+06 s, .*in a tool pause 0, 1;"):
        build(loaded).run()


def test_horizon_before_the_guard_ends_cleanly_at_the_horizon(deadline):
    with deadline(60):
        r = run_scenario(str(SWARM), **SMALL, **{"workload.pause_s": 1e8, "duration_s": 50.0})
    assert r.summary["sim_time_s"] == 50.0
    assert r.summary["trajectories_completed"] == 0


def test_guard_is_configurable(deadline):
    more = {**SMALL, "workload.pause_s": 200.0}
    with deadline(60), pytest.raises(SimTimeLimitError, match=r"max_sim_time_s = 100 s"):
        run_scenario(str(SWARM), **more, **{"engine.max_sim_time_s": 100.0})
    r = run_scenario(str(SWARM), **more, **{"engine.max_sim_time_s": 10_000.0})
    assert r.summary["trajectories_completed"] == 2


# ----------------------------------------------------------------- tiers for the pauses
@pytest.mark.parametrize(
    "overrides,field,needs",
    [
        ({"pause_policy.kind": "offload_host"}, "kind", "hardware.host_kv_pool_bytes"),
        ({"pause_policy.kind": "offload_nvme"}, "kind", "an NVMe tier"),
        ({"pause_policy.kind": "break_even"}, "kind", "a host-DRAM or NVMe tier"),
        (
            {"pause_policy.kind": "ttl_pin", "pause_policy.fallback": "offload_host"},
            "fallback",
            "a host-DRAM tier",
        ),
        (
            {
                "pause_policy.kind": "offload_host",
                "pause_policy.when_full": "offload_nvme",
                "hardware.host_kv_pool_bytes": 1e9,
            },
            "when_full",
            "an NVMe tier",
        ),
    ],
)
def test_pause_policy_needs_its_tier(overrides, field, needs):
    """Before: the policy silently held every pause ("host DRAM full")."""
    with pytest.raises(ConfigError) as exc:
        build(str(SWARM), **overrides)
    msg = str(exc.value)
    assert f"pause_policy.{field}: pause policy {field} " in msg and needs in msg
    assert "set hardware.node" in msg and "\n" not in msg


def test_pause_policy_tier_configured_builds():
    sim = build(
        str(SWARM), **{"pause_policy.kind": "offload_host", "hardware.host_kv_pool_bytes": 1e9}
    )
    assert sim.pauses.name == "offload_host" and sim.pauses.nvme is None
    assert 0 < sim.pauses.host.num_frames * sim.pauses.host.frame_bytes <= 1e9
    sim = build(str(SWARM), **{"pause_policy.kind": "break_even", "hardware.node": "dgx-h100"})
    assert sim.pauses.host is not None and sim.pauses.nvme is not None


def test_validate_reports_the_missing_tier(run_cli):
    code, _, err = run_cli(["validate", str(SWARM), "--set", "pause_policy.kind=offload_host"])
    assert code == 2
    assert err.startswith("kvsim: error: ") and "pause_policy.kind" in err
    assert "needs a host-DRAM tier" in err


def test_an_absurd_kv_pool_is_one_line_not_a_memory_explosion():
    from sim.scenario import load_scenario, resolve

    sc = {
        "schema_version": 1,
        "model": "llama-3.1-8b",
        "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 1.0e30},
        "workload": {"kind": "requests", "requests": [{"prompt_tokens": 8, "output_tokens": 2}]},
    }
    with pytest.raises(ConfigError, match=r"hardware: a KV pool of 7.629e\+24 tokens per GPU"):
        resolve(load_scenario(sc))


def test_an_idle_engine_ends_at_the_horizon_not_at_the_next_post():
    """Idle until a post far past the horizon: the run ends at the horizon itself (before:
    at the post's time, with the post applied), the same ending as a busy engine's."""
    r = run_scenario(str(SWARM), **SMALL, **{"workload.pause_s": 2000.0, "duration_s": 1000.0})
    assert r.summary["sim_time_s"] == 1000.0
    assert (r.requests.arrival_s < 1000.0).all()


@pytest.mark.parametrize(
    "old, new, field, ceiling",
    [
        ("bus_bw_bytes_per_s: 3.145e+11", "bus_bw_bytes_per_s: 3.145e+31", "allreduce.by_tp.2.bus_bw_bytes_per_s", 10**15),
        ("hbm_bw_bytes_per_s: ", "hbm_bw_bytes_per_s: 1e30 #", "hbm_bw_bytes_per_s", 10**15),
        ("peak_bf16_flops_per_s: ", "peak_bf16_flops_per_s: 1e40 #", "peak_bf16_flops_per_s", 10**18),
    ],
)
def test_a_profile_s_hardware_figures_have_the_calibration_s_ceilings(tmp_path, run_cli, old, new, field, ceiling):
    """A hand-written accelerator profile is bounded as the calibration file and the
    scenario's cost section are (``sim.profiles.bounds``): an absurd bandwidth or peak is
    one line naming the file, the field and the ceiling."""
    src = ROOT / "hardware_profiles" / "accelerators" / "h100-sxm-80gb.yaml"
    folder = tmp_path / "profiles"
    (folder / "accelerators").mkdir(parents=True)
    f = folder / "accelerators" / src.name
    text = src.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    code, _, err = run_cli(["profiles", "show", "h100-sxm-80gb", "--profiles", str(folder)])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kvsim: error: {f}:"), err
    assert lines[0].endswith(f": {field}: Input should be less than or equal to {ceiling}"), err

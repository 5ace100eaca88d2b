"""h121: ``hardware.node`` (and ``kvsim breakeven --node``) against the GPUs it is said to
host. Only the node's tiers (pinned host DRAM, NVMe) are read from it, so a scenario on
H100s naming ``dgx-h200``, or running TP 16 on an 8-GPU node, used to run silently with
the node's tiers; a capacity search ``--vary hardware.accelerator=...`` over a scenario
with a node did the same for every other accelerator. Each mismatch is now one warning
naming where the node is set and the field (the run goes on: the tiers are still the
node's), in ``Resolved.warnings``, so ``kvsim validate`` and ``kvsim run`` print it and
summary.json's ``warnings`` lists it."""

from __future__ import annotations

import json
from pathlib import Path

from sim.profiles import load_node
from sim.run.checks import preflight
from sim.scenario import load_scenario, parse_set

ROOT = Path(__file__).resolve().parents[2]
E24 = ROOT / "workloads" / "seed_tool_wait_45s.yaml"  # 8 x h100-sxm-80gb (TP 8) on dgx-h100
OTHER_GPU = ("node dgx-h200 holds h200-141gb GPUs, not h100-sxm-80gb: its host DRAM and NVMe "
             "tiers serve 8 x h100-sxm-80gb here; name the node of your GPUs (kvsim profiles "
             "list --kind node)")  # fmt: skip
TOO_MANY = ("node dgx-h100 holds 8 GPUs, fewer than the 16 (tp x pp) that share its host DRAM "
            "and NVMe tiers here")  # fmt: skip


def _warnings(path=E24, *sets: str) -> tuple[str, ...]:
    return preflight(load_scenario(path, parse_set(list(sets)))).warnings


def test_mismatch_sentences_of_a_node_profile():
    dgx = load_node("dgx-h100")
    assert dgx.mismatch("h100-sxm-80gb", 8) == [] and dgx.mismatch("h100-sxm-80gb", 1) == []
    assert dgx.mismatch("h100-sxm-80gb", 16) == [TOO_MANY]
    assert len(dgx.mismatch("a100-80gb", 16)) == 2


def test_shipped_scenarios_with_a_node_say_nothing():
    for name in ("seed_tool_wait_45s", "human_in_loop_nvme", "interactive_coding_service",
                 "agent_swarm_pressure"):  # fmt: skip
        assert not [w for w in _warnings(ROOT / "workloads" / f"{name}.yaml")
                    if "hardware.node" in w], name  # fmt: skip


def test_another_gpu_or_more_gpus_than_the_node_is_one_warning_each():
    assert _warnings(E24, "hardware.node=dgx-h200") == (
        f"--set hardware.node: hardware.node: {OTHER_GPU}",)
    # the file's line when the node is the file's and the GPUs change under it
    assert _warnings(E24, "hardware.tp=16") == (
        f"{E24}:27: hardware.node: {TOO_MANY}",)


def test_run_prints_it_before_and_summary_lists_it(tmp_path, run_cli):
    out = tmp_path / "run"
    code, _, err = run_cli(["run", str(E24), "--out", str(out), "--no-report",
                            "--set", "hardware.node=dgx-h200"])  # fmt: skip
    assert code == 0
    line = f"--set hardware.node: hardware.node: {OTHER_GPU}"
    assert f"kvsim: warning: {line}" in err.splitlines()
    assert "pathological" not in err  # a configuration's warning, said once before the run
    assert json.loads((out / "summary.json").read_text())["warnings"] == [line]


def test_breakeven_says_it_for_its_node(run_cli):
    argv = ["breakeven", "--model", "llama-3.1-70b", "--context", "32768", "--wait", "45",
            "--num-gpus", "8", "--node", "dgx-h200"]  # fmt: skip
    code, _, err = run_cli([*argv, "--gpu", "h100-sxm-80gb"])
    assert code == 0 and f"kvsim: warning: --node: {OTHER_GPU}" in err.splitlines()
    code, out, err = run_cli([*argv, "--json"])  # the node's own GPUs: nothing to say
    assert code == 0 and json.loads(out)["warnings"] == [] and "warning" not in err

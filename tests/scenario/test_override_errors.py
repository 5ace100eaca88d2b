"""A profile override's problem is named by the override, never by a line of the shipped
profile file (``sim.profiles.registry.ProfileOverrideError``).

Before: ``--set model.overrides.num_layers=-1`` said ``--set model.overrides.num_layers:
model: .../hardware_profiles/models/chapter-70b.yaml:4: num_layers: ...`` (a file and line
the user never wrote), and ``hardware.accelerator_overrides`` and ``kvsim plan --set``
named only the shipped file's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.profiles import load_model
from sim.profiles.registry import ProfileOverrideError

ROOT = Path(__file__).resolve().parents[2]
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"


@pytest.mark.parametrize(
    "item,message",
    [
        ("model.overrides.num_layers=-1", "--set model.overrides.num_layers: "
         "model.overrides.num_layers: Input should be greater than 0"),
        ("model={profile: chapter-70b, overrides: {num_layers: -1}}",
         "--set model: model.overrides.num_layers: Input should be greater than 0"),
        ("model.overrides.nope=1", "--set model.overrides.nope: model.overrides.nope: "
         "unknown field"),
        ("model.overrides.num_kv_heads=7", "--set model.overrides.num_kv_heads: "
         "model.overrides.num_kv_heads: num_q_heads must be a multiple of num_kv_heads"),
        ("hardware.accelerator_overrides.memory_bytes=-1",
         "--set hardware.accelerator_overrides.memory_bytes: "
         "hardware.accelerator_overrides.memory_bytes: Input should be greater than 0"),
        ("hardware.accelerator_overrides={host_link: {kind: x}}",
         "--set hardware.accelerator_overrides: hardware.accelerator_overrides.host_link.kind:"
         " unknown kind 'x'; valid: infinity-fabric, nvlink-c2c, pcie"),
    ],
)  # fmt: skip
def test_a_bad_set_override_of_a_profile_names_the_set(run_cli, item, message):
    code, out, err = run_cli(["validate", str(E20), "--set", item])
    assert (code, out, err) == (2, "", f"kvsim: error: {message}\n")
    assert "hardware_profiles" not in err


def test_a_bad_override_written_in_the_scenario_names_its_line(run_cli, tmp_path):
    text = E20.read_text().replace(
        "model: chapter-70b", "model:\n  profile: chapter-70b\n  overrides:\n    num_layers: 0"
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    line = text.splitlines().index("    num_layers: 0") + 1
    code, _, err = run_cli(["run", str(scenario), "--out", str(tmp_path / "o")])
    assert (code, err) == (
        2, f"kvsim: error: {scenario}:{line}: model.overrides.num_layers: Input should be "
        "greater than 0\n")  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_a_problem_of_the_profile_file_itself_still_names_its_line(tmp_path):
    """An override that is fine does not take the blame for the file's own problem."""
    folder = tmp_path / "models"
    folder.mkdir()
    shipped = ROOT / "hardware_profiles" / "models" / "chapter-70b.yaml"
    text = shipped.read_text().replace("num_layers: 80", "num_layers: -80")
    assert text != shipped.read_text()
    (folder / "mine.yaml").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_model("mine", [tmp_path], {"params_total": 7e10})
    assert not isinstance(exc.value, ProfileOverrideError)
    line = text.splitlines().index("num_layers: -80") + 1
    assert str(exc.value) == (f"{folder / 'mine.yaml'}:{line}: num_layers: Input should be "
                              "greater than 0")  # fmt: skip


@pytest.mark.parametrize("command", ["plan", "breakeven"])
def test_plan_and_breakeven_name_the_set(run_cli, command):
    argv = [command, "--model", "chapter-70b", "--context", "1000", "--set", "model.num_layers=-1"]
    if command == "plan":
        argv += ["--gpu", "e20-accelerator", "--num-gpus", "1"]
    code, out, err = run_cli(argv)
    assert (code, out, err) == (
        2, "", "kvsim: error: --set model.num_layers: model.num_layers: Input should be "
        "greater than 0\n")  # fmt: skip

"""h121: ``kvsim compare`` of existing run folders says what differs between them. With
``--vary`` the variant names say it; with folders the columns were only folder names, so
two runs of different scenarios (another model, another node) printed deltas with no word
that they were not variants of one configuration. The keys in which the folders'
config.resolved.yaml differ are now one line under the table (``config_differences``)."""

from __future__ import annotations

from pathlib import Path

from sim.report.compare import MAX_NAMED_DIFFERENCES, config_differences

ROOT = Path(__file__).resolve().parents[2]
E24 = str(ROOT / "workloads/seed_tool_wait_45s.yaml")


def test_names_the_differing_keys_common_ones_first():
    a = {"name": "x", "description": "one", "seed": 0, "pause_policy": {"kind": "hold"}}
    b = {"name": "x", "description": "two", "seed": 0,
         "pause_policy": {"kind": "break_even", "horizon_s": 60.0}}  # fmt: skip
    assert config_differences({"a": a, "b": b}) == (
        "configs differ (config.resolved.yaml, a / b) in: pause_policy.kind (hold / break_even), "
        "pause_policy.horizon_s (- / 60.0)\n"
    )  # description left out; the kind before its own option


def test_counts_what_it_does_not_name_and_says_when_the_same():
    a = {f"k{i}": i for i in range(MAX_NAMED_DIFFERENCES + 3)}
    b = {f"k{i}": -i - 1 for i in range(MAX_NAMED_DIFFERENCES + 3)}
    assert config_differences({"a": a, "b": b}).endswith(" and 3 more keys\n")
    assert config_differences({"a": a, "a'": dict(a)}) == (
        "configs: the same resolved scenario in every run (config.resolved.yaml)\n")
    assert config_differences({"a": a}) == "" and config_differences({"a": a, "b": None}) == ""


def test_compare_of_run_folders_prints_the_line(tmp_path, run_cli):
    a, b = tmp_path / "hold", tmp_path / "be"
    assert run_cli(["run", E24, "--out", str(a), "--no-report", "--quiet"])[0] == 0
    assert run_cli(["run", E24, "--out", str(b), "--no-report", "--quiet",
                    "--set", "pause_policy.kind=break_even"])[0] == 0  # fmt: skip
    code, text, _ = run_cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert code == 0
    line = [ln for ln in text.splitlines() if ln.startswith("configs differ")]
    assert line and line[0].startswith(
        "configs differ (config.resolved.yaml, hold / be) in: pause_policy.kind (hold / break_even), "
        "pause_policy.horizon_s (- / 60.0)")


def test_compare_progress_is_a_line_each_off_a_terminal(tmp_path, run_cli):
    # stderr is captured (not a terminal): no carriage returns gluing the counts together
    code, _, err = run_cli(["compare", E24, "--out", str(tmp_path / "cmp"), "--no-report",
                            "--vary", "pause_policy.kind=hold,recompute"])  # fmt: skip
    assert code == 0
    assert "\r" not in err and err.splitlines()[:2] == ["1/2 runs", "2/2 runs"]

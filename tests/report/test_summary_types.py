"""``kvsim report`` / ``kvsim compare`` on a run folder whose summary.json has a value of
the wrong type (hand-edited, damaged): one line naming the file, the key and what was
expected, exit 2; no traceback, nothing written (``sim.report.data.summary_type_problem``)."""

from __future__ import annotations

import json
import shutil

import pytest
from report_helpers import E20

from sim.report.data import summary_type_problem

TAIL = " (kvsim run writes it so: the file is damaged; run the scenario again with kvsim run)"

#: (key, the edited value, what the message says was expected, how it shows the value)
CASES = [
    ("ttft_s", {"p99": "x"}, "an object of numbers or nulls (mean, p50, p90, p95, p99)",
     '{"p99": "x"}'),
    ("ttft_s", [1, 2], "an object of numbers or nulls (mean, p50, p90, p95, p99)", "[1, 2]"),
    ("requests_completed", "5", "a whole number", '"5"'),
    ("requests_completed", None, "a whole number, not null", "null"),
    ("rejected", 2.5, "a whole number", "2.5"),
    ("sim_time_s", "3", "a number", '"3"'),
    ("prefix_hit_rate", True, "a number", "true"),
    ("warnings", "x", "a list of strings", '"x"'),
    ("pause_endings", [1], "an object of whole numbers", "[1]"),
    ("nodes", {"a": 1}, "a list of objects, each with node_id", '{"a": 1}'),
    ("accuracy", {"basis": "x"}, "an object (basis, source, median_rel_error, ...)",
     '{"basis": "x"}'),
    ("scenario", 7, "a string", "7"),
]  # fmt: skip


@pytest.fixture(scope="module")
def e20_folder(tmp_path_factory):
    from sim.cli import main

    out = tmp_path_factory.mktemp("runs") / "e20"
    assert main(["run", E20, "--out", str(out), "--quiet", "--no-report"]) == 0
    return out


def _edited(src, dst, key, value):
    shutil.copytree(src, dst)
    path = dst / "summary.json"
    summary = json.loads(path.read_text())
    assert key in summary or key == "nodes"
    summary[key] = value
    path.write_text(json.dumps(summary))
    return path


@pytest.mark.parametrize(("key", "value", "expected", "shown"), CASES)
def test_report_names_the_key_of_a_wrong_type(run_cli, tmp_path, e20_folder, key, value,
                                              expected, shown):  # fmt: skip
    run = tmp_path / "run"
    path = _edited(e20_folder, run, key, value)
    before = sorted(p.name for p in run.iterdir())
    code, stdout, stderr = run_cli(["report", str(run)])
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: {path}: {key}: expected {expected}, found {shown}{TAIL}\n"
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written


def test_compare_of_run_folders_names_the_key_too(run_cli, tmp_path, e20_folder):
    bad = tmp_path / "bad"
    path = _edited(e20_folder, bad, "num_gpus", "8")
    code, stdout, stderr = run_cli(["compare", str(e20_folder), str(bad), "--out",
                                    str(tmp_path / "cmp")])  # fmt: skip
    assert code == 2 and "Traceback" not in stderr
    assert stderr == f"kvsim: error: {path}: num_gpus: expected a whole number, found \"8\"{TAIL}\n"


def test_a_cluster_nodes_entry_is_checked_with_its_node():
    summary = {"nodes": [{"node_id": 0, "ttft_s": {"p99": 0.1}}, {"node_id": 3, "rejected": "1"}]}
    assert summary_type_problem(summary) == 'nodes[3].rejected: expected a whole number, found "1"'


def test_an_older_runs_shapes_still_read():
    """Fewer distribution fields, an accuracy before ``not_measured``, nulls where the
    schema allows them, keys the schema does not declare (a newer or an older kvsim's)."""
    summary = {
        "ttft_s": {"mean": 0.1, "p50": 0.1, "p90": None, "p99": 0.2},
        "accuracy": {"basis": "roofline, unvalidated", "source": None, "median_rel_error": None,
                     "worst_rel_error": None, "outside_domain": [], "detail": ""},
        "pause_cost_gap_ratio": None,
        "some_future_key": "anything",
    }  # fmt: skip
    assert summary_type_problem(summary) is None


def test_a_long_value_is_cut_in_the_message():
    wrong = summary_type_problem({"warnings": [1] * 100})
    assert wrong is not None and wrong.startswith("warnings: expected a list of strings, found [1, 1")
    assert wrong.endswith("...") and len(wrong.split("found ")[1]) == 60

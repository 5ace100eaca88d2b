"""docs/regression.md stays true: its suite validates, its workflow parses, and its
failure lines are what kvsim prints for the golden paged case run with 64-token blocks."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from sim.regress.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "regression.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, re.S)


def test_documented_suite_validates(tmp_path):
    suite_text = next(b for b in _blocks("yaml") if b.startswith("schema_version"))
    (tmp_path / "suite.yaml").write_text(suite_text)
    suite = load_suite(tmp_path)
    assert [c.runner for c in suite.cases] == ["allocator", "scenario", "trace_replay"]


def test_documented_workflow_runs_the_suite_and_uploads_the_report():
    flow = yaml.safe_load(next(b for b in _blocks("yaml") if b.startswith("# .github")))
    steps = flow["jobs"]["kvsim-regress"]["steps"]
    run = " ".join(s.get("run", "") for s in steps)
    assert "pip install" in run and "kvsim regress --suite ci/kvsim --junit" in run
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/"


def test_documented_failure_lines_are_real(tmp_path, run_cli):
    golden = ROOT / "tests" / "golden"
    text = (golden / "suite.yaml").read_text()
    text = text.replace("../../workloads", str(ROOT / "workloads"))
    perturbed = text.replace(
        "kind: paged, options: {block_size: 16}", "kind: paged, options: {block_size: 64}"
    )
    assert perturbed != text
    (tmp_path / "suite.yaml").write_text(perturbed)
    shutil.copytree(golden / "baselines", tmp_path / "baselines")
    code, out, _ = run_cli(["regress", "--suite", str(tmp_path), "--case", "alloc-paged-b16"])
    assert code == 1
    documented = [
        line for b in _blocks("text") for line in b.splitlines() if line.startswith("FAIL")
    ]
    assert len(documented) == 2
    for line in documented:
        assert line in out.splitlines()

"""`kvsim regress --junit PATH` with a path that cannot be written: one line, exit 2, and
(when the path is visibly wrong) before the suite runs. Suites are YAML: an alias bomb in
one is refused like in any other file."""

from __future__ import annotations

import pytest

from sim.errors import KvsimError
from sim.regress.report import check_junit_path, write_junit

SUITE = """
schema_version: 1
cases:
  - name: fixed-case
    runner: fixed
    inputs: {values: {latency_s: 1.0}}
    metrics:
      latency_s: {better: lower, rel: 0.05}
"""


@pytest.fixture
def parent_is_a_file(tmp_path):
    f = tmp_path / "report"
    f.write_text("not a folder\n")
    return f / "junit.xml"


def test_junit_under_a_file_fails_before_the_suite_runs(write_suite, run_cli, parent_is_a_file):
    d = write_suite(SUITE)
    code, out, err = run_cli(["regress", "--suite", str(d), "--junit", str(parent_is_a_file)])
    assert code == 2 and out == ""
    assert err == (
        f"kvsim: error: --junit {parent_is_a_file}: {parent_is_a_file.parent} is not a folder\n"
    )
    assert not (d / "baselines").exists()  # nothing ran


def test_junit_deeper_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(KvsimError, match=r"file is not a folder$"):
        check_junit_path(f / "a" / "b" / "junit.xml")


def test_junit_writable_path_passes_and_creates_nothing(tmp_path):
    target = tmp_path / "new" / "dir" / "junit.xml"
    check_junit_path(target)
    assert not (tmp_path / "new").exists()


def test_write_junit_error_is_one_line(parent_is_a_file, tmp_path):
    """A path that breaks only when written (checked after the run): a KvsimError, not an
    OSError traceback."""
    from sim.regress.session import RegressReport

    report = RegressReport(tmp_path / "suite.yaml", tmp_path, strict=False, update=False)
    with pytest.raises(KvsimError) as exc:
        write_junit(report, parent_is_a_file)
    assert str(exc.value).startswith(f"--junit {parent_is_a_file}: cannot write: ")
    assert "\n" not in str(exc.value)


def test_alias_bomb_suite_is_refused(write_suite, run_cli):
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    d = write_suite("\n".join(bomb) + "\n" + SUITE)
    code, _, err = run_cli(["regress", "--suite", str(d)])
    assert code == 2
    assert err.startswith(f"kvsim: error: {d / 'suite.yaml'}:6: YAML document expands")

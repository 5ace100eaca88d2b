"""Bad paths and damaged files found by probing every command (session 27): each is one
``kvsim: error:`` line (exit 2), checked before the work where the work would end by
writing there, and nothing half-written is left; a scenario file whose name is not UTF-8
runs. The error line on an ASCII stderr is written as stdout's lines are (UTF-8, as
click wrote them), not with Python's ``\\xe9`` escapes; a sweep without ``--quiet`` puts
no blank line before its error."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
E20 = str(ROOT / "workloads" / "seed_chunked_prefill.yaml")
CAPACITY = str(ROOT / "workloads" / "coding_agents_capacity.yaml")
#: a file name with the byte 0xff, as Python receives it (kept as a surrogate, PEP 383)
NOT_UTF8 = "x\udcff"


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a simulation is built (a refusal must come before any work)."""
    import sim.run

    def refuse(*a, **k):
        raise AssertionError("the run must not start")

    monkeypatch.setattr(sim.run, "build", refuse)


def test_a_scenario_file_whose_name_is_not_utf8_runs(run_cli, tmp_path):
    """config.resolved.yaml names its source with the byte escaped (it raised
    UnicodeEncodeError writing the surrogate; nothing was written)."""
    scenario = tmp_path / f"{NOT_UTF8}.yaml"
    scenario.write_bytes(Path(E20).read_bytes())
    out = tmp_path / "out"
    code, _, stderr = run_cli(["run", str(scenario), "--out", str(out), "--quiet", "--no-report"])
    assert code == 0, stderr
    head = (out / "config.resolved.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert head.endswith(f"the scenario {tmp_path}/x\\xff.yaml with every default filled in")


def test_a_missing_file_whose_name_is_not_utf8_is_named_with_the_byte_escaped(run_cli, tmp_path):
    """As ``utf8_path`` shows such a name (``x\\xff``), not Python's ``x\\udcff``."""
    code, _, stderr = run_cli(["run", f"{tmp_path}/{NOT_UTF8}.yaml", "--out", str(tmp_path / "o")])
    assert code == 2
    assert stderr == (f"kvsim: error: {tmp_path}/x\\xff.yaml: cannot read file: "
                      "No such file or directory\n")  # fmt: skip


def test_sweep_out_below_a_file_is_one_line(run_cli, tmp_path):
    """``--out afile/sub``: NotADirectoryError from mkdir before; now the line ``kvsim
    run`` gives for the same --out."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "base.yaml").write_bytes(Path(E20).read_bytes())
    sweep = tmp_path / "s.yaml"
    sweep.write_text("schema_version: 1\nname: s\nsweep:\n  base: base.yaml\n"
                     "  grid:\n    seed: [1, 2]\n")  # fmt: skip
    for argv in (["sweep", str(sweep)], ["run", E20]):
        code, stdout, stderr = run_cli([*argv, "--out", str(afile / "sub"), "--quiet"])
        assert (code, stdout) == (2, "")
        assert stderr == f"kvsim: error: --out: {afile}/sub: {afile} is not a folder\n"
    assert afile.read_text() == "x"


def test_sweep_error_has_no_blank_line_before_it_without_quiet(run_cli, tmp_path):
    """stderr is not a terminal here: no progress bar, so none of the blank line rich ends
    a bar with on a pipe (it stood before the error line)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\n")
    code, stdout, stderr = run_cli(["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: {bad}:1: a sweep file needs a top-level 'sweep:' mapping\n"


@pytest.fixture
def run_folder(run_cli, tmp_path) -> Path:
    out = tmp_path / "run"
    code, _, stderr = run_cli(["run", E20, "--out", str(out), "--quiet", "--no-report"])
    assert code == 0, stderr
    return out


def test_a_summary_that_is_not_an_object_is_one_line(run_cli, run_folder, tmp_path):
    """``[1, 2]`` in summary.json: AttributeError (report) and (compare) before."""
    (run_folder / "summary.json").write_text("[1, 2]\n")
    line = (f"kvsim: error: {run_folder}/summary.json: cannot read: not a JSON object (a "
            "list; kvsim run writes one object of summary keys)\n")  # fmt: skip
    code, stdout, stderr = run_cli(["report", str(run_folder)])
    assert (code, stdout, stderr) == (2, "", line)
    code, stdout, stderr = run_cli(["compare", str(run_folder), str(run_folder), "--out",
                                    str(tmp_path / "cmp")])  # fmt: skip
    assert (code, stdout, stderr) == (2, "", line)
    assert not (tmp_path / "cmp").exists()


def test_a_summary_without_the_pool_size_is_one_line(run_cli, run_folder, tmp_path):
    """kv_pool_bytes (which every run writes) deleted: compare raised KeyError; report
    drew a report without it."""
    import json

    summary = json.loads((run_folder / "summary.json").read_text())
    del summary["kv_pool_bytes"]
    (run_folder / "summary.json").write_text(json.dumps(summary))
    line = (f"kvsim: error: {run_folder}/summary.json: kv_pool_bytes: missing (every kvsim "
            "run writes it: the file is damaged; run the scenario again with kvsim run)\n")  # fmt: skip
    for argv in (["report", str(run_folder)],
                 ["compare", str(run_folder), str(run_folder), "--out", str(tmp_path / "c")]):  # fmt: skip
        assert run_cli(argv) == (2, "", line)
    assert not (tmp_path / "c").exists()


def test_schema_out_that_cannot_be_written_is_one_line(run_cli, tmp_path):
    """A folder, or a path below a file: IsADirectoryError / NotADirectoryError before;
    now the line ``workload sample --out`` gives."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, err in ((tmp_path, errno.EISDIR), (afile / "s.json", errno.ENOTDIR)):
        code, stdout, stderr = run_cli(["schema", "--out", str(out)])
        assert (code, stdout) == (2, "")
        assert stderr == f"kvsim: error: --out {out}: cannot write: {os.strerror(err)}\n"
    assert afile.read_text() == "x"


def test_capacity_figure_that_cannot_be_written_is_refused_before_the_search(
    run_cli, tmp_path, no_run
):
    """``--figure afile/x.png`` raised NotADirectoryError after the whole search (its
    partial file's removal failed too); a folder failed at the final rename."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    base = ["capacity", CAPACITY, "--slo", "ttft_p95_s=2", "--vary", "seed=1,2", "--figure"]
    code, stdout, stderr = run_cli([*base, str(afile / "c.png")])
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: --figure {afile}/c.png: {afile} is not a folder\n"
    code, stdout, stderr = run_cli([*base, str(tmp_path)])
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: --figure {tmp_path}: is a folder (name the PNG file)\n"


def test_the_figure_writer_says_one_line_when_its_folder_is_a_file(tmp_path):
    """The writer's own fallback (a folder that became a file during the search: its
    mkdir finds the file), where removing its partial file raised NotADirectoryError."""
    from types import SimpleNamespace

    from sim.errors import KvsimError
    from sim.sweep.figure import capacity_figure

    afile = tmp_path / "afile"
    afile.write_text("x")
    result = SimpleNamespace(
        capacity={"value": 4, "unit": "concurrency", "ci95_low": None, "ci95_high": None},
        analytic_estimate={"value": None, "peak_value": None}, slos=["ttft_p95_s <= 2"],
    )  # fmt: skip
    comp = SimpleNamespace(key="seed", values=[1], results=[result])
    with pytest.raises(KvsimError) as err:
        capacity_figure(comp, afile / "c.png")
    assert str(err.value) == f"--figure {afile}/c.png: cannot write: {os.strerror(errno.EEXIST)}"


@pytest.mark.parametrize(
    "env_set",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}],
    ids=["ascii", "lang-c"],
)
def test_error_lines_on_an_ascii_stderr_are_written_as_stdout_lines(tmp_path, env_set):
    """An ASCII stderr got ``caf\\xe9`` (``print`` to stderr: Python's backslashreplace);
    stdout's lines (``sim.cli._common.echo``) go out in UTF-8 there, as click wrote them:
    now the error lines too, on every path (the quick run and validate paths, typer's).
    Under ``LANG=C`` the name's UTF-8 bytes, which Python kept as surrogates, show as
    their characters again."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL")}
    env.update(env_set)
    missing = "café.yaml"
    for argv in (["run", missing, "--out", "o"], ["validate", missing],
                 ["sweep", missing, "--out", "o"]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "sim.cli", *argv], capture_output=True,
                              env=env, cwd=tmp_path, timeout=300)  # fmt: skip
        assert (proc.returncode, proc.stdout) == (2, b""), proc.stderr
        assert proc.stderr == (
            "kvsim: error: café.yaml: cannot read file: No such file or directory\n"
        ).encode()
    assert list(tmp_path.iterdir()) == []


def test_escaped_text():
    """Surrogates a file name left (PEP 383) become ``\\xNN``; UTF-8 bytes decoded as
    ASCII their characters; other text, and a lone surrogate no decoding makes, as is
    (escaped)."""
    from sim.errors import escaped_text

    assert escaped_text("x\udcff: café") == "x\\xff: café"
    assert escaped_text("caf\udcc3\udca9") == "café"
    assert escaped_text("a\ud800b") == "a\\ud800b"


def test_a_surrogate_escape_in_yaml_is_refused_at_its_line(run_cli, tmp_path):
    """``"\\udcff"`` made a string UTF-8 cannot write: a run's report was not written and
    ``compare --vary name=...`` failed with a traceback creating the variant's folder."""
    from sim.errors import ConfigError
    from sim.yamlio import loads_yaml

    with pytest.raises(ConfigError) as err:
        loads_yaml('schema_version: 1\nname: "a\\udcff"\n', "s.yaml")
    assert str(err.value) == ("s.yaml:2: invalid YAML value 'a\\udcff': a \\uD800-\\uDFFF "
                              "escape is half of a UTF-16 pair, not a character")  # fmt: skip
    assert loads_yaml('name: "caf\\u00e9 \\U0001F600"\n', "s.yaml")[0] == {"name": "café 😀"}
    out = tmp_path / "o"
    code, stdout, stderr = run_cli(["compare", E20, "--vary", 'name=a,"\\udcff"', "--out", str(out)])
    assert (code, stdout) == (2, "")
    assert stderr == ("kvsim: error: --vary name: value '\"\\\\udcff\"' is not valid YAML: "
                      "invalid YAML value '\\udcff': a \\uD800-\\uDFFF escape is half of a "
                      "UTF-16 pair, not a character\n")  # fmt: skip
    assert not out.exists()


def test_workload_fit_of_a_folder_says_it_is_not_a_regular_file(run_cli, tmp_path):
    """It said "no such file" of a folder (or /dev/zero) that is there."""
    code, stdout, stderr = run_cli(["workload", "fit", str(tmp_path), "--kind", "coding_agent",
                                    "--out", str(tmp_path / "f.yaml")])  # fmt: skip
    assert (code, stdout) == (2, "")
    assert stderr == f"kvsim: error: {tmp_path}: not a regular file (a turns.jsonl trace)\n"
    code, _, stderr = run_cli(["workload", "fit", str(tmp_path / "no"), "--kind",
                               "coding_agent", "--out", str(tmp_path / "f.yaml")])  # fmt: skip
    assert stderr == f"kvsim: error: {tmp_path}/no: no such file (a turns.jsonl trace)\n"


def test_a_set_value_whose_bytes_are_not_utf8_is_named_so(run_cli, tmp_path, monkeypatch):
    """``--set workload.lengths.path=$'x\\xff'``: YAML said "special characters are not
    allowed" of the surrogate Python kept; under ``LANG=C`` a UTF-8 value (``café``)
    arrives as surrogates too, and the line says how to fix that."""
    from sim.errors import ConfigError
    from sim.yamlio import load_value

    code, stdout, stderr = run_cli(["run", E20, "--out", str(tmp_path / "o"), "--set",
                                    f"workload.lengths.path={NOT_UTF8}"])  # fmt: skip
    assert (code, stdout) == (2, "")
    assert stderr == ("kvsim: error: --set workload.lengths.path: value 'x\\xff' is not "
                      "UTF-8 text (YAML values are)\n")  # fmt: skip
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "ascii")
    with pytest.raises(ConfigError) as err:
        load_value("caf\udcc3\udca9", "--set name")
    assert str(err.value) == ("--set name: value 'café': Python decodes the command line as "
                              "ascii here (LANG=C without UTF-8 mode); set PYTHONUTF8=1")  # fmt: skip


def test_echo_decides_by_the_encoding_and_keeps_surrogateescape():
    """An ASCII stream whose handler escapes (stderr's ``backslashreplace``) gets the line
    in UTF-8, as one that raises does; a ``surrogateescape`` stream (stdout in the C or
    POSIX locale) writes a name's byte back as it was (``x\\xff``), not ``?``."""
    import io

    from sim.cli._common import echo

    for errors in ("backslashreplace", "strict"):
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="ascii", errors=errors)
        echo("café", stream)
        assert raw.getvalue() == "café\n".encode()
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
    echo(f"{NOT_UTF8}: ok", stream)
    assert raw.getvalue() == b"x\xff: ok\n"

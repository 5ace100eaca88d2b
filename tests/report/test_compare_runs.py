"""``kvsim compare``: variants from --vary (run through sim.sweep's executor) or run
folders, one table with deltas, compare.parquet / compare.html / PNGs, variant folders."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from report_helpers import E20, ROOT, SWARM, external_urls

from sim.errors import ConfigError
from sim.report.compare import parse_vary, split_values, variants_from_vary

COMPARE_FILES = {"compare.parquet", "compare.html", "compare_metrics.png", "compare_ttft.png",
                 "compare_pool.png"}  # fmt: skip


def test_vary_runs_each_variant_and_writes_the_comparison(run_cli, tmp_path):
    out = tmp_path / "cmp"
    code, stdout, stderr = run_cli(["compare", E20, "--vary", "scheduler.chunked_prefill=true,false",
                                    "--out", str(out), "--workers", "2"])  # fmt: skip
    assert code == 0, stderr
    names = {p.name for p in out.iterdir()}
    assert COMPARE_FILES | {"scheduler.chunked_prefill=true",
                            "scheduler.chunked_prefill=false"} == names  # fmt: skip
    frame = pd.read_parquet(out / "compare.parquet")
    assert list(frame.variant) == ["scheduler.chunked_prefill=true", "scheduler.chunked_prefill=false"]
    for _, row in frame.iterrows():  # the row is the variant's own summary
        s = json.loads((out / row.variant / "summary.json").read_text())
        assert row["max_itl_s"] == s["max_itl_s"] and row["ttft_s.p99"] == s["ttft_s"]["p99"]
        assert (out / row.variant / "report.html").is_file()
    chunked, mono = frame.max_itl_s
    assert chunked == pytest.approx(0.1587, abs=1e-3) and mono > 1.2  # E20's spike
    line = next(ln for ln in stdout.splitlines() if ln.startswith("ITL p99"))
    assert "%)" in line  # the second variant's delta against the first
    html = (out / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and external_urls(html) == []


def test_compare_reads_run_folders(run_cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli(["run", E20, "--out", str(a), "--quiet", "--no-report"])[0] == 0
    assert run_cli(["run", E20, "--out", str(b), "--quiet", "--no-report",
                    "--set", "scheduler.chunked_prefill=false"])[0] == 0  # fmt: skip
    code, stdout, _ = run_cli(["compare", str(a), str(b), "--out", str(tmp_path / "c")])
    assert code == 0
    frame = pd.read_parquet(tmp_path / "c" / "compare.parquet")
    assert list(frame.variant) == ["a", "b"] and frame.replications.tolist() == [1, 1]
    assert {p.name for p in (tmp_path / "c").iterdir()} == COMPARE_FILES


def test_replications_average_seeds(run_cli, tmp_path):
    out = tmp_path / "rep"
    code, _, _ = run_cli(["compare", E20, "--vary", "cost.weights_bytes=140.0e+9,70.0e+9", "--out", str(out),
                          "--replications", "2", "--workers", "1", "--quiet", "--no-report"])  # fmt: skip
    assert code == 0
    assert sorted(p.name for p in (out / "cost.weights_bytes=140000000000.0").iterdir()) == ["seed-0", "seed-1"]
    frame = pd.read_parquet(out / "compare.parquet")
    assert frame.replications.tolist() == [2, 2]
    # half the weights streamed per decode step: half the decode step time
    assert frame["itl_s.p50"][1] == pytest.approx(frame["itl_s.p50"][0] / 2, rel=1e-6)


def test_vary_values_and_names():
    assert split_values("{kind: buddy, reservation: pow2},{kind: paged},3") == [
        "{kind: buddy, reservation: pow2}", "{kind: paged}", "3"]  # fmt: skip
    vary = parse_vary(["allocator={kind: buddy, reservation: pow2},{kind: paged}", "seed=1,2"])
    variants = variants_from_vary(vary)
    assert [v.name for v in variants] == [
        "allocator=buddy-pow2,seed=1", "allocator=buddy-pow2,seed=2",
        "allocator=paged,seed=1", "allocator=paged,seed=2"]  # fmt: skip
    assert variants[0].overrides == {"allocator": {"kind": "buddy", "reservation": "pow2"}, "seed": 1}
    assert variants_from_vary(parse_vary(["a=x y/z"]))[0].folder == "a=x_y_z"


@pytest.mark.parametrize(("item", "message"), [
    ("seed", "--vary: expected KEY=V1,V2 with a dotted KEY, got 'seed'"),
    ("seed=", "--vary: expected KEY=V1,V2 with a dotted KEY, got 'seed='"),
    ("seed=1,1", "--vary: seed: a value is repeated in '1,1'"),
])  # fmt: skip
def test_bad_vary_is_one_line(item, message):
    with pytest.raises(ConfigError) as exc:
        parse_vary([item])
    assert str(exc.value) == message


@pytest.mark.parametrize(("vary", "word"), [
    ("allocator.kind=paged,nonsense", "nonsense"),
    ("cost.weights_bytes=140.0e+9,280.0e+9", "no memory left for KV"),  # found by preflight
])  # fmt: skip
def test_bad_variant_is_refused_before_any_run(run_cli, tmp_path, vary, word):
    out = tmp_path / "bad"
    code, _, stderr = run_cli(["compare", E20, "--vary", vary, "--out", str(out)])
    assert code == 2 and stderr.count("\n") == 1 and word in stderr
    assert not out.exists()


def test_readme_report_and_compare_block_works(run_cli, tmp_path, monkeypatch):
    """A new user's path: the README's run gives report.html, its compare the figure."""
    import re
    import shlex

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Report and compare"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    run_line, compare_line = [ln for ln in block.splitlines() if ln.strip()]
    monkeypatch.chdir(ROOT)
    argv = shlex.split(run_line)[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "demo")
    assert run_cli([*argv, "--quiet", "--set", "workload.num_trajectories=4"])[0] == 0
    assert (tmp_path / "demo" / "report.html").is_file()
    argv = shlex.split(compare_line)[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "study")
    code, stdout, stderr = run_cli([*argv, "--no-report", "--workers", "1"])
    assert code == 0, stderr
    assert (tmp_path / "study" / "compare_pool.png").stat().st_size > 5000
    assert "pool: token states" in stdout
    frame = pd.read_parquet(tmp_path / "study" / "compare.parquet")
    assert frame.pool_token_states.is_monotonic_increasing  # Max < Pow2 < Oracle < paging


# ------------------------------------------------------------ seeds, resume, interrupt
_SMALL = ["--set", "workload.num_trajectories=3", "--no-report", "--workers", "1", "--quiet"]


def _seeds(folder):
    return {p.parent.relative_to(folder).as_posix(): json.loads(p.read_text())["seed"]
            for p in folder.rglob("summary.json")}  # fmt: skip


def test_vary_seed_runs_each_variants_own_seed(run_cli, tmp_path):
    out = tmp_path / "seeds"
    code, _, stderr = run_cli(["compare", SWARM, "--vary", "seed=1,2", "--out", str(out), *_SMALL])
    assert code == 0, stderr
    assert _seeds(out) == {"seed=1": 1, "seed=2": 2}  # not the scenario's own seed twice
    frame = pd.read_parquet(out / "compare.parquet")
    assert frame.seed.tolist() == [1.0, 2.0]
    assert frame["ttft_s.p99"][0] != frame["ttft_s.p99"][1]  # two different runs
    rep = tmp_path / "rep"
    code, _, stderr = run_cli(["compare", SWARM, "--vary", "seed=1,2", "--out", str(rep),
                               "--replications", "2", *_SMALL])  # fmt: skip
    assert code == 0, stderr
    # seeds 1 and 2 are one apart: replications step by 2, no run twice
    assert _seeds(rep) == {"seed=1/seed-1": 1, "seed=1/seed-3": 3,
                           "seed=2/seed-2": 2, "seed=2/seed-4": 4}  # fmt: skip


def test_compare_again_with_force_skips_the_runs_it_has(run_cli, tmp_path):
    out = tmp_path / "again"
    argv = ["compare", SWARM, "--vary", "seed=1,2", "--out", str(out), *_SMALL]
    assert run_cli(argv)[0] == 0
    first = pd.read_parquet(out / "compare.parquet")
    stamp = (out / "seed=1" / "summary.json").stat().st_mtime_ns
    gone = out / "seed=2"
    for p in gone.iterdir():
        p.unlink()
    gone.rmdir()
    assert run_cli([*argv, "--force"])[0] == 0
    assert (out / "seed=1" / "summary.json").stat().st_mtime_ns == stamp  # kept, not rerun
    assert _seeds(out) == {"seed=1": 1, "seed=2": 2}  # the missing one ran again
    again = pd.read_parquet(out / "compare.parquet")
    cols = [c for c in first.columns if "wall" not in c]
    pd.testing.assert_frame_equal(first[cols], again[cols])


@pytest.mark.parametrize(("argv", "message"), [
    (["--vary", "seed=1,,2"], "kvsim: error: --vary: seed: value 2 of '1,,2' is empty\n"),
    ([], "a scenario file: give --vary KEY=V1,V2 to compare variants of it"),
])  # fmt: skip
def test_compare_messages_blame_the_right_flag(run_cli, tmp_path, argv, message):
    code, _, stderr = run_cli(["compare", E20, "--out", str(tmp_path / "x"), *argv])
    assert code == 2 and stderr.count("\n") == 1 and message in stderr
    assert "--set" not in stderr and "not a run folder" not in stderr
    assert not (tmp_path / "x").exists()


def test_interrupted_compare_says_what_it_kept_and_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "cut"
    cmd = [sys.executable, "-m", "sim.cli", "compare", SWARM, "--vary", "seed=1,2,3",
           "--out", str(out), "--set", "workload.num_trajectories=4", "--no-report",
           "--workers", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600  # a hang guard only, never a speed budget
        while not [p for p in out.glob("*/summary.json") if not p.parent.name.startswith(".")]:
            assert proc.poll() is None, "compare ended before any variant finished"
            if time.monotonic() > deadline:  # a hang, not slowness: 600 s for a 4-agent run
                pytest.fail("hang guard: no variant finished")
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    kept = sorted(p.name for p in out.iterdir())
    assert f"interrupted: {len(kept)} of 3 runs are complete in {out}/ and kept" in err
    assert 1 <= len(kept) < 3 and all((out / k / "summary.json").is_file() for k in kept)
    assert not (out / "compare.parquet").exists()  # no comparison claims to be complete
    stamps = {k: (out / k / "summary.json").stat().st_mtime_ns for k in kept}
    done = subprocess.run([*cmd, "--force", "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert {k: (out / k / "summary.json").stat().st_mtime_ns for k in kept} == stamps
    assert len(pd.read_parquet(out / "compare.parquet")) == 3

"""The run report (sim/report): files, pictures that plot the tables, offline HTML,
``kvsim report`` rebuilds, ``--no-report``, the progress and end-of-run text, the trace."""

from __future__ import annotations

import json

import numpy as np
from report_helpers import E20, ROOT, SWARM, external_urls

from sim.metrics.recorder import GPU_PARTS
from sim.report import plot_latency_cdf, plot_memory, render_report, report_files, series
from sim.report.plots import PLOTS, plot_efficiency, plot_prefix
from sim.report.text import progress_text, summary_rows, summary_table
from sim.report.trace import trace_events

PNG = b"\x89PNG\r\n\x1a\n"


def test_kvsim_run_writes_a_report_that_plots_the_tables(agent_folder):
    names = {p.name for p in agent_folder.iterdir()}
    assert set(report_files()) <= names and "trace.json" in names
    for plot in PLOTS:
        data = (agent_folder / plot.file).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, plot.file  # a real picture
        import matplotlib.image

        img = matplotlib.image.imread(agent_folder / plot.file)
        assert img.shape[0] > 200 and img.shape[1] > 400
        assert img[..., :3].std() > 0.05, plot.file  # not a blank canvas
    html = (agent_folder / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(PLOTS)
    assert "agent_swarm" in html and "TTFT mean / p50 / p90 / p99" in html
    assert external_urls(html) == []


def test_the_url_scan_would_catch_a_link():
    assert external_urls('<img src="https://x.org/a.png">')
    assert external_urls('<a href="//cdn.example">')
    assert external_urls("<script>") and external_urls("a { background: url(x) }")


def test_plotted_series_equal_the_tables(agent_run):
    mem = agent_run.memory
    assert len(mem) <= series.MAX_POINTS  # no downsampling here: the series is the column
    eff = plot_efficiency(agent_run).axes[0]
    assert len(mem) > series.SMOOTH_ROWS  # the raw series, light under a time-binned mean
    lines = {ln.get_label().removesuffix(" (raw)"): ln for ln in eff.lines if ln.get_alpha()}
    assert np.array_equal(lines["eta_alloc"].get_xdata(), mem.t_s.to_numpy())
    assert np.array_equal(lines["eta_alloc"].get_ydata(), mem.eta_alloc.to_numpy(), equal_nan=True)
    assert np.array_equal(lines["eta_effective"].get_ydata(), mem.eta_effective.to_numpy())
    stack = series.memory_stack(mem)  # one GPU's HBM, physically (memory.parquet gpu_*)
    assert list(series.PHYSICAL_PARTS) == list(GPU_PARTS)
    for col, label in series.PHYSICAL_PARTS.items():
        assert np.array_equal(stack.layers[label], mem[col].to_numpy() / 1e9), col
    top = sum(stack.layers.values())  # the stack's top is the GPU's HBM
    assert np.allclose(top, 85_899_345_920 / 1e9, rtol=1e-12)
    old = series.memory_stack(mem.drop(columns=list(GPU_PARTS)))  # an older run folder
    assert np.array_equal(old.layers["token states"], mem.useful_bytes.to_numpy() / 1e9)
    assert np.array_equal(old.layers["free"], mem.free_bytes.to_numpy() / 1e9)
    lat = {ln.get_label(): ln for ln in plot_latency_cdf(agent_run).axes[0].lines}
    ttft = np.sort(agent_run.requests.ttft_s.dropna().to_numpy())
    assert np.array_equal(lat["TTFT"].get_xdata(), ttft)
    assert lat["TTFT"].get_ydata()[-1] == 1.0
    resume = np.sort(agent_run.pauses.resume_latency_s.dropna().to_numpy())
    assert np.array_equal(lat["resume latency"].get_xdata(), resume)
    traj = agent_run.trajectories
    dots = plot_prefix(agent_run).axes[0].lines[0]
    assert np.allclose(dots.get_ydata(), traj.hit_tokens / traj.lookup_tokens)


def test_long_series_are_downsampled_keeping_first_and_last():
    idx = series.stride_index(100_000, 1500)
    assert len(idx) <= 1500 and idx[0] == 0 and idx[-1] == 99_999
    assert list(series.stride_index(5, 1500)) == [0, 1, 2, 3, 4]
    x, y = series.cdf(np.arange(10_000.0)[::-1], max_points=100)
    assert len(x) == 100 and x[0] == 0 and x[-1] == 9999 and y[-1] == 1.0


def test_itl_sample_weights_coalesced_runs_by_their_steps(e20_run):
    values, weights = series.itl_sample(e20_run.steps)
    s = e20_run.steps[(e20_run.steps.n_steps > 0) & (e20_run.steps.n_decode > 0)]
    assert weights.sum() == (s.n_decode * s.n_steps).sum()
    assert np.allclose(values, s.duration_s / s.n_steps)


def test_notebook_helpers_take_a_result_or_a_folder(agent_run, agent_folder):
    from matplotlib.figure import Figure

    from sim.report import plot_compare

    for fig in (plot_memory(agent_run), plot_memory(agent_folder), plot_latency_cdf(agent_folder),
                plot_compare([agent_folder, agent_run]), plot_compare({"a": agent_run}, kind="ttft")):
        assert isinstance(fig, Figure) and fig.axes  # fmt: skip


def test_no_report_writes_the_run_alone(run_cli, tmp_path):
    out = tmp_path / "r"
    assert run_cli(["run", E20, "--out", str(out), "--quiet", "--no-report"])[0] == 0
    names = {p.name for p in out.iterdir()}
    assert "summary.json" in names and not names & set(report_files())
    assert "trace.json" not in names


def test_kvsim_report_rebuilds_only_its_own_files(run_cli, tmp_path):
    out = tmp_path / "r"
    assert run_cli(["run", E20, "--out", str(out), "--quiet", "--no-report"])[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, stdout, _ = run_cli(["report", str(out)])
    assert code == 0 and "report.html" in stdout
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(after) == set(before) | set(report_files())  # nothing else, no temporaries
    assert all(after[n] == b for n, b in before.items())  # the run's files untouched
    code, _, _ = run_cli(["report", str(out), "--trace"])
    assert code == 0 and (out / "trace.json").is_file()
    assert not [p for p in tmp_path.rglob(".*")]


def test_kvsim_report_on_a_folder_that_is_not_a_run(run_cli, tmp_path):
    code, _, stderr = run_cli(["report", str(tmp_path)])
    assert code == 2 and stderr == f"kvsim: error: {tmp_path}: not a run folder (no summary.json)\n"


def test_kvsim_report_names_a_deleted_table(run_cli, tmp_path):
    import shutil

    run = tmp_path / "run"
    assert run_cli(["run", E20, "--out", str(run), "--quiet", "--no-report"])[0] == 0
    for table in ("steps", "requests", "memory", "trajectories", "pauses"):
        out = tmp_path / table
        shutil.copytree(run, out)
        (out / f"{table}.parquet").unlink()
        before = sorted(p.name for p in out.iterdir())
        code, stdout, stderr = run_cli(["report", str(out)])
        assert (code, stdout) == (2, "")
        assert stderr == (f"kvsim: error: {out}: {table}.parquet is missing (the run folder "
                          "is incomplete: run the scenario again with kvsim run)\n")  # fmt: skip
        assert sorted(p.name for p in out.iterdir()) == before  # no report drawn without it


def test_a_report_that_fails_to_render_does_not_lose_the_run(run_cli, tmp_path, monkeypatch):
    import sim.report.render as render

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(render, "render_pngs", broken)
    monkeypatch.setattr("sim.report.worker.worth_a_worker", lambda: False)  # in this process
    out = tmp_path / "r"
    code, _, stderr = run_cli(["run", E20, "--out", str(out), "--quiet"])
    assert code == 0 and (out / "summary.json").is_file()
    assert "report not written (RuntimeError: boom)" in stderr
    assert not {p.name for p in out.iterdir()} & set(report_files())


def test_render_report_into_a_folder(e20_run, tmp_path):
    written = render_report(e20_run, tmp_path)
    assert sorted(p.name for p in written) == sorted(report_files())
    html = (tmp_path / "report.html").read_text()
    assert "no tool pauses in this run" not in html  # text of plots is in the PNGs only
    assert external_urls(html) == []


# ------------------------------------------------------------------------ text
def test_progress_text():
    assert progress_text(0.0, 0, 100, 0.0) == "sim 0.0 s | 0/100 trajectories | ETA -"
    # a quarter done in 30 s: 90 s to go
    assert progress_text(12.34, 25, 100, 30.0) == "sim 12.3 s | 25/100 trajectories | ETA 1:30"
    # the horizon is further along than the trajectories: it sets the fraction
    assert progress_text(500.0, 10, 100, 10.0, 1000.0) == (
        "sim 500.0 of 1,000 s | 10/100 trajectories | ETA 0:10"
    )
    assert progress_text(7200.0, 1, 2, 7200.0) == "sim 7,200.0 s | 1/2 trajectories | ETA 2:00:00"


def test_end_of_run_table_has_one_unit_per_kind():
    s = {"scenario": "x", "requests_completed": 3, "trajectories_completed": 3,
         "sim_time_s": 2.0, "wall_time_s": 0.5,
         "ttft_s": {"mean": 0.1, "p50": 0.05, "p90": 0.2, "p99": 1.5},
         "itl_s": {"mean": None, "p50": None, "p90": None, "p99": None},
         "max_itl_s": 0.02, "output_tokens_per_s": 1234.5, "prefix_hit_rate": 0.5,
         "eta_alloc_mean": 0.9, "eta_effective_mean": None, "peak_allocated_bytes": 2_500_000_000,
         "preemptions": 3, "rejected": 0}  # fmt: skip
    rows = summary_rows(s)
    assert rows[0] == ("TTFT mean / p50 / p90 / p99", "100.0 / 50.0 / 200.0 / 1,500.0", "ms")
    assert ("max ITL", "20.0", "ms") in rows and ("preemptions", "3", "count") in rows
    assert ("eta_effective (mean)", "-", "%") in rows and ("peak allocated", "2.50", "GB") in rows
    assert not any(r[0].startswith("ITL") for r in rows)  # no samples: no row
    text = summary_table(s)
    assert text.startswith("x: 3 requests, 3 trajectories in 2.0 s simulated (0.50 s wall)\n")
    assert {r[2] for r in rows} <= {"ms", "tokens/s", "tokens", "%", "GB", "GB*s", "count", "USD"}


# ------------------------------------------------------------------------ trace
def test_trace_is_valid_and_complete(agent_folder, agent_run):
    trace = json.loads((agent_folder / "trace.json").read_text())
    events = trace["traceEvents"]
    steps = agent_run.steps
    slices = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert len(slices) == int((steps.n_steps > 0).sum())  # a coalesced run is one slice
    runs = [e for e in slices if e["args"]["n_steps"] > 1]
    assert runs and all(e["name"] == f"decode run x{e['args']['n_steps']}" for e in runs)
    assert sum(e["args"]["n_steps"] for e in slices) == agent_run.summary["steps"]
    opened = {}
    for e in events:  # every async begin has its end, properly nested per id
        if e["ph"] == "b":
            opened.setdefault((e["cat"], e["id"]), []).append(e["name"])
        elif e["ph"] == "e":
            assert opened[(e["cat"], e["id"])].pop() == e["name"]
    assert all(not v for v in opened.values())
    pauses = [e for e in events if e["ph"] == "b" and e["name"].startswith("pause ")]
    assert len(pauses) == len(agent_run.pauses)
    assert trace["otherData"]["truncated_at_s"] is None


def test_trace_size_cap_keeps_whole_slices_in_time_order(agent_run):
    trace = trace_events(agent_run, max_events=300)
    events = trace["traceEvents"]
    assert len(events) <= 300 and trace["otherData"]["truncated_at_s"] is not None
    cut = trace["otherData"]["truncated_at_s"] * 1e6
    assert all(e["ts"] <= cut for e in events if "ts" in e and e["ph"] in "Xbi")
    begins = sum(e["ph"] == "b" for e in events)
    assert begins == sum(e["ph"] == "e" for e in events)


def test_trace_of_offloads_shows_copies(run_cli, tmp_path):
    from sim.report.trace import trace_events as te
    from sim.run import run_scenario

    run = run_scenario(SWARM, **{"workload.num_trajectories": 6, "pause_policy.kind": "offload_host",
                                 "hardware.node": "dgx-h100"})  # fmt: skip
    events = te(run)["traceEvents"]
    assert any(e["ph"] == "b" and e["cat"] == "copy" and e["name"].startswith("d2h") for e in events)
    assert any(e["ph"] == "b" and e["name"] == "copy out" for e in events)


def test_cli_help_lists_report_and_compare(run_cli):
    code, stdout, _ = run_cli(["--help"])
    assert code == 0 and "report" in stdout and "compare" in stdout


def test_docs_show_every_plot_with_its_sentence():
    from sim.report.compare_plots import COMPARE_PLOTS

    text = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    for p in (*PLOTS, *COMPARE_PLOTS):
        assert f"](img/reports/{p.file})" in text and p.how_to_read in text, p.file
        assert (ROOT / "docs" / "img" / "reports" / p.file).read_bytes().startswith(PNG)

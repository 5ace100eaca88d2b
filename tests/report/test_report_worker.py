"""The report drawn by a worker process while the run goes on (sim.report.worker): the
same files byte for byte, failures as the one-line note, never a run lost."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from report_helpers import E20

import sim.report.worker as worker_mod
from sim.report.render import render_extras, report_files
from sim.report.worker import ReportWorker
from sim.run.output import write_run


def _run_folder(run, path):
    write_run(run, path)  # the run's own files, no report (the CLI's hook draws it)
    return path


def test_the_worker_writes_the_in_process_report_byte_for_byte(e20_run, tmp_path):
    here = _run_folder(e20_run, tmp_path / "here")
    there = tmp_path / "there"
    shutil.copytree(here, there)
    assert render_extras(e20_run, here) is None  # from the RunResult in memory
    with ReportWorker() as worker:
        assert worker.started
        assert worker.render(there) is None  # from the folder's tables, in the worker
        assert worker.render(there) is None  # it serves request after request
    for rel in report_files():
        assert (here / rel).read_bytes() == (there / rel).read_bytes(), rel
    assert sorted(p.name for p in here.iterdir()) == sorted(p.name for p in there.iterdir())


def test_a_worker_that_fails_or_dies_leaves_the_report_out_in_one_line(e20_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with ReportWorker() as worker:
        note = worker.render(empty)  # not a run folder: render_extras' own note
        assert note.startswith("report not written (KvsimError: ")
        assert note.endswith("`kvsim report RUN_DIR` renders it again")
        folder = _run_folder(e20_run, tmp_path / "run")
        worker._proc.kill()  # killed between requests
        worker._proc.wait()
        note = worker.render(folder)
    assert note == "report not written (the report worker stopped); `kvsim report RUN_DIR` renders it again"
    assert not {p.name for p in folder.iterdir()} & set(report_files())
    assert list(empty.iterdir()) == []


def test_kvsim_run_draws_the_report_in_the_worker_when_it_is_worth_it(run_cli, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    calls = []
    render = ReportWorker.render

    def counted(self, folder):
        calls.append(folder.name)
        return render(self, folder)

    monkeypatch.setattr(ReportWorker, "render", counted)
    monkeypatch.setattr(worker_mod, "worth_a_worker", lambda: True)
    code, _, stderr = run_cli(["run", E20, "--out", str(tmp_path / "r"), "--quiet", "--trace"])
    assert (code, stderr) == (0, "")
    assert len(calls) == 1 and calls[0].endswith(".partial")  # into the temporary folder
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert set(report_files()) | {"trace.json", "summary.json"} <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left over
    monkeypatch.setattr(worker_mod, "worth_a_worker", lambda: False)
    code, _, _ = run_cli(["run", E20, "--out", str(tmp_path / "s"), "--quiet"])
    assert code == 0 and len(calls) == 1  # in process: no worker


def test_no_worker_where_matplotlib_is_imported_already_nor_a_second_one(monkeypatch):
    import matplotlib  # noqa: F401

    assert worker_mod.worth_a_worker() is False
    monkeypatch.delitem(sys.modules, "matplotlib")
    monkeypatch.setattr(worker_mod, "_STARTED", [])
    assert worker_mod.worth_a_worker() is (len(os.sched_getaffinity(0)) > 1)
    with ReportWorker():
        assert worker_mod.worth_a_worker() is False  # one per process


def test_a_sim_package_in_the_current_folder_does_not_shadow_the_worker(e20_run, tmp_path,
                                                                         monkeypatch):  # fmt: skip
    """The worker runs with ``-P``: a ``./sim`` where the user stands is not imported."""
    fake = tmp_path / "cwd" / "sim" / "report"
    fake.mkdir(parents=True)
    for init in (fake.parent / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    marker = tmp_path / "shadowed"
    (fake / "worker.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(fake.parent.parent)
    # kvsim's folder already on the path (as site-packages is for an installed kvsim), so
    # the worker's boot does not put it ahead of the current folder itself
    root = str(Path(worker_mod.__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    folder = _run_folder(e20_run, tmp_path / "run")
    with ReportWorker() as worker:
        assert worker.render(folder) is None
    assert not marker.exists()
    assert all((folder / rel).exists() for rel in report_files())

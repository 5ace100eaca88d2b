"""Every CSV a user points kvsim at is read within the project's file-size bound
(``sim.yamlio.read_bytes_bounded``: ``MAX_FILE_BYTES``, a device or a folder refused before
it is opened), one line naming the file: ``kvsim calibrate``'s run folder and layer CSV,
the Vidur profiles, a BFCL ``steps.csv`` fit. Before, each was handed to ``pd.read_csv``
whole (a table linked to ``/dev/zero`` read until memory ran out; a folder was an
``IsADirectoryError`` traceback). The LLMServingSim tables and the workload traces have
their own tests (tests/kernels/test_calibrate_llmservingsim.py, tests/workload)."""

from __future__ import annotations

import json

import pytest

from sim.errors import KvsimError

ROW = "a,b\n" + "1,2\n" * 40  # 164 bytes


def _readers(tmp_path):
    """(name, the file it reads, a call that reads it)."""
    from sim.cost.calibrate import read_run, read_steps
    from sim.cost.vidur_data import read_allreduce_csv, read_mlp_csv
    from sim.workload.fit import fit_function_calling

    run = tmp_path / "run"
    run.mkdir()
    (run / "env.json").write_text(json.dumps({"device": "x"}))
    return [
        ("calibrate run folder", run / "gemm.csv", lambda p: read_run(run)),
        ("calibrate layer csv", tmp_path / "layer.csv", read_steps),
        ("vidur mlp.csv", tmp_path / "mlp.csv", lambda p: read_mlp_csv(p, "h100", "m")),
        ("vidur all_reduce.csv", tmp_path / "all_reduce.csv", lambda p: read_allreduce_csv(p, "h100")),
        ("bfcl steps.csv", tmp_path / "steps.csv", fit_function_calling),
    ]


@pytest.mark.parametrize("i", range(5))
def test_a_csv_over_the_bound_is_one_line_naming_it(tmp_path, monkeypatch, i):
    name, path, read = _readers(tmp_path)[i]
    path.write_text(ROW)
    monkeypatch.setattr("sim.yamlio.MAX_FILE_BYTES", 100)
    with pytest.raises(KvsimError) as exc:
        read(path)
    assert str(exc.value) == f"{path}: file is 164 bytes; the limit is 100", name


@pytest.mark.parametrize("i", range(1, 5))
def test_a_folder_where_a_csv_is_due_is_one_line_naming_it(tmp_path, i):
    name, path, read = _readers(tmp_path)[i]
    path.mkdir()
    with pytest.raises(KvsimError) as exc:
        read(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value), name

"""Rules for what runs on the device: allowed imports, and run_all.sh's time budget.

No torch needed: the scripts are parsed, and run_all.sh is driven with a stand-in Python.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

DEVICE_SCRIPTS = [
    "benchlib.py", "geometry.py", "paged_attention.py", "triton_paged.py",
    "check_correctness.py", "bench_paged_attention.py", "bench_copies.py", "bench_gemm.py",
    "bench_layer.py", "env_info.py", "summarize.py",
]  # fmt: skip
SIBLINGS = {name[:-3] for name in DEVICE_SCRIPTS}
ALLOWED = set(sys.stdlib_module_names) | {"torch", "triton"} | SIBLINGS


def imported_roots(path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("name", DEVICE_SCRIPTS)
def test_device_scripts_import_only_torch_triton_and_stdlib(kv_dir, name):
    roots = imported_roots(kv_dir / name)
    assert roots <= ALLOWED, f"{name} imports {sorted(roots - ALLOWED)}"
    assert not roots & {"sim", "numpy", "pandas", "yaml"}


def test_run_all_respects_its_total_budget(tmp_path, kv_dir):
    """A piece that would run forever is killed at the total limit; later ones never start."""
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\ncase "$1" in *summarize.py) exit 0;; *.py) exec sleep 60;; *) exit 1;; esac\n'
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(fake), "TOTAL_S": "3",
           "MIN_PIECE_S": "1"}  # fmt: skip
    proc = subprocess.run(["bash", str(kv_dir / "run_all.sh")], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    log = (out / "run_all.log").read_text()
    assert "no CUDA device visible" in log  # the stand-in cannot import torch
    assert "=== env_info: start" in log and "soft 0s, hard 3s" in log
    assert "=== env_info: killed at its hard limit" in log
    for piece in ("check_correctness", "bench_paged_attention", "bench_copies", "bench_layer",
                  "bench_gemm"):  # fmt: skip
        assert f"=== {piece}: not started" in log
    # nothing measured: exit 1, saying so (before: 0)
    assert proc.returncode == 1
    assert "run_all.sh: no check or benchmark succeeded (0 failed, 5 not started)" in proc.stderr


def _stand_in(tmp_path, body: str):
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    return fake


def test_run_all_without_torch_exits_1_saying_why(tmp_path, kv_dir):
    """Every piece fails (a Python without torch): exit 1 and one line why (before: exit 0,
    with every CSV "missing")."""
    fake = _stand_in(
        tmp_path,
        'case "$1" in *summarize.py) exit 0;; esac\n'
        'echo "ModuleNotFoundError: No module named torch" >&2; exit 1',
    )
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(fake)}
    proc = subprocess.run(["bash", str(kv_dir / "run_all.sh")], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == (f"run_all.sh: no check or benchmark succeeded (5 failed, 0 not started): "
                           f"{fake} cannot import torch (install torch, or set PYTHON to an "
                           f"interpreter that has it); see {out}/run_all.log\n")  # fmt: skip


def test_run_all_exits_0_when_a_piece_ran(tmp_path, kv_dir):
    """Pieces that ran (one failing among them): exit 0, the log says which failed."""
    fake = _stand_in(tmp_path, 'case "$1" in -c) exit 1;; *bench_gemm.py) exit 3;; esac\nexit 0')
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(fake)}
    proc = subprocess.run(["bash", str(kv_dir / "run_all.sh")], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    log = (out / "run_all.log").read_text()
    assert proc.returncode == 0 and proc.stderr == ""
    assert "=== bench_gemm: rc=3" in log and "=== bench_layer: rc=0" in log


def test_run_all_requires_out(kv_dir):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    proc = subprocess.run(["bash", str(kv_dir / "run_all.sh")], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode != 0 and "set OUT" in proc.stderr

"""``python -m sim.cli`` runs the ``kvsim`` command (before: no ``sim/cli/__main__.py``)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def _module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_python_m_sim_cli_prints_the_version():
    proc = _module("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"kvsim {importlib.metadata.version('kvcache-sim')}\n"


def test_python_m_sim_cli_reports_user_errors_in_one_line(tmp_path):
    proc = _module("validate", str(tmp_path / "absent.yaml"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvsim: error: "), proc.stderr
    assert "Traceback" not in proc.stderr


_CTRL_C_WHILE_IMPORTING = """
import sys

class CtrlC:  # Ctrl-C lands while a command module is being imported (start-up)
    def find_spec(self, name, path=None, target=None):
        if name == "sim.cli.compare":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
from sim.cli import main  # what the kvsim console script does

sys.exit(main(["--help"]))  # the help imports every command module (--version: none)
"""


def test_ctrl_c_while_importing_is_one_line_and_exit_130():
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_WHILE_IMPORTING], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (130, "kvsim: interrupted\n")

"""The shipped profiles are found wherever kvsim is installed, and user folders still win.

A wheel install is laid out here by hand (``site/sim`` plus ``site/sim/_profiles``, as the
build's package-dir mapping writes it) and driven in a fresh interpreter whose working
directory is outside the checkout, so only the package data can answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cost.calibration import available_calibrations, default_search_dirs
from sim.profiles import available
from sim.profiles.registry import PACKAGED_SUBDIR, builtin_profiles_dir

ROOT = Path(__file__).resolve().parents[2]
KINDS_AND_CALIBRATION = {"accelerators", "models", "nodes", "calibration"}


def test_checkout_builtin_dir_is_the_top_level_folder_with_every_kind():
    # an editable install (or a run from the checkout) reads hardware_profiles/ itself
    assert builtin_profiles_dir() == ROOT / "hardware_profiles"
    assert KINDS_AND_CALIBRATION <= {p.name for p in builtin_profiles_dir().iterdir()}
    assert default_search_dirs()[-1] == builtin_profiles_dir() / "calibration"
    assert "synthetic-example" in available_calibrations()


@pytest.fixture(scope="module")
def wheel_layout(tmp_path_factory) -> Path:
    """``site/sim`` with the profiles as package data, no checkout around it."""
    site = tmp_path_factory.mktemp("site")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "sim", site / "sim", ignore=ignore)
    shutil.copytree(ROOT / "hardware_profiles", site / "sim" / PACKAGED_SUBDIR, ignore=ignore)
    return site


_PROBE = """
import json, sys
from sim.cost.calibration import available_calibrations
from sim.profiles import available, load_model
from sim.profiles.registry import builtin_profiles_dir
import sim
print(json.dumps({
    "sim": sim.__file__,
    "builtin": str(builtin_profiles_dir()),
    "models": {k: str(v) for k, v in available("model").items()},
    "nodes": sorted(available("node")),
    "calibrations": {k: str(v) for k, v in available_calibrations().items()},
    "llama_layers": load_model("llama-3-8b").num_layers,
}))
"""


def _probe(site: Path, cwd: Path, env_extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KVSIM_PROFILES"}
    env.update({"PYTHONPATH": str(site), **(env_extra or {})})
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_wheel_layout_finds_every_shipped_profile_through_package_data(wheel_layout, tmp_path):
    got = _probe(wheel_layout, cwd=tmp_path)
    packaged = wheel_layout / "sim" / PACKAGED_SUBDIR
    assert got["sim"] == str(wheel_layout / "sim" / "__init__.py")  # not the checkout's
    assert got["builtin"] == str(packaged)
    assert set(got["models"]) == set(available("model"))
    assert all(Path(f).parent == packaged / "models" for f in got["models"].values())
    assert got["nodes"] == sorted(available("node"))
    assert got["calibrations"]["synthetic-example"] == str(
        packaged / "calibration" / "synthetic-example.yaml"
    )
    assert got["llama_layers"] == 32


def test_install_without_profiles_says_so_in_one_line(tmp_path):
    # a broken install used to answer "unknown model ...; valid: " with an empty list
    site = tmp_path / "site"
    shutil.copytree(ROOT / "sim", site / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "KVSIM_PROFILES"}
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from sim.cli import main; sys.exit(main(sys.argv[1:]))",
         "plan", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "1",
         "--context", "1024"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "shipped profiles are missing" in proc.stderr
    assert str(site / "sim" / PACKAGED_SUBDIR) in proc.stderr


def test_user_folder_shadows_the_packaged_profiles(wheel_layout, tmp_path):
    user = tmp_path / "mine"
    (user / "models").mkdir(parents=True)
    (user / "calibration").mkdir()
    llama = (ROOT / "hardware_profiles" / "models" / "llama-3-8b.yaml").read_text()
    (user / "models" / "llama-3-8b.yaml").write_text(
        llama.replace("num_layers: 32", "num_layers: 40")
    )
    cal = ROOT / "hardware_profiles" / "calibration" / "synthetic-example.yaml"
    shutil.copy(cal, user / "calibration" / "synthetic-example.yaml")
    got = _probe(wheel_layout, cwd=tmp_path, env_extra={"KVSIM_PROFILES": str(user)})
    assert got["llama_layers"] == 40
    assert got["models"]["llama-3-8b"] == str(user / "models" / "llama-3-8b.yaml")
    assert got["calibrations"]["synthetic-example"] == str(
        user / "calibration" / "synthetic-example.yaml"
    )
    # the other shipped profiles are still there, from the package
    packaged = wheel_layout / "sim" / PACKAGED_SUBDIR
    assert got["models"]["llama-3-70b"] == str(packaged / "models" / "llama-3-70b.yaml")

"""Packaging: the wheel ships every package and the profiles; the dev extra covers the tests.

The README's set-up line (``pip install -e '.[dev]'``) must install everything the test
suite imports, torch excepted (its tests skip without it); ``kvsim --version`` reports the
installed distribution; a built wheel works from outside the checkout (slow: it builds and
installs one, as ``.ci/check_wheel`` does in CI).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import sim

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = "kvcache-sim"
#: optional, each behind pytest.importorskip in the tests that use it
OPTIONAL_MODULES = {"torch", "triton"}


def _folders(top: Path) -> set[Path]:
    """Every folder at or under ``top`` that holds a file (caches aside)."""
    return {
        p.parent for p in top.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
    }  # fmt: skip


def test_every_sim_package_is_shipped_and_the_profiles_are_mapped_in():
    config = PYPROJECT["tool"]["setuptools"]
    # every folder Python can import (with or without __init__.py: a data folder is a
    # namespace package): setuptools warns about any missing from `packages`, and a new
    # sub-package missing there is absent from wheels
    on_disk = {".".join(d.relative_to(ROOT).parts) for d in _folders(ROOT / "sim")}
    profiles = {
        ".".join(("sim", "_profiles", *d.relative_to(ROOT / "hardware_profiles").parts))
        for d in _folders(ROOT / "hardware_profiles")
    }
    assert "sim.workload.fitted" in on_disk and "sim._profiles.models" in profiles
    assert set(config["packages"]) == on_disk | profiles | {"sim._profiles"}
    assert config["package-dir"] == {"sim._profiles": "hardware_profiles"}
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["sim._profiles"]
    shipped = {p for g in globs for p in (ROOT / "hardware_profiles").glob(g)}
    assert shipped == set((ROOT / "hardware_profiles").rglob("*.yaml"))
    assert {p.parent.name for p in shipped} >= {"accelerators", "models", "nodes", "calibration"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(reqs: list[str]) -> set[str]:
    return {_normalize(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}


def _imported_top_level_modules(folders: list[Path]) -> set[str]:
    names: set[str] = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


def test_dev_extra_installs_every_third_party_module_the_tests_import():
    project = PYPROJECT["project"]
    provided = _requirement_names(project["dependencies"])
    provided |= _requirement_names(project["optional-dependencies"]["dev"])
    assert "torch" not in provided  # 750 MB: only kernels_validation/ needs it
    local = {"sim"} | {
        p.stem for d in ("tests", "kernels_validation", "notebooks") for p in (ROOT / d).rglob("*.py")
    }
    dists = importlib.metadata.packages_distributions()
    missing = {}
    folders = [ROOT / "tests", ROOT / "notebooks"]  # notebooks run inside the tests
    for module in sorted(_imported_top_level_modules(folders)):
        if module in sys.stdlib_module_names or module in local or module in OPTIONAL_MODULES:
            continue
        names = {_normalize(d) for d in dists.get(module, [])}
        if not names & provided:
            missing[module] = sorted(names) or "not installed"
    assert not missing, f"tests import modules the dev extra does not install: {missing}"


def test_version_flag_prints_the_installed_distribution_version(run_cli):
    code, out, err = run_cli(["--version"])
    assert code == 0, err
    assert out == f"kvsim {importlib.metadata.version(DIST)}\n"
    # one source of truth: pyproject reads the version from sim.version (statically)
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "sim.version.__version__"
    }
    assert importlib.metadata.version(DIST) == sim.__version__


def test_version_flag_is_listed_in_help_and_commands_still_run(run_cli):
    code, out, _ = run_cli(["--help"])
    assert code == 0 and "--version" in out
    code, out, err = run_cli(["profiles", "list", "--kind", "model", "--json"])
    assert code == 0, err
    assert "llama-3-8b" in out


def test_license_is_an_spdx_string_and_setuptools_reads_it():
    # a TOML table is deprecated (setuptools >= 77 warns); the string needs 77 to build
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]


def test_wheel_builds_without_setuptools_warnings():
    # builds the wheel in an isolated build environment (setuptools from the index or
    # cache) and fails on any deprecation or "absent from packages" warning (~10-20 s)
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "check_wheel"), "--build-only", sys.executable],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ci: wheel: built without warnings" in proc.stderr


@pytest.mark.slow
def test_built_wheel_works_outside_the_checkout():
    # builds the wheel, installs it (deps from the index or cache) into a fresh venv and
    # runs --version, plan, profiles list and a tiny run from a temporary folder
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "check_wheel"), sys.executable],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ci: wheel: ok" in proc.stderr

"""Where the suite and baselines are: ``--suite``, ``./tests/golden/``, or the checkout's.

Responsibility: resolve ``--suite`` and ``--baseline`` to a suite file and a baseline
folder. Without ``--suite``: ``tests/golden/suite.yaml`` under the current folder if it
has one (a checkout you are working in), else that of the source checkout the ``sim``
package was imported from (an editable install or a run from the repository); an
installed wheel run elsewhere has neither and the user is told to pass ``--suite``.

Invariant: the default baseline folder is ``<suite folder>/baselines``, so a suite and its
baselines move together; ``describe`` names both, so a run always says what it used.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import KvsimError
from sim.regress.suite import SUITE_FILE_NAME

#: the default suite folder, relative to the checkout root
DEFAULT_SUITE_DIR = Path("tests") / "golden"
#: the default baseline folder, relative to the suite's folder
BASELINE_SUBDIR = "baselines"
#: the imported ``sim`` package's folder (this file is sim/regress/locate.py; found by path,
#: not by importing ``sim``, which is a higher layer)
_SIM_DIR = Path(__file__).resolve().parents[1]


def checkout_root() -> Path | None:
    """The source checkout holding the imported ``sim`` package, if there is one."""
    root = _SIM_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / DEFAULT_SUITE_DIR).is_dir():
        return root
    return None


def resolve_suite(suite: Path | None) -> Path:
    """The suite file: ``suite`` itself, ``suite/suite.yaml``, or the checkout's default."""
    if suite is not None:
        path = Path(suite)
        if path.is_dir():
            path = path / SUITE_FILE_NAME
        if not path.is_file():
            raise KvsimError(f"--suite: {path}: no such suite file")
        return path
    here = Path.cwd() / DEFAULT_SUITE_DIR / SUITE_FILE_NAME
    if here.is_file():
        return here
    root = checkout_root()
    if root is None or not (root / DEFAULT_SUITE_DIR / SUITE_FILE_NAME).is_file():
        where = _SIM_DIR
        raise KvsimError(
            f"no --suite given, no {DEFAULT_SUITE_DIR / SUITE_FILE_NAME} in the current "
            f"folder, and kvsim (imported from {where}) is not in a source checkout with "
            f"one; pass --suite DIR (a folder with {SUITE_FILE_NAME}) or --suite FILE"
        )
    return root / DEFAULT_SUITE_DIR / SUITE_FILE_NAME


def resolve_baseline_dir(baseline: Path | None, suite_file: Path) -> Path:
    """``--baseline`` or ``<suite folder>/baselines``."""
    if baseline is not None:
        path = Path(baseline)
        if path.exists() and not path.is_dir():
            raise KvsimError(f"--baseline: {path}: not a folder")
        return path
    return suite_file.parent / BASELINE_SUBDIR


def describe(suite_file: Path, baseline_dir: Path) -> str:
    """One line naming the suite file and the baseline folder a run uses."""
    return f"suite {suite_file}; baselines {baseline_dir}"

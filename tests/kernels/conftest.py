"""Fixtures for the kernels_validation tests: its scripts are importable by their own names.

The scripts in kernels_validation/ import their siblings by plain name (that is how they
run on the device: ``python3 kernels_validation/bench_x.py``), so the folder goes on
sys.path here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KV_DIR = REPO / "kernels_validation"
if str(KV_DIR) not in sys.path:
    sys.path.insert(0, str(KV_DIR))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kv_dir() -> Path:
    return KV_DIR

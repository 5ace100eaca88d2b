"""Fixtures of the scheduler tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sched_helpers import Ids  # noqa: E402


@pytest.fixture
def ids() -> Ids:
    return Ids()

"""The hypothesis profiles (``tests/hypothesis_profiles.py``, loaded by ``tests/conftest.py``;
docs/testing.md): ``ci`` fixes the examples (CI cannot turn red at random), ``dev``
(local) stays random, ``explore`` draws more; chosen by HYPOTHESIS_PROFILE, else by CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import hypothesis_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({}, "dev"),
        ({"CI": "1"}, "ci"),
        ({"CI": "true"}, "ci"),
        ({"CI": ""}, "dev"),
        ({"CI": "0"}, "dev"),
        ({"CI": "false"}, "dev"),
        ({"HYPOTHESIS_PROFILE": "ci"}, "ci"),
        ({"HYPOTHESIS_PROFILE": "explore", "CI": "1"}, "explore"),
        ({"HYPOTHESIS_PROFILE": "dev", "CI": "1"}, "dev"),
    ],
)
def test_the_profile_follows_hypothesis_profile_then_ci(environ, want):
    assert hypothesis_profile(environ) == want


def test_an_unknown_profile_is_one_line():
    with pytest.raises(pytest.UsageError) as err:
        hypothesis_profile({"HYPOTHESIS_PROFILE": "nightly"})
    assert str(err.value) == "HYPOTHESIS_PROFILE='nightly': expected one of ci, dev, explore"


def test_ci_is_derandomized_and_dev_is_random():
    ci, dev, explore = (settings.get_profile(n) for n in ("ci", "dev", "explore"))
    assert ci.derandomize is True and ci.print_blob is True
    assert dev.derandomize is False  # hypothesis' default: random examples each run
    assert explore.derandomize is False and explore.max_examples == 1000


@pytest.mark.parametrize("ci_env", ["", "1"])
def test_the_profiles_do_not_depend_on_the_shell(ci_env):
    """Hypothesis loads its own derandomized ``ci`` profile at import when CI is set; the
    suite's profiles are built on hypothesis' ``default`` whatever the shell says."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    env.update(CI=ci_env, PYTHONPATH=str(ROOT / "tests"))
    code = (
        "from hypothesis import settings\n"
        "import hypothesis_profiles\n"
        "for n in ('ci', 'dev', 'explore'):\n"
        "    p = settings.get_profile(n)\n"
        "    print(n, p.derandomize, p.deadline is None, p.database is None, p.max_examples)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "ci True True True 100",
        "dev False False False 100",
        "explore False False False 1000",
    ]


def test_a_tests_own_settings_keep_the_profiles_derandomize():
    """``@settings(max_examples=...)`` inherits the rest from the loaded profile."""
    settings.load_profile("ci")
    try:
        own = settings(max_examples=7)
    finally:
        settings.load_profile(hypothesis_profile(dict(os.environ)))
    assert own.derandomize is True and own.max_examples == 7


def _drawn() -> list[int]:
    seen: list[int] = []

    @settings(settings.get_profile("ci"), max_examples=20, database=None)
    @given(st.integers())
    def draw(x: int) -> None:
        seen.append(x)

    draw()
    return seen


def test_the_ci_profile_draws_the_same_examples_every_run():
    first = _drawn()
    assert _drawn() == first and len(first) == 20


def test_ci_script_selects_the_ci_profile():
    script = (ROOT / ".ci" / "run").read_text()
    pytest_at = script.index("\n.venv/bin/python -m pytest")
    assert script.index("\nexport HYPOTHESIS_PROFILE=ci\n") < pytest_at

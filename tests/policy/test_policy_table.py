"""The pause policies declared by name (``sim.policy.base.POLICY_MODULES``) and looked up
(``sim.policy.registry``).

A policy's module is imported when the policy is asked for, so each case runs in a fresh
interpreter (a subprocess: this process has imported every policy already) and reports
which policy modules ended up in ``sys.modules`` and what the registry answered.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the modules that hold the policies themselves (``POLICY_MODULES``' values)
POLICY_PACKAGES = ("break_even", "fixed", "hinted", "min_waste", "ttl_pin")


def _fresh(body: str) -> dict:
    """Run ``body`` (which sets ``out``) in a fresh interpreter; ``out`` and the policy
    modules imported, as JSON."""
    code = f"""
import json, sys
{body}
mods = sorted(m for m in {POLICY_PACKAGES!r} if f"sim.policy.{{m}}" in sys.modules)
print(json.dumps({{"out": out, "modules": mods}}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_package_imports_no_policy_and_asking_for_one_imports_its_module():
    body = """
import sim.policy
from sim.policy import make_policy, policy_class
out = [policy_class("ttl_pin").__module__, type(make_policy("hold")).__name__]
"""
    assert _fresh(body) == {"out": ["sim.policy.ttl_pin", "Hold"], "modules": ["fixed", "ttl_pin"]}


def test_the_registry_reads_in_the_table_s_order_whichever_module_came_first():
    """A later module imported first (``ttl_pin``, ``hinted``) does not move its policies
    to the front: the ``pause_policy`` union (and its JSON Schema) keeps one order."""
    body = """
from sim.policy import policy_class
from sim.policy.base import POLICY_MODULES
from sim.policy.registry import policy_options_models
policy_class("ttl_pin"), policy_class("hints")
kinds = [m.model_fields["kind"].default for m in policy_options_models()]
out = [kinds == list(POLICY_MODULES), kinds]
"""
    got = _fresh(body)
    assert got["out"][0] is True, got["out"][1]
    assert got["modules"] == sorted(POLICY_PACKAGES)


def test_an_unknown_name_lists_every_policy():
    body = """
from sim.errors import UnknownNameError
from sim.policy import policy_class
try:
    policy_class("nope")
except UnknownNameError as exc:
    out = str(exc)
"""
    got = _fresh(body)
    assert got["out"] == ("unknown pause policy 'nope'; valid: break_even, hints, hold, "
                          "min_waste, offload_host, offload_nvme, recompute, ttl_pin")  # fmt: skip
    assert got["modules"] == sorted(POLICY_PACKAGES)


@pytest.mark.parametrize("name", ["hold", "ttl_pin"])
def test_a_plug_in_taking_a_shipped_name_is_refused_before_the_shipped_module_is_imported(name):
    """A class of another module registered under a shipped name is refused as if every
    policy had been imported, with the same message; the shipped policy stays its
    module's."""
    body = f"""
from sim.policy import PausePolicy, register
class Mine(PausePolicy):
    name = {name!r}
    def decide(self, facts):
        raise AssertionError
try:
    register(Mine)
    out = "accepted"
except ValueError as exc:
    out = str(exc)
"""
    body += "\nfrom sim.policy import policy_class\nout = [out, policy_class(" + repr(name) + ").__module__]"
    got = _fresh(body)
    module = "fixed" if name == "hold" else name
    assert got["out"] == [f"pause policy {name!r} registered twice", f"sim.policy.{module}"]


def test_a_plug_in_policy_is_registered_and_listed_after_the_shipped_ones():
    body = """
from typing import Literal
from sim.policy import PausePolicy, PolicyOptions, make_policy, policy_names, register
from sim.policy.registry import policy_options_models
@register
class Mine(PausePolicy):
    name = "mine"
    class Options(PolicyOptions):
        kind: Literal["mine"] = "mine"
    def decide(self, facts):
        raise AssertionError
kinds = [m.model_fields["kind"].default for m in policy_options_models()]
out = [type(make_policy("mine")).__name__, kinds[-1], len(kinds), "mine" in policy_names()]
"""
    assert _fresh(body)["out"] == ["Mine", "mine", 9, True]

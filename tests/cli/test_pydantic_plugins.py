"""The stand-in for pydantic's plug-in loader (``sim.cli._pydantic_plugins``).

Each case runs in a fresh interpreter (this process has imported pydantic's loader
already): with plug-ins off the loader (and ``importlib.metadata``) is never imported;
with them on, or once the switch is put back, pydantic gets its own loader's answer.
The last case reads pydantic's own ``get_plugins`` here: the stand-in copies its signature
and its ``ALL_OFF`` values.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import contextlib, io, json, os, sys
{env}
from sim.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["validate", "workloads/seed_chunked_prefill.yaml"])
after_main = [type(sys.modules["pydantic.plugin._loader"]).__name__,
              "importlib.metadata" in sys.modules]
import pydantic
from pydantic.plugin import _loader

class Late(pydantic.BaseModel):  # a validator built after the command
    x: int = 1

got = {{"rc": rc, "after_main": after_main, "late": Late(x=2).x,
        "loader": type(sys.modules["pydantic.plugin._loader"]).__name__,
        "plugins": list(_loader.get_plugins()), "env": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}}
print(json.dumps(got))
"""


def _run(env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(env=env)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plugins_off_for_the_command_then_pydantic_s_own_loader_after_it():
    """The command runs with the stand-in and no ``importlib.metadata``; once ``main`` has
    put the switch back (unset), the next validator pydantic builds brings in its real
    loader, which answers (no plug-in installed here: an empty list)."""
    got = _run("os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)")
    assert got == {"rc": 0, "after_main": ["_StandIn", False], "late": 2, "loader": "module",
                   "plugins": [], "env": None}  # fmt: skip


@pytest.mark.parametrize("value", ["__all__", "1", "true"])
def test_a_switch_set_to_none_keeps_the_stand_in(value):
    got = _run(f"os.environ['PYDANTIC_DISABLE_PLUGINS'] = {value!r}")
    assert got["after_main"] == ["_StandIn", False]
    assert got["loader"] == "_StandIn" and got["plugins"] == [] and got["env"] == value


def test_a_switch_naming_some_plugins_uses_pydantic_s_loader_from_the_start():
    """A value that disables only some plug-ins leaves pydantic's loader to decide."""
    got = _run("os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'some_plugin'")
    assert got["rc"] == 0 and got["after_main"] == ["module", True]
    assert got["loader"] == "module" and got["env"] == "some_plugin"


def test_install_leaves_a_loaded_loader_alone_and_hands_over_on_any_other_name():
    code = """
import os, sys, json
os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)
from sim.cli import _pydantic_plugins as p
p.install()
stand_in = sys.modules[p.LOADER]
group = stand_in.PYDANTIC_ENTRY_POINT_GROUP  # a name of pydantic's module: hands over
real = sys.modules[p.LOADER]
p.install()  # the real loader is imported: nothing to do
print(json.dumps([type(stand_in).__name__, group, type(real).__name__, sys.modules[p.LOADER] is real]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    assert json.loads(out.stdout) == ["_StandIn", "pydantic", "module", True]


def test_threads_hand_over_once_without_a_key_error():
    """Two threads in the hand-over at once, held together just after each has seen the
    stand-in in ``sys.modules`` (a barrier in the class check): one removes it and imports
    the real loader, the other gets the same module (unguarded, both removed the entry: a
    KeyError, or the real loader imported twice)."""
    code = """
import os, sys, json, threading
os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)
from sim.cli import _pydantic_plugins as p
p.install()
stand_in = sys.modules[p.LOADER]
both = threading.Barrier(2)
StandIn = p._StandIn

class Meta(type):
    def __instancecheck__(cls, obj):
        seen = type(obj) is StandIn
        try:
            both.wait(timeout=2)  # the other thread, if it can get here too
        except threading.BrokenBarrierError:
            pass
        return seen

p._StandIn = Meta("_StandIn", (), {})
got = []

def go():
    try:
        got.append(p._real())
    except Exception as e:
        got.append(repr(e))

threads = [threading.Thread(target=go) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
real = sys.modules[p.LOADER]
print(json.dumps([g is real or repr(g) for g in got] + [type(real).__name__]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    assert json.loads(out.stdout) == [True, True, "module"]  # one module, imported once


def test_the_stand_in_has_a_spec_and_takes_what_the_real_loader_takes():
    code = """
import importlib.util, os, sys, json
os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'
from sim.cli import _pydantic_plugins as p
p.install()
spec = importlib.util.find_spec(p.LOADER)
off = sys.modules[p.LOADER].get_plugins("an argument a later pydantic may pass", key=1)
os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'some_plugin'
on = list(sys.modules[p.LOADER].get_plugins())
print(json.dumps([spec.name, list(off), on, type(sys.modules[p.LOADER]).__name__]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    assert json.loads(out.stdout) == ["pydantic.plugin._loader", [], [], "module"]


def test_the_stand_in_copies_pydantic_s_own_get_plugins():
    """The stand-in answers ``()`` for pydantic's no-argument ``get_plugins`` while the
    switch is one of pydantic's own ``ALL_OFF`` values: if a pydantic release changes
    either, this fails (check the stand-in and the comment on ``ALL_OFF``)."""
    import inspect

    from sim.cli import _pydantic_plugins as p

    real = p._real().get_plugins
    assert list(inspect.signature(real).parameters) == []
    assert f"disabled_plugins in {p.ALL_OFF!r}:" in inspect.getsource(real)

"""The garbage collector during a command's start-up (``sim.cli._startup_gc``).

Each case runs ``sim.cli.main`` in a fresh interpreter (a subprocess: the collector's
state is the process's) and records every collection (``gc.callbacks``) with whether the
start-up's objects were frozen then.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import contextlib, gc, io, json, sys
from sim.cli import main
{before}
gc.collect()  # the young generation empty: a collection below is the command's own
seen = []
gc.callbacks.append(lambda phase, info: phase == "stop" and seen.append(gc.get_freeze_count() > 0))
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    rc = main({argv!r})
gc.callbacks.clear()
print(json.dumps({{"rc": rc, "collections": len(seen), "frozen": sorted(set(seen)),
                   "enabled": gc.isenabled(), "freeze_count": gc.get_freeze_count()}}))
"""


def _probe(argv: list[str], before: str = "") -> dict:
    code = PROBE.format(argv=argv, before=before)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_validate_collects_nothing_and_puts_the_collector_back():
    got = _probe(["validate", "workloads/chat_azure.yaml"])
    assert got == {"rc": 0, "collections": 0, "frozen": [], "enabled": True, "freeze_count": 0}


def test_a_run_collects_only_after_its_start_up_is_frozen(tmp_path):
    """No collection before the simulation is built; the run's own collections (a run
    makes many objects) all happen with the start-up's objects frozen; afterwards the
    collector is on and nothing is left frozen."""
    argv = ["run", "workloads/seed_chunked_prefill.yaml", "--out", str(tmp_path / "r"), "--quiet",
            "--no-report", "--set", "duration_s=100"]  # fmt: skip
    got = _probe(argv)
    assert got["rc"] == 0 and got["collections"] > 0
    assert (got["frozen"], got["enabled"], got["freeze_count"]) == ([True], True, 0)
    assert (tmp_path / "r" / "summary.json").is_file()


def test_a_refused_run_puts_the_collector_back(tmp_path):
    argv = ["run", "workloads/seed_chunked_prefill.yaml", "--out", str(tmp_path / "r"),
            "--set", "seed=-1"]  # fmt: skip
    got = _probe(argv)
    assert (got["rc"], got["collections"], got["enabled"], got["freeze_count"]) == (2, 0, True, 0)


def test_a_caller_s_own_collector_state_is_left_alone(tmp_path):
    """A caller that switched the collector off keeps it off; one that froze objects of
    its own keeps them frozen (and the command collects as usual)."""
    got = _probe(["validate", "workloads/seed_chunked_prefill.yaml"], "gc.disable()")
    assert (got["rc"], got["enabled"], got["freeze_count"]) == (0, False, 0)
    got = _probe(["validate", "workloads/chat_azure.yaml"], "gc.freeze()\nmine = gc.get_freeze_count()")
    assert got["rc"] == 0 and got["enabled"] and got["freeze_count"] > 0 and got["collections"] > 0


def test_validating_a_sweep_checks_its_points_with_the_collector_on():
    """Each point's check makes garbage of its own: with the collector off a large grid
    grew by ~1 MB a point (review of branch h89). The sweep collects once the start-up is
    frozen, and the collector is put back after it."""
    got = _probe(["validate", "workloads/pd_ratio_sweep.yaml"])
    assert got["rc"] == 0 and got["collections"] > 0
    assert (got["frozen"], got["enabled"], got["freeze_count"]) == ([True], True, 0)

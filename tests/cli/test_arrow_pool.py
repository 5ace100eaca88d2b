"""The ``kvsim`` command asks pyarrow for the system allocator (``ARROW_DEFAULT_MEMORY_POOL``)
for the command only, unless the environment names a pool: pyarrow's default (mimalloc)
keeps what writing the tables freed, 55 MB of a 50,000-request run's peak RSS
(docs/performance.md). Each case runs in a fresh interpreter (a pool is chosen once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import contextlib, io, json, os, sys, tempfile
{setup}
from sim.cli import main
out = tempfile.mkdtemp()
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["run", "workloads/seed_chunked_prefill.yaml", "--no-report", "--quiet",
               "--out", out + "/run"])
import pyarrow
print(json.dumps([rc, pyarrow.default_memory_pool().backend_name,
                  os.environ.get("ARROW_DEFAULT_MEMORY_POOL")]))
"""


def _probe(setup: str) -> list:
    code = PROBE.format(setup=setup)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_run_writes_its_tables_through_the_system_allocator_and_puts_the_switch_back():
    assert _probe("os.environ.pop('ARROW_DEFAULT_MEMORY_POOL', None)") == [0, "system", None]


@pytest.mark.parametrize("pool", ["mimalloc", "system"])
def test_the_environments_pool_wins(pool):
    setup = f"os.environ['ARROW_DEFAULT_MEMORY_POOL'] = {pool!r}"
    assert _probe(setup) == [0, pool, pool]

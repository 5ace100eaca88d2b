"""Instructions a scenario's simulation loop executes, per tree: a deterministic speed
figure where CPU seconds are noise (a shared 2-core machine swings a run by 5-30 %).

    python benchmarks/count_instructions.py benchmarks/chat_azure_5000.yaml \\
        --set workload.num_requests=1500 --tree /work/main --tree .

Each tree is run twice under valgrind's callgrind (``Ir``, instructions executed): once
building the scenario and stopping, once building it and running the loop
(``Simulation.run`` without collecting the tables, as ``profile_engine.py``); the loop's
instructions are the difference, reported with the ratio to the first tree. Runs are one
at a time, each ~50x slower than without valgrind (chat at 1,500 requests: ~1 minute).
Byte-code comes from a cache of each tree's own (``PYTHONPYCACHEPREFIX`` a fresh folder,
filled by one run without valgrind first, then read only), so no tree starts cheaper
because its ``__pycache__`` happened to be warm or cold; string hashing is fixed
(``PYTHONHASHSEED=0``). A tree's loop count still varies by ~0.7 % from run to run (a
reviewer's two runs of the same tree: 458.3 M and 455.2 M at 200 chat requests; the loop is
the difference of two larger counts), so read ratios beyond ~1 %. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _pyc import tree_env

_CHILD = """
import sys, yaml
sys.path.insert(0, {bench!r})
from sim.run.runner import build
from profile_engine import loop
sets = {{k: yaml.safe_load(v) for k, v in (a.split("=", 1) for a in {sets!r})}}
sim = build({scenario!r}, **sets)
if {run_loop!r}:
    loop(sim)
"""


def _code(scenario: str, sets: list[str], run_loop: bool) -> str:
    return _CHILD.format(bench=str(Path(__file__).resolve().parent), sets=sets,
                         scenario=scenario, run_loop=run_loop)  # fmt: skip


def warm(tree: Path, scenario: str, sets: list[str], pyc: Path) -> None:
    """Fill ``pyc`` with the byte-code of everything a run imports (one run, no valgrind;
    the loop too, since it imports some modules on first use)."""
    env = tree_env(tree, pyc)
    subprocess.run([sys.executable, "-c", _code(scenario, sets, True)], cwd=tree, env=env,
                   check=True, capture_output=True)  # fmt: skip


def instructions(tree: Path, scenario: str, sets: list[str], run_loop: bool, pyc: Path) -> int:
    """Instructions of one process (valgrind's "Collected" count)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = tree_env(tree, pyc, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")  # read only
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             "-c", _code(scenario, sets, run_loop)],
            cwd=tree, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree}: the run failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", help="path relative to each tree")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tree", action="append", required=True, help="a checkout (repeat)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    print(f"scenario {args.scenario} {' '.join(args.set)}; Python {sys.version.split()[0]}\n")
    print("| tree | build only | build + loop | loop | loop / first tree |")
    print("|---|---:|---:|---:|---:|")
    first = None
    for tree in map(Path, args.tree):
        with tempfile.TemporaryDirectory() as tmp:
            pyc = Path(tmp)
            warm(tree, args.scenario, args.set, pyc)
            built = instructions(tree, args.scenario, args.set, False, pyc)
            whole = instructions(tree, args.scenario, args.set, True, pyc)
        loop = whole - built
        first = loop if first is None else first
        print(f"| {tree} | {built:,} | {whole:,} | {loop:,} | {loop / first:.3f} |", flush=True)


if __name__ == "__main__":
    main()

"""Start-up time of the ``kvsim`` command line: ``--version``, ``validate`` and a ``run``.

Runs each command as a fresh process (``python -m sim.cli ...``), interleaving the
checkouts compared (``--tree DIR``, several allowed: before / after), ``--repeat`` times,
and prints the median and the minimum wall time per command and tree, the median CPU time (user + system,
less sensitive to other jobs on the machine), with the machine's
load average before and after, the modules each command imported (``-X importtime``
count) and, for every tree after the first, the median of its CPU time over the first
tree's in the same round (paired ratios: a round's runs see the same load). Speed is
measured here, never asserted in a test. The ``run --no-report`` case (chat_azure_5000,
into a folder of its own per tree, replaced each time) is the whole process of a run that
only writes its folder: start-up, the simulation and the Parquet files (no pandas since
2026-12-05).

Byte-code: each tree gets its own ``__pycache__`` folder under a temporary directory
(``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` is dropped) and one untimed run of
each command fills it first, so the times are those of an installed kvsim (pip writes
the ``.pyc`` files at install). With ``PYTHONDONTWRITEBYTECODE=1`` in the environment and
no cache, every run would compile ~100 of kvsim's modules from source (about 0.6 CPU s
of ``validate``, more than a third of it), which no user pays twice.

For the run, the table also gives the median wall time outside its loop: the process's
wall time less the summary's ``wall_time_s`` (the simulation loop alone). ``--validate-all``
adds a ``validate`` of every shipped scenario (``workloads/*.yaml``,
``workloads/validation/*.yaml``).

    python benchmarks/bench_startup.py --tree /path/to/main --tree . --repeat 15
    python benchmarks/bench_startup.py --tree /path/to/main --tree . --repeat 5 --validate-all
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _pyc import tree_env

COMMANDS = {
    "--version": ["--version"],
    "validate (one node)": ["validate", "workloads/seed_chunked_prefill.yaml"],
    "validate (cluster)": ["validate", "workloads/cluster_coding_agents.yaml"],
    # a scenario whose trace validate reads (a CSV: pandas' parser until 2026-12-04)
    "validate (CSV trace)": ["validate", "workloads/chat_azure.yaml"],
    "validate (mix with a CSV trace)": ["validate", "workloads/mixed_chat_agents.yaml"],
    # the whole process of a run that writes its folder alone ({out}: one folder per tree)
    "run --no-report": ["run", "benchmarks/chat_azure_5000.yaml", "--no-report", "--quiet",
                        "--force", "--out", "{out}"],
}


_CACHE = Path(tempfile.mkdtemp(prefix="kvsim-bench-pyc-"))
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


def _env(tree: Path) -> dict[str, str]:
    return tree_env(tree, _CACHE)  # one byte-code folder per tree (_pyc.py)


def _args(tree: Path, args: list[str]) -> list[str]:
    """``args`` with ``{out}`` set to the tree's own run folder (in the temporary folder)."""
    out = _CACHE / ("run-" + str(tree.resolve()).strip("/").replace("/", "_"))
    return [a.format(out=out) for a in args]


def once(tree: Path, args: list[str]) -> tuple[float, float, float | None]:
    """(wall s, CPU s: user + system of the child, wall s outside the simulation loop: a
    run's wall less its summary's ``wall_time_s``, None for another command) of one run."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    argv = _args(tree, args)
    subprocess.run([sys.executable, "-m", "sim.cli", *argv], cwd=tree, env=_env(tree),
                   check=True, capture_output=True)  # fmt: skip
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    outside = None
    if argv[0] == "run":
        summary = json.loads((Path(argv[argv.index("--out") + 1]) / "summary.json").read_text())
        outside = wall - summary["wall_time_s"]
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), outside


def modules(tree: Path, args: list[str]) -> int:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "sim.cli", *_args(tree, args)],
                         cwd=tree, env=_env(tree), capture_output=True, text=True)  # fmt: skip
    return sum(line.startswith("import time:") for line in out.stderr.splitlines()) - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--validate-all", action="store_true",
                    help="also validate every shipped scenario (workloads/, workloads/validation/)")  # fmt: skip
    a = ap.parse_args()
    if a.validate_all:
        root = a.tree[0]
        for path in sorted([*root.glob("workloads/*.yaml"), *root.glob("workloads/validation/*.yaml")]):
            rel = str(path.relative_to(root))
            COMMANDS[f"validate {rel}"] = ["validate", rel]
    times: dict[tuple[str, Path], list[tuple[float, float, float | None]]] = {}
    for tree in a.tree:  # untimed: fills each tree's byte-code cache
        for args in COMMANDS.values():
            once(tree, args)
    load0 = os.getloadavg()
    for _ in range(a.repeat):
        for name, args in COMMANDS.items():
            for tree in a.tree:  # interleaved: the trees see the same load
                times.setdefault((name, tree), []).append(once(tree, args))
    load1 = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} before, {load1[0]:.1f} after; "
          f"{a.repeat} runs each, interleaved")  # fmt: skip
    print("| command | tree | median wall s | min wall s | median CPU s | CPU / first tree "
          "(median of pairs) | median wall outside the loop s | modules imported |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, tree), ts in times.items():
        walls, cpus = [t[0] for t in ts], [t[1] for t in ts]
        outside = [t[2] for t in ts if t[2] is not None]
        first = [t[1] for t in times[(name, a.tree[0])]]
        ratio = statistics.median(c / f for c, f in zip(cpus, first, strict=True))
        n = modules(tree, COMMANDS[name])
        loop = f"{statistics.median(outside):.3f}" if outside else ""
        print(f"| `kvsim {' '.join(COMMANDS[name]).replace(' --force --out {out}', '')}` | {tree} | {statistics.median(walls):.3f} "
              f"| {min(walls):.3f} | {statistics.median(cpus):.3f} | {ratio:.3f} | {loop} | {n} |")  # fmt: skip


if __name__ == "__main__":
    main()

"""Instructions a whole ``kvsim`` command executes, per tree: the deterministic figure for
start-up work (``validate``, a short ``run``), where CPU seconds on a shared machine are
noise.

    python benchmarks/count_command_instructions.py --tree /work/main --tree . -- \\
        validate workloads/chat_azure.yaml
    python benchmarks/count_command_instructions.py --tree /work/main --tree . -- \\
        run benchmarks/chat_azure_5000.yaml --no-report --quiet --force --out {out} \\
        --set workload.num_requests=300

Each tree runs the command once without valgrind (filling its own byte-code folder, as
``count_instructions.py``), then once under callgrind (``Ir``: every instruction of the
process, the interpreter's start included) with byte-code read only and
``PYTHONHASHSEED=0``; ``{out}`` is a fresh folder per run. Reported with the ratio to the
first tree. A command's count varies by well under 1 % from run to run.
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


def _argv(args: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "sim.cli", *(a.replace("{out}", str(out)) for a in args)]


def count(tree: Path, args: list[str]) -> int:
    """The command's instructions in ``tree`` (valgrind's "Collected" count)."""
    with tempfile.TemporaryDirectory() as tmp:
        pyc, cg = Path(tmp) / "pyc", Path(tmp) / "callgrind.out"
        subprocess.run(_argv(args, Path(tmp) / "warm"), cwd=tree, env=tree_env(tree, pyc),
                       check=True, capture_output=True)  # fmt: skip
        env = tree_env(tree, pyc, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
                               *_argv(args, Path(tmp) / "run")],
                              cwd=tree, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree}: the command failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="a checkout (repeat)")
    ap.add_argument("command", nargs="+", help="the kvsim arguments (after --)")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    print(f"kvsim {' '.join(a.command)}; Python {sys.version.split()[0]}\n")
    print("| tree | instructions | / first tree |")
    print("|---|---:|---:|")
    first = None
    for tree in map(Path, a.tree):
        n = count(tree, a.command)
        first = n if first is None else first
        print(f"| {tree} | {n:,} | {n / first:.3f} |", flush=True)


if __name__ == "__main__":
    main()

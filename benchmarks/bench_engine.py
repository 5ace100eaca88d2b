"""Engine speed benchmarks (issue 5, item 6; "Engine core v2"): simulated requests per
loop second, whole-process time and peak RSS of ``kvsim run``.

    python benchmarks/bench_engine.py                 # (a) 5k and 50k chat, (b) agents
    python benchmarks/bench_engine.py --only chat     # just (a)
    python benchmarks/bench_engine.py --agents 100    # (b) with fewer trajectories
    python benchmarks/bench_engine.py --only capacity # (d) the capacity search, 2 workers

The 5,000-request rows are the median of ``--repeat`` runs (5 by default) by whole-process
time; every other row is one run.

    python benchmarks/bench_engine.py --compare /work/main   # this tree against another

``--compare TREE`` runs each case alternately from this tree and from ``TREE`` (another
checkout, put first on ``PYTHONPATH``), ``--repeat`` pairs, and prints the median of each
figure and of the paired ratios (this tree / TREE), with the load average before and
after: on a shared machine only interleaved pairs compare, and CPU seconds (user + system
of the ``kvsim run`` process) move less with the load than wall seconds.

(d) times ``kvsim capacity workloads/coding_agents_capacity.yaml --slo ttft_p99_s=2
--json --workers 2`` as a whole (its workers' CPU included: they are waited-for children);
with ``--compare`` it also says whether the two trees' JSON answers are byte-identical.

``wall_time_s`` (the simulation loop alone) comes from the run's summary; the whole
process (imports, loading, simulation, writing the run folder) is timed around a
``kvsim run --quiet`` subprocess, whose CPU seconds and peak RSS ``os.wait4`` reads. Prints a
markdown table to paste into ``results_engine.md`` with the machine and date.

Byte-code is cached per tree (``_pyc.py``), filled before the timed runs by one untimed
run of every case with a tiny workload (and one capacity search for (d)), so a whole
process costs what it costs an installed kvsim; before 2026-12-03 every child compiled
~130 modules from source (``PYTHONDONTWRITEBYTECODE=1`` on these machines), ~0.5 s of
each whole-process figure. Peak RSS is each ``kvsim run``'s own (``os.wait4``: the
process and the children it waited for); before 2026-12-03 it was the peak of every
child the benchmark had run so far.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _pyc import tree_env

HERE = Path(__file__).resolve().parent
#: each tree's byte-code (``_pyc.py``), for every child process of this benchmark
_CACHE = Path(tempfile.mkdtemp(prefix="kvsim-bench-pyc-"))
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def child(cmd: list[str], cwd: Path, env: dict[str, str], capture: bool = False) -> dict:
    """Run one child process to its end: its wall seconds, CPU seconds (user + system) and
    peak RSS in MB, its own and its waited-for children's (``os.wait4``: not the peak of
    every child this benchmark ran), and its stdout when ``capture``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE if capture else None)
    out = proc.stdout.read() if proc.stdout is not None else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return {"wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "stdout": out}  # fmt: skip


def run_once(scenario: str, sets: list[str], tree: Path | None = None, extra: tuple[str, ...] = ()) -> dict:
    """One ``kvsim run`` in a fresh process (from ``tree`` when given): its summary, wall
    time, CPU seconds and peak RSS."""
    env = tree_env(tree or HERE.parent, _CACHE, on_path=tree is not None)
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "sim.cli", "run", str(HERE / scenario), "--out", out, "--quiet", *extra]
        for s in sets:
            cmd += ["--set", s]
        done = child(cmd, tree or HERE.parent, env)
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"summary": summary, "process_s": done["wall_s"], "cpu_s": done["cpu_s"],
            "rss_mb": done["rss_mb"]}  # fmt: skip


#: a case: (label, scenario, --set values, extra ``kvsim run`` arguments)
Case = tuple[str, str, list[str], tuple[str, ...]]
#: what a warm-up run of a case sets last (later ``--set`` values win): a tiny workload
_TINY = {"chat_azure_5000.yaml": "workload.num_requests=50", "agents_500.yaml": "workload.num_trajectories=2"}


def warm(trees: list[Path | None], cases: list[Case], capacity_search: bool = False) -> None:
    """Untimed: fill each tree's byte-code with what the timed cases import, by running
    each case with a tiny workload (``_TINY``); the capacity search once as it is."""
    for tree in trees:
        for _, scenario, sets, extra in cases:
            run_once(scenario, [*sets, _TINY[scenario]], tree, extra)
        if capacity_search:
            capacity_once(tree)


def compare(tree: Path, repeat: int, cases: list[Case]) -> None:
    """Interleaved pairs: this tree, then ``tree``, ``repeat`` times per case."""
    here = HERE.parent
    print(f"Machine: {machine()}  \nDate: {datetime.datetime.now(datetime.UTC).isoformat(timespec='minutes')}"
          f"  \nLoad average before: {os.getloadavg()}\n")  # fmt: skip
    print("| case | tree | loop s | requests / loop s | process s | CPU s | peak RSS MB | "
          "ratio loop (this / other) | ratio CPU |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, scenario, sets, extra in cases:
        mine, other = [], []
        for _ in range(repeat):
            mine.append(run_once(scenario, sets, here, extra))
            other.append(run_once(scenario, sets, tree, extra))
        loop = [a["summary"]["wall_time_s"] / b["summary"]["wall_time_s"] for a, b in zip(mine, other, strict=True)]
        cpu = [a["cpu_s"] / b["cpu_s"] for a, b in zip(mine, other, strict=True)]
        for name, runs in (("this", mine), (str(tree), other)):
            n = runs[0]["summary"]["requests_completed"]
            lo = statistics.median(r["summary"]["wall_time_s"] for r in runs)
            med = statistics.median
            print(f"| {label} | {name} | {lo:.2f} | {n / lo:,.0f} | {med(r['process_s'] for r in runs):.2f} | "
                  f"{med(r['cpu_s'] for r in runs):.2f} | {max(r['rss_mb'] for r in runs):.0f} | "
                  f"{statistics.median(loop):.3f} | {statistics.median(cpu):.3f} |", flush=True)  # fmt: skip
    print(f"\nLoad average after: {os.getloadavg()}")


CAPACITY = ["capacity", "workloads/coding_agents_capacity.yaml", "--slo", "ttft_p99_s=2",
            "--json", "--workers", "2"]  # fmt: skip


def capacity_once(tree: Path | None = None) -> dict:
    """Target (d): one ``kvsim capacity`` search in a fresh process (from ``tree`` when
    given): its JSON answer, wall seconds and CPU seconds of it and its workers."""
    env = tree_env(tree or HERE.parent, _CACHE, on_path=tree is not None)
    done = child([sys.executable, "-m", "sim.cli", *CAPACITY], tree or HERE.parent, env, capture=True)
    answer = json.loads(done["stdout"])
    return {"json": done["stdout"], "wall_s": done["wall_s"], "probes": len(answer["points"]),
            "capacity": answer["capacity"], "cpu_s": done["cpu_s"]}  # fmt: skip


def capacity(tree: Path | None, repeat: int) -> None:
    """(d) alone, or interleaved with ``tree``: medians of wall and CPU seconds."""
    print(f"Machine: {machine()}  \nDate: {datetime.datetime.now(datetime.UTC).isoformat(timespec='minutes')}"
          f"  \nLoad average before: {os.getloadavg()}\n")  # fmt: skip
    print("`kvsim " + " ".join(CAPACITY) + "`\n")
    print("| tree | runs | wall s | CPU s | probes | capacity | JSON as this tree's |")
    print("|---|---:|---:|---:|---:|---|---|")
    trees = [("this", HERE.parent)] + ([] if tree is None else [(str(tree), tree)])
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for _ in range(repeat):
        for name, path in trees:
            runs[name].append(capacity_once(path))
    mine = runs["this"][0]["json"]
    med = statistics.median
    for name, _ in trees:
        rs = runs[name]
        cap = rs[0]["capacity"]
        same = all(r["json"] == mine for r in rs)
        print(f"| {name} | {len(rs)} | {med(r['wall_s'] for r in rs):.1f} | "
              f"{med(r['cpu_s'] for r in rs):.1f} | {rs[0]['probes']} | "
              f"{cap['value']:.2f} ({cap['ci95_low']:.2f} - {cap['ci95_high']:.2f}), "
              f"per replication {cap['per_replication']} | "
              f"{'identical' if same else 'differs'} |", flush=True)  # fmt: skip
    if tree is not None:
        pairs = list(zip(runs["this"], runs[str(tree)], strict=True))
        print(f"\nMedian paired ratios (this / other): wall "
              f"{med(a['wall_s'] / b['wall_s'] for a, b in pairs):.3f}, CPU "
              f"{med(a['cpu_s'] / b['cpu_s'] for a, b in pairs):.3f}")  # fmt: skip
    print(f"\nLoad average after: {os.getloadavg()}")


def row(label: str, r: dict) -> str:
    s = r["summary"]
    n = s["requests_completed"]
    loop = s["wall_time_s"]
    return (
        f"| {label} | {n:,} | {s['trajectories_completed']:,} | {s['sim_time_s']:,.0f} | "
        f"{s['engine_decisions']:,} | {s['steps']:,} | {loop:.2f} | {n / loop:,.0f} | "
        f"{r['process_s']:.2f} | {r['rss_mb']:.0f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["chat", "agents", "capacity"], default=None)
    ap.add_argument("--agents", type=int, default=500, help="trajectories for (b)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of (a); the median is kept")
    ap.add_argument("--compare", type=Path, default=None, help="another tree: interleaved pairs")
    args = ap.parse_args()
    other = None if args.compare is None else args.compare.resolve()
    trees: list[Path | None] = [None] + ([] if other is None else [other])
    if args.only == "capacity":
        warm(trees, [], capacity_search=True)
        capacity(other, args.repeat)
        return
    if other is not None:
        cases: list[Case] = []
        if args.only in (None, "chat"):
            cases.append(("(a) chat 5,000, --no-report", "chat_azure_5000.yaml", [], ("--no-report",)))
        if args.only in (None, "agents"):
            cases.append((f"(b) agents {args.agents}", "agents_500.yaml",
                          [f"workload.num_trajectories={args.agents}"], ("--no-report",)))  # fmt: skip
        warm(trees, cases)
        compare(other, args.repeat, cases)
        return
    chat: list[Case] = []  # the median of --repeat runs each
    once: list[Case] = []
    if args.only in (None, "chat"):
        chat += [("(a) chat 5,000, paged", "chat_azure_5000.yaml", [], ()),
                 ("(a) chat 5,000, paged, no calibration", "chat_azure_5000.yaml",
                  ["cost.calibration=null"], ())]  # fmt: skip
        once.append(("(a) chat 50,000, paged", "chat_azure_5000.yaml", ["workload.num_requests=50000"], ()))
    if args.only in (None, "agents"):
        n = args.agents
        for kind in ("radix", "paged_hash", "paged"):
            once.append((f"(b) agents {n}, {kind}", "agents_500.yaml",
                         [f"workload.num_trajectories={n}", f"allocator.kind={kind}"], ()))  # fmt: skip
        for policy in ("hold", "offload_host"):
            sets = [f"workload.num_trajectories={n}", "allocator.kind=paged"]
            sets += ["hardware.node=dgx-h100", f"pause_policy.kind={policy}"]
            once.append((f"(b) agents {n}, paged + dgx-h100, {policy}", "agents_500.yaml", sets, ()))
    warm(trees, chat + once)
    print(f"Machine: {machine()}  \nDate: {datetime.date.today().isoformat()}\n")
    print(
        "| run | requests | trajectories | simulated s | decisions | steps | loop s | "
        "requests / loop s | process s | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, scenario, sets, extra in chat:
        runs = sorted((run_once(scenario, sets, None, extra) for _ in range(args.repeat)),
                      key=lambda r: r["process_s"])  # fmt: skip
        print(row(label, runs[len(runs) // 2]), flush=True)
    for label, scenario, sets, extra in once:
        print(row(label, run_once(scenario, sets, None, extra)), flush=True)

if __name__ == "__main__":
    main()

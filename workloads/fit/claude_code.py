"""The Claude Code sessions: the shipped sample, the interactive fit and its evidence.

    .venv/bin/python workloads/fit/claude_code.py [--data ../shared/data] [--plots]

Reads ``claude_code_traces/sessions.jsonl.gz`` (487 kv-cache-tester sessions, Apache-2.0)
from the data folder and writes:
- ``workloads/data/claude_code/sessions.jsonl.gz``: 32 sessions (the ``claude_code``
  workload's default and the trace-replay tests' data): the 4 whose prompts stay within
  140,000 tokens and that spawn subagents, and 28 more of those within 140,000 tokens at
  evenly spaced ranks of their call counts; lines unchanged; with the licence beside it;
- ``sim/workload/fitted/interactive_coding_agent.yaml`` through ``kvsim workload fit``
  and ``sim/workload/fitted/LICENSES/interactive_coding_agent.txt``, and the fits'
  digests ``sim/workload/fitted/SHA256SUMS``;
- ``workloads/fit/fixtures/interactive_coding_agent.json``: the sessions' quantiles of
  each observable (``sim.workload.interactive.session_observables`` over the sessions
  replayed by the ``claude_code`` kind, listed as ``kvsim workload sample`` lists them)
  with their bootstrap standard deviations and 95 % intervals over sessions (``fixtures.py``'s method);
- with ``--plots``: ``docs/img/workloads/interactive_coding_agent.png``.
Deterministic: the fit has no randomness and the bootstrap has a fixed seed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import BOOTSTRAP, SEED, _bootstrap_both  # noqa: E402

from sim.workload.observe import pooled, summary  # noqa: E402

KIND = "interactive_coding_agent"
REL = "claude_code_traces/sessions.jsonl.gz"
NAME = (
    "callanjfox/kv-cache-tester traces/*.json at 94f6046 (487 Claude Code sessions, 33,445 calls)"
)
LICENCE = "Apache-2.0 (kv-cache-tester)"
SAMPLE = ROOT / "workloads" / "data" / "claude_code"
FITTED = ROOT / "sim" / "workload" / "fitted"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / f"{KIND}.json"
#: the sample keeps sessions whose every prompt fits this (DeepSeek-V3's window less 10 %)
SAMPLE_MAX_PROMPT = 140_000
SAMPLE_SESSIONS = 32
#: generated sessions in the plots
PLOT_SESSIONS = 1500


def _calls(reqs: list[dict]):
    for r in reqs:
        if r.get("type") == "subagent":
            yield from _calls(r.get("requests", []))
        else:
            yield r


def write_sample(data: Path) -> None:
    """The shipped sessions (see the module docstring), lines copied unchanged."""
    lines = gzip.open(data / REL, "rt").read().splitlines()
    fits = []
    for line in lines:
        s = json.loads(line)
        if max(c["in"] for c in _calls(s["requests"])) <= SAMPLE_MAX_PROMPT:
            fits.append((s, line))
    sub = [x for x in fits if any(r.get("type") == "subagent" for r in x[0]["requests"])]
    rest = sorted(
        (x for x in fits if x not in sub),
        key=lambda x: (sum(1 for _ in _calls(x[0]["requests"])), x[0]["id"]),
    )
    k = SAMPLE_SESSIONS - len(sub)
    step = (len(rest) - 1) / (k - 1)
    picked = {x[0]["id"] for x in sub} | {rest[round(i * step)][0]["id"] for i in range(k)}
    chosen = [line for s, line in fits if s["id"] in picked]  # file order
    SAMPLE.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(SAMPLE / "sessions.jsonl.gz", "wb", mtime=0) as fh:
        fh.write(("\n".join(chosen) + "\n").encode())
    shutil.copyfile(data / "claude_code_traces" / "LICENSE", SAMPLE / "LICENSE")


def fit(data: Path) -> None:
    from sim.cli import main as kvsim

    out = FITTED / f"{KIND}.yaml"
    argv = ["workload", "fit", str(data / REL), "--kind", KIND, "--out", str(out)]
    code = kvsim([*argv, "--licence", LICENCE, "--data", f"{NAME} [{REL}]"])
    if code:
        raise SystemExit(f"kvsim workload fit failed for {KIND} (exit {code})")
    (FITTED / "LICENSES").mkdir(exist_ok=True)
    shutil.copyfile(data / "claude_code_traces" / "LICENSE", FITTED / "LICENSES" / f"{KIND}.txt")
    from sim.workload.params import write_manifest

    write_manifest(FITTED)  # the fits' committed digests (libyaml reads them while unchanged)


def source_trajectories(data: Path) -> list[dict]:
    """The sessions in the ``kvsim workload sample --json`` format: the ``claude_code``
    replay of every session (recorded prompts, replies and think times), sampled."""
    from pydantic import TypeAdapter

    from sim.workload.config import Workload
    from sim.workload.sample import sample_workload

    path = str(data / REL)
    n = sum(1 for line in gzip.open(path, "rt") if line.strip())
    cfg = {"kind": "claude_code", "path": path, "num_trajectories": n, "arrival": {"kind": "fixed"}}
    return sample_workload("claude_code", TypeAdapter(Workload).validate_python(cfg), 0, ROOT)[
        "trajectories"
    ]


def write_fixture(data: Path) -> None:
    from sim.workload.interactive import session_observables

    trajs = source_trajectories(data)
    obs = session_observables(trajs)
    rng = np.random.default_rng(SEED)
    out = {
        "kind": KIND,
        "source": NAME,
        "trajectories": len(trajs),
        "bootstrap": {"resamples": BOOTSTRAP, "unit": "sessions", "seed": SEED},
        "observables": {},
    }
    for name, per in sorted(obs.items()):
        vals = pooled(per)
        sd, ci95 = _bootstrap_both(per, rng)
        out["observables"][name] = {"n": int(vals.size), **summary(vals), "sd": sd, "ci95": ci95}
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def plot(data: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pydantic import TypeAdapter

    from sim.workload.config import Workload
    from sim.workload.interactive import PLOT_PANELS, session_observables
    from sim.workload.sample import sample_workload

    real = session_observables(source_trajectories(data))
    cfg = {"kind": KIND, "num_trajectories": PLOT_SESSIONS, "arrival": {"kind": "fixed"}}
    gen = session_observables(
        sample_workload(KIND, TypeAdapter(Workload).validate_python(cfg), 1, ROOT)["trajectories"]
    )
    p = np.concatenate([np.arange(1, 100), [99.5, 99.9, 100]])
    cols = 3
    rows = -(-len(PLOT_PANELS) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.1 * rows), squeeze=False)
    for ax, name in zip(axes.flat, PLOT_PANELS, strict=False):
        r, g = pooled(real[name]), pooled(gen[name])
        ax.plot(p, np.percentile(r, p), label=f"real (n={len(r):,})", lw=2)
        ax.plot(p, np.percentile(g, p), "--", label=f"generated (n={len(g):,})", lw=1.5)
        lo, hi = min(r.min(), g.min()), max(r.max(), g.max())
        if lo > 0 and hi / lo > 50:
            ax.set_yscale("log")
        elif lo <= 0 and hi > 50:
            ax.set_yscale("symlog", linthresh=1.0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("percentile")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(PLOT_PANELS) :]:
        ax.axis("off")
    fig.suptitle(f"{KIND}: quantiles, real vs generated (defaults, seed 1)")
    fig.tight_layout()
    out = ROOT / "docs" / "img" / "workloads" / f"{KIND}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--plots", action="store_true", help="also draw the quantile plots")
    args = ap.parse_args()
    write_sample(args.data)
    fit(args.data)
    write_fixture(args.data)
    if args.plots:
        print(plot(args.data))


if __name__ == "__main__":
    main()

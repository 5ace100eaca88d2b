"""Generated-vs-real quantile plots of each fitted generator, for docs/workloads.md.

    .venv/bin/python workloads/fit/plots.py [--data ../shared/data]

For each fitted kind, the source (``sources.py``) and a generated sample of the default
config (``kvsim workload sample``'s code, seed 1) are measured by
``sim.workload.observe``; each panel draws both quantile functions of one observable from
p1 to the maximum (log scale where the values span decades). Writes
``docs/img/workloads/<kind>.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402
from sources import TRAJECTORIES  # noqa: E402

from sim.workload.config import Workload  # noqa: E402
from sim.workload.multi_agent import round_role  # noqa: E402
from sim.workload.observe import observables, pooled, team_observables  # noqa: E402
from sim.workload.params import load_params  # noqa: E402
from sim.workload.sample import sample_workload  # noqa: E402

OUT = ROOT / "docs" / "img" / "workloads"
PANELS = {
    "coding_agent": (
        "calls", "first_prompt", "completion", "growth", "tool_s", "tool_s:install",
        "tool_s:test", "growth:view", "completion:edit",
    ),
    "function_calling": (
        "calls", "user_turns", "calls_per_user_turn", "first_prompt", "completion",
        "delta:within", "delta:user",
    ),
    "human_in_loop": (
        "calls", "user_turns", "calls_per_user_turn", "completion", "delta:within",
        "delta:user",
    ),
    "multi_agent_team": (
        "prompt:programmer", "prompt:reviewer", "prompt:reviser", "completion:programmer",
        "completion:reviewer", "completion:reviser",
    ),
}  # fmt: skip
GENERATED = {"coding_agent": 1000, "function_calling": 4000, "human_in_loop": 1000}
P = np.concatenate([np.arange(1, 100), [99.5, 99.9, 100]])


def _observed(kind: str, trajs: list[dict]) -> dict:
    if kind == "multi_agent_team":
        return team_observables(trajs, load_params(kind).branches, round_role)
    return observables(trajs)


def plot(kind: str, data: Path) -> Path:
    real = _observed(kind, TRAJECTORIES[kind](data))
    n = GENERATED.get(kind, 20)
    cfg = {"kind": kind, "num_trajectories": n, "arrival": {"kind": "fixed"}}
    gen_trajs = sample_workload(kind, TypeAdapter(Workload).validate_python(cfg), 1, ROOT)
    gen = _observed(kind, gen_trajs["trajectories"])
    names = PANELS[kind]
    cols = 3
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.1 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        r, g = pooled(real[name]), pooled(gen[name])
        ax.plot(P, np.percentile(r, P), label=f"real (n={len(r):,})", lw=2)
        ax.plot(P, np.percentile(g, P), "--", label=f"generated (n={len(g):,})", lw=1.5)
        lo, hi = min(r.min(), g.min()), max(r.max(), g.max())
        if lo > 0 and hi / lo > 50:
            ax.set_yscale("log")
        elif lo <= 0 and hi > 50:  # a few recorded tool times are below 0 (clock skew)
            ax.set_yscale("symlog", linthresh=0.1)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("percentile")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(f"{kind}: quantiles, real vs generated (defaults, seed 1)")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{kind}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    for kind in PANELS:
        print(plot(kind, args.data))


if __name__ == "__main__":
    main()

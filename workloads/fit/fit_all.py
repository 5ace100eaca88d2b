"""Re-fit every shipped workload from ``../shared/data`` and write its fit evidence.

    .venv/bin/python workloads/fit/fit_all.py [--data ../shared/data]

Writes, from the data folder (nothing else is read):
- ``sim/workload/fitted/<kind>.yaml`` for each fitted kind, through ``kvsim workload fit``
  (the same command a user runs on their own logs);
- ``sim/workload/fitted/swe_agent_deepseek_sample.jsonl``: eight SWE-agent trajectories
  (the ``agent_trace`` default), and ``sim/workload/fitted/LICENSES/`` (the sources'
  licences), and ``sim/workload/fitted/SHA256SUMS`` (the fits' digests);
- ``workloads/fit/fixtures/<kind>.json``: the source's quantiles (p10/p50/p90/p99, n) of
  each observable with their bootstrap standard deviations over source trajectories
  (``fixtures.py``), which the tests compare generated samples against.
Deterministic: the fits have no randomness and the bootstrap has a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import write_fixture  # noqa: E402
from sources import LICENCE_FILES, SOURCES  # noqa: E402

from sim.cli import main as kvsim  # noqa: E402
from sim.workload.params import write_manifest  # noqa: E402

FITTED = ROOT / "sim" / "workload" / "fitted"
#: trajectories of the shipped agent_trace sample: spread over the turn-count range
SAMPLE_TRAJECTORIES = 8
SAMPLE_FIELDS = (
    "instance_id", "turn", "prompt_tokens", "completion_tokens", "tool_s", "tool",
    "tool_cat", "tool_returncodes", "cache_hit_tokens",
)  # fmt: skip


def fit_kind(kind: str, data: Path) -> None:
    rel, name, licence = SOURCES[kind]
    out = FITTED / f"{kind}.yaml"
    argv = ["workload", "fit", str(data / rel), "--kind", kind, "--out", str(out)]
    code = kvsim([*argv, "--licence", licence, "--data", f"{name} [{rel}]"])
    if code:
        raise SystemExit(f"kvsim workload fit failed for {kind} (exit {code})")


def write_sample_trace(data: Path) -> None:
    """Eight SWE-agent trajectories at evenly spaced ranks of their call counts."""
    rows: dict[str, list[dict]] = {}
    with (data / SOURCES["coding_agent"][0]).open() as fh:
        for line in fh:
            r = json.loads(line)
            rows.setdefault(r["instance_id"], []).append({k: r.get(k) for k in SAMPLE_FIELDS})
    ranked = sorted(rows, key=lambda k: (len(rows[k]), k))
    step = (len(ranked) - 1) / (SAMPLE_TRAJECTORIES - 1)
    picked = [ranked[round(i * step)] for i in range(SAMPLE_TRAJECTORIES)]
    with (FITTED / "swe_agent_deepseek_sample.jsonl").open("w") as fh:
        for key in picked:
            for r in sorted(rows[key], key=lambda r: r["turn"]):
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")


def copy_licences(data: Path) -> None:
    target = FITTED / "LICENSES"
    target.mkdir(exist_ok=True)
    for kind, rel in LICENCE_FILES.items():
        shutil.copyfile(data / rel, target / f"{kind}.txt")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    FITTED.mkdir(parents=True, exist_ok=True)
    for kind in SOURCES:
        fit_kind(kind, args.data)
        write_fixture(kind, args.data)
    write_sample_trace(args.data)
    copy_licences(args.data)
    write_manifest(FITTED)  # the fits' committed digests (libyaml reads them while unchanged)


if __name__ == "__main__":
    main()

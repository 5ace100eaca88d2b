"""Second check of ``coding_agent``: the real SWE-agent prompts through kvsim's radix cache
against DeepSeek's own prefix-cache accounting (``cache_hit_tokens``).

    .venv/bin/python workloads/fit/cache_check.py [--data ../shared/data]

Each recorded call's prompt is rebuilt as spans (the 320-token shared system prompt, the
task, then each earlier reply and observation, all private to the trajectory), the calls
of all 99 trajectories are replayed in the order DeepSeek received them (``api_created``),
and each call's hit is the radix tree's longest cached prefix in whole 64-token blocks
(DeepSeek's cache unit). After a call, its prompt and reply are cached (as DeepSeek does:
recorded hits reach into the previous reply), either at once (kvsim's radix allocator)
or ``--delay`` seconds later (DeepSeek builds its disk cache in the background). The cache
is unbounded (no eviction). Writes ``fixtures/cache_check.json``: the agreement per call
and in total, for each delay.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.prefix.pool import CountingPool  # noqa: E402
from sim.prefix.radix import RadixTree  # noqa: E402
from sim.prefix.spans import concat, n_tokens, segments, slice_tokens  # noqa: E402

BLOCK = 64  # DeepSeek caches in 64-token units
SHARED = 320  # the shared system prompt as DeepSeek reports it on first calls
DELAYS_S = (0.0, 5.0, 10.0, 20.0)


def load(data: Path) -> list[dict]:
    rows = [json.loads(x) for x in (data / "swe_agent_deepseek/turns.jsonl").open()]
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["instance_id"], []).append(r)
    calls = []
    for i, (key, rs) in enumerate(by.items()):
        rs.sort(key=lambda r: r["turn"])
        ctx = segments([("sys", SHARED), (f"task:{key}", rs[0]["prompt_tokens"] - SHARED)])
        for t, r in enumerate(rs):
            if t:
                prev = rs[t - 1]
                grow = r["prompt_tokens"] - prev["prompt_tokens"] - prev["completion_tokens"]
                ctx = concat(
                    ctx,
                    segments(
                        [(f"o:{key}:{t - 1}", prev["completion_tokens"]), (f"g:{key}:{t}", grow)]
                    ),
                )
            assert n_tokens(ctx) == r["prompt_tokens"]
            done = concat(ctx, segments([(f"o:{key}:{t}", r["completion_tokens"])]))
            calls.append(
                {
                    "t": r["api_created"],
                    "done_s": r["t_response"],
                    "prompt": ctx,
                    "cached": done,
                    "provider_hit": r["cache_hit_tokens"],
                    "traj": i,
                    "turn": t,
                }
            )
    calls.sort(key=lambda c: (c["t"], c["traj"], c["turn"]))
    return calls


def replay(calls: list[dict], delay_s: float) -> np.ndarray:
    tree = RadixTree(BLOCK, CountingPool())
    pending: list[tuple[float, int]] = []  # (visible from, call index)
    hits = np.zeros(len(calls), dtype=np.int64)
    for i, c in enumerate(calls):
        ready = [j for s, j in pending if s <= c["t"]]
        pending = [(s, j) for s, j in pending if s > c["t"]]
        for j in ready:
            _insert(tree, calls[j]["cached"], c["t"])
        m = tree.match(c["prompt"], now=c["t"])
        hits[i] = len(m.block_ids) * BLOCK
        if delay_s == 0:
            _insert(tree, c["cached"], c["t"])
        else:
            pending.append((c["done_s"] + delay_s, i))
    return hits


def _insert(tree: RadixTree, content, now: float) -> None:
    full = n_tokens(content) // BLOCK * BLOCK
    content = slice_tokens(content, 0, full)
    m = tree.match(content, now=now)
    new = tree.pool.take(full // BLOCK - len(m.block_ids))
    tree.insert(content, m.block_ids + new, now=now)


def agreement(calls: list[dict], hits: np.ndarray) -> dict:
    prov = np.array([c["provider_hit"] for c in calls], dtype=np.int64)
    prompt = np.array([n_tokens(c["prompt"]) for c in calls], dtype=np.int64)
    diff = hits - prov
    return {
        "calls": len(calls),
        "exact": float(np.mean(diff == 0)),
        "within_one_block": float(np.mean(np.abs(diff) <= BLOCK)),
        "sim_more": float(np.mean(diff > BLOCK)),
        "sim_less": float(np.mean(diff < -BLOCK)),
        "hit_rate_sim": float(hits.sum() / prompt.sum()),
        "hit_rate_provider": float(prov.sum() / prompt.sum()),
        "median_abs_diff_tokens": float(np.median(np.abs(diff))),
        "sim_more_provider_at_an_older_prefix": _older_prefix_share(calls, diff > BLOCK),
    }


def _older_prefix_share(calls: list[dict], where: np.ndarray) -> float:
    """Of the calls where kvsim hits more, the share whose provider hit ends within one block
    of an earlier call's cached prefix (its prompt plus reply) other than the latest one:
    the provider matched an older entry, as if the latest had not been kept."""
    ends: dict[int, list[int]] = {}
    older = total = 0
    for c, w in zip(calls, where.tolist(), strict=True):
        seen = ends.setdefault(c["traj"], [])
        if w and len(seen) > 1:
            total += 1
            older += any(abs(c["provider_hit"] - e) <= BLOCK for e in [SHARED, *seen[:-1]])
        seen.append(n_tokens(c["cached"]) // BLOCK * BLOCK)
    return older / total if total else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    calls = load(args.data)
    out = {f"delay_{d:g}s": agreement(calls, replay(calls, d)) for d in DELAYS_S}
    path = Path(__file__).resolve().parent / "fixtures" / "cache_check.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for k, v in out.items():
        print(k, {a: round(b, 3) for a, b in v.items()})


if __name__ == "__main__":
    main()

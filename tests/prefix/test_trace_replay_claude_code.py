"""``kvsim trace-replay --format claude-code``: exact hits on a hand-checked file, and the
shipped sessions against an independent block-level LRU written here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sim.errors import ConfigError, KvsimError
from sim.prefix.session_trace import load_sessions
from sim.prefix.trace_replay import replay_sessions

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "workloads/data/claude_code/sessions.jsonl.gz"

# Block size 4. Session A: c1 [1,2] (10 tokens), c2 [1,2,3,4] (17), a subagent c3
# [10,11] (9), then c4 [1,2,5] (13: diverges at its third block). Session B: c5 [1,2] (8:
# the same ids as A's, another session's content), c6 [1] (4).
HAND = [
    {
        "id": "A",
        "block_size": 4,
        "hash_id_scope": "local",
        "requests": [
            {"t": 0, "in": 10, "out": 2, "hash_runs": [[1, 2]], "input_types": ["text"]},
            {"t": 5, "in": 17, "out": 3, "hash_runs": [[1, 4]], "input_types": ["tool_result"]},
            {
                "t": 9,
                "type": "subagent",
                "requests": [{"t": 0, "in": 9, "out": 1, "hash_runs": [[10, 2]]}],
            },
            {"t": 20, "in": 13, "out": 1, "hash_runs": [[1, 2], [5, 1]]},
        ],
    },
    {
        "id": "B",
        "block_size": 4,
        "requests": [
            {"t": 0, "in": 8, "out": 1, "hash_runs": [[1, 2]]},
            {"t": 1, "in": 4, "out": 1, "hash_runs": [[1, 1]]},
        ],
    },
]


def _write(tmp_path: Path, sessions=HAND, name="s.jsonl") -> Path:
    p = tmp_path / name
    text = "".join(json.dumps(s) + "\n" for s in sessions)
    if name.endswith(".gz"):
        with gzip.open(p, "wt") as fh:
            fh.write(text)
    else:
        p.write_text(text)
    return p


def test_hand_checked_unbounded(tmp_path):
    r = replay_sessions(load_sessions(_write(tmp_path)))
    # c2 reuses c1's 2 blocks, c4 the shared [1,2], c6 B's [1]; B's [1,2] are not A's
    assert r.hits == [0, 8, 0, 8, 0, 4]
    assert (r.requests, r.prompt_tokens, r.hit_tokens) == (6, 61, 20)
    assert r.hit_rate_last_half == pytest.approx(12 / 25)  # c4..c6
    assert r.peak_cached_tokens == 9 * 4 and r.evicted_blocks == 0 and r.block_size == 4


def test_hand_checked_three_blocks_of_cache(tmp_path):
    r = replay_sessions(load_sessions(_write(tmp_path)), cache_tokens=12)
    # c2 (4 blocks > 3) does not fit: it caches its leading 3 (A1-A3). c3 evicts A3, A2
    # (time 1, deepest first); c4 matches A1 only (4 tokens), then evicts S11, S10 (time 2);
    # c5 evicts A5, A2 (time 3); c6 hits B1.
    assert r.hits == [0, 8, 0, 4, 0, 4]
    assert r.hit_tokens == 16 and r.evicted_blocks == 6
    assert r.peak_cached_tokens == 12 and r.calls_not_fitting == 1
    assert r.hit_rate_last_half == pytest.approx(8 / 25)


def test_hand_checked_recompute_rule_and_global_scope(tmp_path):
    r = replay_sessions(load_sessions(_write(tmp_path)), recompute_last_token=True)
    assert r.hits == [0, 8, 0, 8, 0, 0]  # c6's whole 4-token prompt is cached: one block recomputed
    shared = [dict(s, hash_id_scope="global") for s in HAND]
    g = replay_sessions(load_sessions(_write(tmp_path, shared)))
    assert g.hits == [0, 8, 0, 8, 8, 4]  # B's [1,2] are A's blocks now


def test_jsonl_gz_and_a_folder_of_json_files_read_the_same(tmp_path):
    plain = replay_sessions(load_sessions(_write(tmp_path)), cache_tokens=12)
    gz = replay_sessions(load_sessions(_write(tmp_path, name="s.jsonl.gz")), cache_tokens=12)
    folder = tmp_path / "traces"
    folder.mkdir()
    for i, s in enumerate(HAND):  # upstream layout: hash_ids lists, one file per session
        up = json.loads(json.dumps(s))
        for r in (
            [*up["requests"], *up["requests"][2].get("requests", [])] if i == 0 else up["requests"]
        ):
            runs = r.pop("hash_runs", None)
            if runs is not None:
                r["hash_ids"] = [x for a, n in runs for x in range(a, a + n)]
        (folder / f"trace_{i:04d}.json").write_text(json.dumps(up))
    (folder / "notes.txt").write_text("not a session")
    tree = replay_sessions(load_sessions(folder), cache_tokens=12)
    assert plain.hits == gz.hits == tree.hits == [0, 8, 0, 4, 0, 4]


# ----------------------------------------------------------- an independent LRU model
def _independent_lru(path: Path, cache_tokens: int | None) -> tuple[list[int], int, int]:
    """Block-level LRU over (session, id) keys: hits per call, evicted blocks, peak blocks.

    A block's parent is the block before it in the prompt; a leaf is a cached block with no
    cached child; over capacity the leaf with the oldest last use that the current call does
    not use goes, the deeper first on equal last use. A call of more blocks than the
    capacity caches (and touches) its leading ``cache_tokens // bs`` blocks only.
    """
    hits, evicted, peak, now = [], 0, 0, 0
    last: dict = {}  # cached block -> last use
    depth: dict = {}
    parent: dict = {}
    kids: dict = {}
    leaves: set = set()  # cached blocks no cached block extends

    def calls(reqs):
        for r in reqs:
            if r.get("type") == "subagent":
                yield from calls(r["requests"])
            else:
                yield r

    with gzip.open(path, "rt") as fh:
        sessions = [json.loads(line) for line in fh]
    for si, s in enumerate(sessions):
        bs = s["block_size"]
        for c in calls(s["requests"]):
            keys = [(si, x) for a, n in c["hash_runs"] for x in range(a, a + n)]
            k = 0
            while k < len(keys) and keys[k] in last:
                k += 1
            hits.append(min(k * bs, c["in"]))
            keep = len(keys) if cache_tokens is None else min(len(keys), cache_tokens // bs)
            for j, key in enumerate(keys[:keep]):
                if key not in last:
                    par = keys[j - 1] if j else None
                    parent[key], depth[key], kids[key] = par, j + 1, 0
                    leaves.add(key)
                    if par is not None:
                        kids[par] += 1
                        leaves.discard(par)
                last[key] = now
            if cache_tokens is not None:
                mine = set(keys[:keep])
                while len(last) * bs > cache_tokens:
                    free = [b for b in leaves if b not in mine]
                    victim = min(free, key=lambda b: (last[b], -depth[b]))
                    del last[victim]
                    leaves.discard(victim)
                    evicted += 1
                    par = parent[victim]
                    if par is not None:
                        kids[par] -= 1
                        if kids[par] == 0:
                            leaves.add(par)
            peak = max(peak, len(last))
            now += 1
    return hits, evicted, peak


@pytest.mark.parametrize("cache_tokens", [None, 2_000_000, 300_000, 40_000])
def test_shipped_sessions_match_an_independent_lru(cache_tokens):
    sessions = load_sessions(SHIPPED)
    r = replay_sessions(sessions, cache_tokens=cache_tokens)
    hits, evicted, peak = _independent_lru(SHIPPED, cache_tokens)
    assert r.hits == hits
    assert r.evicted_blocks == evicted and r.peak_cached_tokens == peak * 64
    if cache_tokens is not None:
        assert r.peak_cached_tokens <= cache_tokens
    assert r.requests == 1521 and len(sessions) == 32
    if cache_tokens is None:
        assert r.hit_rate == pytest.approx(0.95288, abs=1e-5)  # within-session reuse
    if cache_tokens == 40_000:
        assert r.hit_tokens < replay_sessions(sessions, cache_tokens=300_000).hit_tokens


# ------------------------------------------------------------------ the command line
def _cli(args: list[str], capsys) -> tuple[int, str]:
    from sim.cli import main

    code = main(args)
    got = capsys.readouterr()
    return code, got.out + got.err


def test_cli_json_has_the_same_keys_as_mooncake(tmp_path, capsys):
    args = ["--format", "claude-code", "--json", "--cache-tokens", "12"]
    code, text = _cli(["trace-replay", str(_write(tmp_path)), *args], capsys)
    assert code == 0, text
    out = json.loads(text)
    assert {"requests", "prompt_tokens", "hit_tokens", "hit_rate", "hit_rate_last_half"} <= set(out)
    assert (out["hit_tokens"], out["block_size"], out["sessions"]) == (16, 4, 2)
    assert out["format"] == "claude-code" and out["cache_tokens"] == 12


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s["requests"][0].update({"in": 20}),
            "requests[0].hash_runs: has 2 block ids but in = 20",
        ),
        (lambda s: s["requests"][1].pop("out"), "requests[1].out: missing"),
        (lambda s: s["requests"][0].update({"hash_runs": [[1, -2]]}), "requests[0].hash_runs[0]"),
        (
            lambda s: s.update({"hash_id_scope": "team"}),
            "hash_id_scope: must be one of local, global",
        ),
        (
            lambda s: s["requests"][2]["requests"][0].update({"t": "soon"}),
            "requests[2].requests[0].t",
        ),
    ],
)
def test_bad_sessions_are_one_line_naming_file_line_and_field(tmp_path, capsys, edit, message):
    bad = json.loads(json.dumps(HAND))
    edit(bad[0])
    path = _write(tmp_path, bad)
    with pytest.raises(ConfigError) as exc:
        load_sessions(path)
    text = str(exc.value)
    assert text.startswith(f"{path}:1: ") and message in text and "\n" not in text
    code, text = _cli(["trace-replay", str(path), "--format", "claude-code"], capsys)
    assert code == 2 and message in text


def test_unreadable_and_mismatched_inputs(tmp_path, capsys):
    gz = tmp_path / "x.jsonl.gz"
    gz.write_bytes(b"not gzip at all")
    with pytest.raises(KvsimError, match="cannot read sessions"):
        load_sessions(gz)
    path = str(_write(tmp_path))
    code, text = _cli(
        ["trace-replay", path, "--format", "claude-code", "--block-size", "64"], capsys
    )
    assert code == 2 and "block size is 4" in text
    code, text = _cli(["trace-replay", path, "--format", "claude"], capsys)
    assert code == 2 and "claude-code" in text

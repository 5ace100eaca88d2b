"""Fuzz every shipped scenario and profile with hostile mutations (issue: inputs that hang
or explode).

Each shipped scenario (workloads/*.yaml, benchmarks/*.yaml) and profile
(hardware_profiles/**/*.yaml) is mutated, with a fixed seed, by every family below: wrong
types, negative numbers, NaN and infinities, unknown keys, duplicate keys, an alias bomb
and a recursive alias, non-UTF-8 bytes and control characters, deep nesting. Every mutant
is invalid by construction. Each case runs ``kvsim validate FILE`` (scenarios and
calibrations) or ``kvsim profiles show NAME --profiles DIR`` (profiles, from a temporary
copy that shadows the shipped one) in its own process, forked by ``driver.py`` from a warm
interpreter, under a 1 GiB address-space limit and a 30 s alarm. Each must exit with
status 2, print no traceback and name the mutated file.

The number flags of ``kvsim plan`` and ``kvsim breakeven`` are mutated the same way: each
flag in turn, in a valid command line, set to NaN, +inf, -inf and a negative number (each
invalid for every one of them); each case must exit 2 without a traceback and name the
flag. The work is bounded by count, never by a wall clock: at most ``MAX_PER_SCENARIO`` /
``MAX_PER_PROFILE`` mutants per file, each case under the driver's per-case alarm (a hang
guard) and address-space limit.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")
SEED = 20240601
SCENARIOS = sorted([*ROOT.glob("workloads/*.yaml"), *ROOT.glob("benchmarks/*.yaml")])
SCENARIOS = [p for p in SCENARIOS if not p.name.endswith("_sweep.yaml")]  # a sweep names its base
PROFILES = sorted(ROOT.glob("hardware_profiles/**/*.yaml"))
PROFILE_KINDS = {"accelerators", "models", "nodes"}  # the rest (calibration) via validate
#: mappings whose values are free-form (``dict[str, Any]`` overrides, a calibration's
#: informational ``measured`` figures, which may be negative): left alone
FREE_FORM = {"overrides", "accelerator_overrides", "measured"}
#: per-case targets drawn for each value-level family (types, signs, non-finite)
PICKS_SCENARIO, PICKS_PROFILE = 3, 1
DEPTH = 1000  # far past the loader's nesting bound (64)
#: mutants per file at most: 5 per value pick (negative, NaN, +inf, -inf, type), 4 of
#: structure (unknown key, duplicate key, deep list, deep map), 5 of the loader (two alias
#: bombs, a recursive alias, non-UTF-8 bytes, a control character)
MAX_PER_SCENARIO = 5 * PICKS_SCENARIO + 4 + 5
MAX_PER_PROFILE = 5 * PICKS_PROFILE + 4 + 5
DRIVER_HANG_S = 3600  # the driver's subprocess timeout: a hang guard, never a speed budget
#: the cases run as this many independent drivers (every SHARDS-th input file and flag
#: case each), so that pytest-xdist can spread them over its workers; without it they
#: run one after the other, the same work as one driver but for its start-up
SHARDS = 4

#: valid command lines of ``plan`` and ``breakeven``, and a valid value of each number flag
#: (the flags absent from the command line are added one at a time)
FLAG_COMMANDS = {
    "plan": (
        ["plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
         "--context", "8192,32768"],
        {"--num-gpus": "8", "--context": "8192", "--tp": "8", "--pp": "1",
         "--output-tokens": "100", "--params": "70.6e9", "--gpu-mem-gib": "80",
         "--gpu-mem-gb": "80", "--reserve-gb-per-gpu": "2.5", "--reserve-gib-per-gpu": "2",
         "--gpu-memory-utilization": "0.9", "--headroom": "0.1",
         "--shared-prefix-tokens": "1000"},
    ),
    "breakeven": (
        ["breakeven", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
         "--context", "32768"],
        {"--num-gpus": "8", "--context": "32768", "--tp": "8", "--pp": "1",
         "--params": "70.6e9", "--link-gb-per-s": "64", "--prefill-mfu": "0.45",
         "--prefill-tflops": "400", "--wait": "45", "--mu-ratio": "4", "--stall-s": "0.5"},
    ),
}  # fmt: skip

Path_ = tuple  # a key path into the parsed document


# ------------------------------------------------------------------------ documents
def _walk(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))


def _set(doc: Any, path: Path_, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8")


def _numbers(doc: Any) -> list[Path_]:
    return [
        p
        for p, v in _walk(doc)
        if p and isinstance(v, int | float) and not isinstance(v, bool) and not _free(p)
    ]


def _free(path: Path_) -> bool:
    return any(p in FREE_FORM for p in path)


def _type_swap(value: Any) -> Any:
    """A value of another type that no field of the value's own type accepts."""
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, int | float):
        return "not-a-number"
    if isinstance(value, str):
        return [1, 2]
    if isinstance(value, dict):
        return [7]  # not a bare number: a distribution accepts one
    if isinstance(value, list):
        return {"a": 1}
    return [1]  # null -> a list


# ------------------------------------------------------------------------ mutations
Mutation = tuple[str, bytes]


def _value_mutants(doc: Any, rng: random.Random, picks: int) -> Iterator[Mutation]:
    nums = _numbers(doc)
    for path in rng.sample(nums, min(picks, len(nums))):
        yield f"negative:{_dotted(path)}", _dump(_set(doc, path, -abs(_num(doc, path)) - 1))
    for path in rng.sample(nums, min(picks, len(nums))):
        for word, bad in ((".nan", float("nan")), (".inf", float("inf")), ("-.inf", -1e999)):
            yield f"{word}:{_dotted(path)}", _dump(_set(doc, path, bad))
    typed = [p for p, _ in _walk(doc) if p and not _free(p) and p[-1] != "schema_version"]
    for path in rng.sample(typed, min(picks, len(typed))):
        yield f"type:{_dotted(path)}", _dump(_set(doc, path, _type_swap(_get(doc, path))))


def _get(doc: Any, path: Path_) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _num(doc: Any, path: Path_) -> float:
    return float(_get(doc, path))


def _dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


def _structure_mutants(doc: Any, text: bytes, rng: random.Random) -> Iterator[Mutation]:
    maps = [p for p, v in _walk(doc) if isinstance(v, dict) and not _free(p)]
    where = rng.choice(maps)
    yield f"unknown-key:{_dotted(where) or '(top)'}", _dump(
        _set(doc, (*where, "no_such_field_x"), 1) if where else {**doc, "no_such_field_x": 1}
    )
    yield from _duplicate_key(text, rng)
    leaves = [p for p, v in _walk(doc) if p and not isinstance(v, dict | list) and not _free(p)]
    deep = rng.choice(leaves)
    yield f"deep-list:{_dotted(deep)}", _dump_deep(doc, deep, "[" * DEPTH + "1" + "]" * DEPTH)
    yield f"deep-map:{_dotted(deep)}", _dump_deep(doc, deep, "{a: " * DEPTH + "1" + "}" * DEPTH)


def _dump_deep(doc: Any, path: Path_, flow: str) -> bytes:
    marker = "DEEP_MARKER_VALUE"
    return _dump(_set(doc, path, marker)).replace(marker.encode(), flow.encode())


def _duplicate_key(text: bytes, rng: random.Random) -> Iterator[Mutation]:
    """A ``key: value`` line written twice in a row (the same mapping, two lines)."""
    lines = text.decode("utf-8").splitlines(keepends=True)
    simple = [
        i
        for i, line in enumerate(lines)
        if ":" in line
        and not line.lstrip().startswith(("#", "-"))
        and line.split(":", 1)[0].strip().replace("_", "").replace("-", "").isalnum()
        and line.split(":", 1)[1].split("#", 1)[0].strip() not in ("", "|", ">")
    ]
    i = rng.choice(simple)
    out = [*lines[: i + 1], lines[i] if lines[i].endswith("\n") else "\n" + lines[i], *lines[i + 1 :]]
    yield f"duplicate-key:line{i + 1}", "".join(out).encode("utf-8")


def _loader_mutants(doc: Any, text: bytes, rng: random.Random, text_key: str) -> Iterator[Mutation]:
    bomb = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        bomb.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    defs = "".join(f"  {line}\n" for line in bomb)
    yield "alias-bomb:unknown-key", f"x_bomb:\n{defs}".encode() + text
    # the bomb as the value of a text field (defined under an extra key just before it)
    marker = "BOMB_MARKER_VALUE"
    bombed = _dump(_set(doc, (text_key,), marker)).replace(
        f"{text_key}: {marker}".encode(), f"x_defs:\n{defs}{text_key}: *a9".encode()
    )
    yield f"alias-bomb:{text_key}", bombed
    yield "recursive-alias", b"x_self: &self [1, *self]\n" + text
    pos = rng.randrange(len(text) + 1)
    yield f"non-utf8:@{pos}", text[:pos] + b"\xff\xfe" + text[pos:]
    pos = rng.randrange(len(text) + 1)
    yield f"control-char:@{pos}", text[:pos] + b"\x00" + text[pos:]


def mutants(path: Path, picks: int, text_key: str) -> Iterator[Mutation]:
    rng = random.Random(f"{SEED}:{path.relative_to(ROOT)}")
    text = path.read_bytes()
    doc = yaml.safe_load(text)
    yield from _value_mutants(doc, rng, picks)
    yield from _structure_mutants(doc, text, rng)
    yield from _loader_mutants(doc, text, rng, text_key)


def flag_mutants() -> Iterator[tuple[str, str, list[str]]]:
    """(id, flag, argv): each number flag of plan and breakeven set to a value it does not
    accept (NaN, infinities, a negative number; +inf is --mu-ratio's 'host memory is free')."""
    for command, (base, numbers) in FLAG_COMMANDS.items():
        for flag, valid in numbers.items():
            for bad in ("nan", "inf", "-inf", f"-{valid}"):
                if (flag, bad) == ("--mu-ratio", "inf"):
                    continue
                argv = list(base)
                if flag in argv:
                    argv[argv.index(flag) + 1] = bad
                else:
                    argv += [flag, bad]
                if flag == "--prefill-mfu":  # one prefill rate at a time
                    argv = [a for a in argv if a != "--prefill-tflops"]
                yield f"{command} {flag} {bad}", flag, argv


# ---------------------------------------------------------------------------- cases
def _shard(items: list, shard: int) -> list:
    """Every ``SHARDS``-th item from ``shard``: the shards partition the list."""
    return items[shard::SHARDS]


def _cases(tmp: Path, shard: int) -> list[dict]:
    cases: list[dict] = []
    for src in _shard(SCENARIOS, shard):
        for n, (name, data) in enumerate(mutants(src, PICKS_SCENARIO, "description")):
            f = tmp / "scenarios" / f"{n:03d}" / src.name
            cases.append(_case(f, data, ["validate", str(f)], src, name))
    for src in _shard(PROFILES, shard):
        kind = src.parent.name
        for n, (name, data) in enumerate(mutants(src, PICKS_PROFILE, "notes")):
            folder = tmp / "profiles" / f"{kind}-{src.stem}-{n:03d}"
            f = folder / kind / src.name
            if kind in PROFILE_KINDS:
                argv = ["profiles", "show", src.stem, "--profiles", str(folder)]
            else:  # a calibration: through a scenario that names it
                scenario = str(ROOT / "workloads" / "agent_swarm.yaml")
                argv = ["validate", scenario, "--set", f"cost.calibration={f}"]
            cases.append(_case(f, data, argv, src, name))
    for name, flag, argv in _shard(list(flag_mutants()), shard):
        cases.append({"id": name, "argv": argv, "needle": flag})
    return cases


def _case(f: Path, data: bytes, argv: list[str], src: Path, name: str) -> dict:
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    return {"id": f"{src.relative_to(ROOT)} {name}", "argv": argv, "needle": str(f)}


def _run_driver(tmp: Path, cases: list[dict]) -> dict[str, dict]:
    manifest = tmp / "manifest.json"
    warm = [
        ["validate", str(SCENARIOS[0])],
        ["profiles", "show", PROFILES[0].stem],
        *(base for base, _ in FLAG_COMMANDS.values()),
    ]
    manifest.write_text(json.dumps({"warm": warm, "cases": cases}))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(manifest)],
        capture_output=True,
        text=True,
        timeout=DRIVER_HANG_S,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["id"]: r for r in results}


def test_shipped_inputs_exist():
    assert len(SCENARIOS) >= 5 and len(PROFILES) >= 20


def test_mutants_are_deterministic():
    first = [name for name, _ in mutants(SCENARIOS[0], PICKS_SCENARIO, "description")]
    again = [name for name, _ in mutants(SCENARIOS[0], PICKS_SCENARIO, "description")]
    assert first == again and len(first) >= 15


def test_the_shards_partition_every_input():
    for items in (SCENARIOS, PROFILES, list(flag_mutants())):
        shards = [_shard(items, k) for k in range(SHARDS)]
        assert sorted(map(str, sum(shards, []))) == sorted(map(str, items))
        assert all(shards)  # no shard idle


@pytest.fixture(scope="class")
def written_cases(request, tmp_path_factory) -> tuple[int, Path, list[dict]]:
    """(shard, folder, cases) of the requesting shard class, its mutants written."""
    shard = request.cls.shard
    tmp = tmp_path_factory.mktemp(f"fuzz{shard}")
    return shard, tmp, _cases(tmp, shard)


class _Shard:
    """The fuzz of one shard (every ``SHARDS``-th input file and flag case from ``shard``);
    a class per shard (below), so that pytest-xdist (``--dist loadscope``) hands each to a
    worker of its own, and a shard's mutants are written once for its two tests."""

    shard: int

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="the driver forks one process per case")
    def test_every_mutant_fails_cleanly(self, written_cases: tuple[int, Path, list[dict]]):
        _every_mutant_fails_cleanly(*written_cases[1:])

    def test_the_fuzz_work_is_bounded_by_count(self, written_cases: tuple[int, Path, list[dict]]):
        _the_fuzz_work_is_bounded_by_count(*written_cases)


for _k in range(SHARDS):  # TestShard0, ...
    globals()[f"TestShard{_k}"] = type(f"TestShard{_k}", (_Shard,), {"shard": _k})


def _every_mutant_fails_cleanly(tmp_path: Path, cases: list[dict]) -> None:
    results = _run_driver(tmp_path, cases)
    bad = []
    for case in cases:
        r = results.get(case["id"])
        problem = _problem(case, r)
        if problem:
            bad.append(f"{case['id']}: {problem}")
    assert not bad, f"{len(bad)} of {len(cases)} cases:\n" + "\n".join(bad[:40])


def _the_fuzz_work_is_bounded_by_count(shard: int, tmp_path: Path, cases: list[dict]) -> None:
    """The bounded work the fuzz stands for, counted (no wall clock): a fixed number of
    mutants per shipped file and per number flag, so it grows linearly with the inputs.
    Counted per shard; ``test_the_shards_partition_every_input`` makes the shards the whole."""
    per_file: dict[str, int] = {}
    for case in cases:
        if "needle" in case and case["needle"].startswith(str(tmp_path)):
            src = case["id"].split(" ", 1)[0]
            per_file[src] = per_file.get(src, 0) + 1
    bound = {str(p.relative_to(ROOT)): MAX_PER_SCENARIO for p in _shard(SCENARIOS, shard)}
    bound.update({str(p.relative_to(ROOT)): MAX_PER_PROFILE for p in _shard(PROFILES, shard)})
    assert set(per_file) == set(bound)  # every file of the shard is fuzzed
    assert all(1 <= n <= bound[f] for f, n in per_file.items()), per_file
    assert len(cases) - sum(per_file.values()) == len(_shard(list(flag_mutants()), shard))


def test_flag_mutants_cover_every_number_flag():
    found = {(argv[0], flag) for _, flag, argv in flag_mutants()}
    assert len(found) == 24 and len(list(flag_mutants())) == 95
    assert ("plan", "--gpu-mem-gb") in found and ("breakeven", "--link-gb-per-s") in found


def _problem(case: dict, r: dict | None) -> str | None:
    if r is None:
        return "no result (the driver stopped)"
    err = r["stderr"]
    checks: list[tuple[bool, Callable[[], str]]] = [
        (r["signal"] is not None, lambda: f"killed by signal {r['signal']} (timeout or memory)"),
        ("Traceback" in err, lambda: "traceback:\n" + err[-1500:]),
        (r["code"] != 2, lambda: f"exit status {r['code']}: {err[-300:]!r}"),
        (case["needle"] not in err, lambda: f"the message does not name {case['needle']}: {err[-300:]!r}"),
    ]
    for failed, why in checks:
        if failed:
            return why()
    return None

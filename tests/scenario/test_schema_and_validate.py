"""Every shipped scenario validates against ``kvsim schema`` with the ``jsonschema``
package; ``kvsim validate`` lists every problem and checks the trace files."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    *sorted((ROOT / "workloads").glob("*.yaml")),
    *sorted((ROOT / "benchmarks").glob("*.yaml")),
    *sorted((ROOT / "tests" / "golden" / "scenarios").glob("*.yaml")),
]
SHIPPED = [p for p in SHIPPED if not p.name.endswith("_sweep.yaml")]  # sweep files: tests/sweep

BASE = """\
schema_version: 1
name: t
model: chapter-70b
hardware:
  accelerator: e20-accelerator
allocator:
  kind: paged
  block_size: 16
scheduler:
  kind: vllm_v1
  max_num_batched_tokens: 544
workload:
  kind: chat
  num_requests: 3
  arrival: {kind: poisson, rate_per_s: 1.0}
  lengths:
    kind: trace
    path: data/lengths.csv
"""


@pytest.fixture(scope="module")
def validator(tmp_path_factory):
    from sim.cli import main

    out = tmp_path_factory.mktemp("schema") / "scenario.schema.json"
    assert main(["schema", "--out", str(out)]) == 0  # what `kvsim schema` writes
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_every_shipped_scenario_is_found():
    names = {p.name for p in SHIPPED}
    assert {"agent_swarm.yaml", "chat_azure.yaml", "agents_500.yaml"} <= names
    assert len(SHIPPED) >= 12  # workloads, benchmarks and the golden suite's frozen copies


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_scenario_validates_against_kvsim_schema(validator, path):
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == 1  # a scenario says which schema it is written for
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []


def test_the_schema_still_rejects_what_kvsim_rejects(validator):
    good = yaml.safe_load(BASE)
    assert list(validator.iter_errors(good)) == []
    for path, value in [
        (("model",), 3),  # neither a name nor a section
        (("allocator", "blocks"), 3),  # unknown field
        (("workload", "num_requests"), "many"),
        (("workload", "arrival", "rate_per_s"), {"kind": "lognormal"}),  # not a distribution
    ]:
        bad = yaml.safe_load(BASE)
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert list(validator.iter_errors(bad)), path


def test_distribution_shorthands_validate(validator):
    data = yaml.safe_load((ROOT / "workloads" / "seed_tool_wait_45s.yaml").read_text())
    data["workload"]["pause_s"] = 45  # a bare number: a constant
    assert list(validator.iter_errors(data)) == []
    data["workload"]["pause_s"] = "45 s"
    assert list(validator.iter_errors(data))
    data["workload"]["pause_s"] = {"kind": "lognormal", "median": 2.0, "sigma": 1.0}
    assert list(validator.iter_errors(data)) == []


@pytest.mark.parametrize(
    "text,accepted",
    [
        ("1e9", True),  # YAML 1.1 reads these as strings: kvsim takes them as numbers
        ("2.5E+3", True),
        ("-1e-3", True),
        (".5e1", True),
        ("1_0", False),  # a float() literal, not a YAML/JSON one
        (" 3 ", False),
        ("3", False),  # no exponent: a quoted number is text
        ("1e9 ", False),
        ("inf", False),
        ("nan", False),
        ("0x10", False),
        ("1e9\n", False),
        ("\u0661e9", False),  # an Arabic-Indic one: float() reads it, JSON Schema's \d not
    ],
)
def test_number_text_kvsim_and_the_schema_agree(validator, text, accepted):
    """A distribution field takes a string only when it is a float literal with an
    exponent; ``kvsim schema`` states the same pattern (before: any float() text)."""
    from pydantic import TypeAdapter, ValidationError

    from sim.workload.distributions import Dist

    data = yaml.safe_load((ROOT / "workloads" / "seed_tool_wait_45s.yaml").read_text())
    data["workload"]["pause_s"] = text
    schema_ok = list(validator.iter_errors(data)) == []
    try:
        TypeAdapter(Dist).validate_python(text)
        kvsim_ok = True
    except ValidationError:
        kvsim_ok = False
    assert (kvsim_ok, schema_ok) == (accepted, accepted)


def test_an_exponent_written_as_text_is_a_constant(tmp_path):
    from sim.scenario import load_scenario

    path = ROOT / "workloads" / "seed_tool_wait_45s.yaml"
    text = path.read_text()
    assert "pause_s: 45.0\n" in text
    p = tmp_path / "s.yaml"
    p.write_text(text.replace("pause_s: 45.0\n", "pause_s: 4.5e1\n"))  # text to YAML 1.1
    pause = load_scenario(p).scenario.workload.pause_s
    assert (pause.kind, pause.value) == ("constant", 45.0)


# ------------------------------------------------------------------------ kvsim validate
def _scenario(tmp_path, text: str = BASE, trace: bool = True) -> Path:
    if trace:
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / "lengths.csv").write_text("ContextTokens,GeneratedTokens\n10,5\n")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_validate_lists_every_problem_in_file_order(tmp_path, run_cli):
    text = (
        BASE.replace("name: t", "name: t\nseed: -1")
        .replace("  block_size: 16", "  block_size: 16\n  blocks: 3")
        .replace("num_requests: 3", "num_requests: 0")
    )
    p = _scenario(tmp_path, text)
    code, out, err = run_cli(["validate", str(p)])
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"kvsim: error: {p}:3: seed: Input should be greater than or equal to 0",
        f"kvsim: error: {p}:10: allocator.blocks: unknown field; valid: block_size, kind",
        f"kvsim: error: {p}:16: workload.num_requests: Input should be greater than or equal "
        "to 1",
    ]
    # kvsim run still says it in one line, with the count of the others
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o")])
    assert code == 2 and err.count("\n") == 1 and err.endswith("(and 2 more problems)\n")


def test_validate_stops_listing_at_twenty(tmp_path, run_cli):
    extra = "".join(f"  bogus_{i:02d}: 1\n" for i in range(25))
    p = _scenario(tmp_path, BASE.replace("  block_size: 16\n", "  block_size: 16\n" + extra))
    code, _, err = run_cli(["validate", str(p)])
    lines = err.splitlines()
    assert code == 2 and len(lines) == 21
    assert lines[0].startswith(f"kvsim: error: {p}:9: allocator.bogus_00: unknown field")
    assert lines[19].startswith(f"kvsim: error: {p}:28: allocator.bogus_19: unknown field")
    assert lines[20] == "kvsim: error: ... and 5 more"


def test_validate_checks_that_trace_files_exist(tmp_path, run_cli):
    p = _scenario(tmp_path, trace=False)
    code, out, err = run_cli(["validate", str(p)])
    assert (code, out) == (2, "")
    assert err == (
        f"kvsim: error: {p}:18: workload.lengths.path: no such file: data/lengths.csv "
        f"(looked for {tmp_path / 'data' / 'lengths.csv'})\n"
    )
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o")])  # run: the same line
    assert code == 2 and err.startswith(f"kvsim: error: {p}:18: workload.lengths.path: no such")
    _scenario(tmp_path)  # now the trace is there
    code, out, err = run_cli(["validate", str(p)])
    assert code == 0 and out.startswith(f"{p}: ok: t:"), err


def test_config_error_declares_its_problems():
    """``problems`` is a declared attribute (empty: the error is the only problem), not
    one set on some instances and probed with getattr."""
    from sim.errors import ConfigError

    one = ConfigError("bad", location="f.yaml:3", field="a")
    assert one.problems == [] and str(one) == "f.yaml:3: a: bad"
    two = ConfigError("first (and 1 more problem)", problems=[one, ConfigError("other")])
    assert [str(p) for p in two.problems] == ["f.yaml:3: a: bad", "other"]


def test_validate_and_run_make_the_same_preflight_checks(tmp_path, run_cli):
    """One preflight (sim.run.runner.preflight) for both: a missing trace and a pause
    policy needing a tier that is not configured are two problems for each (before, kvsim
    run named only the second)."""
    from sim.errors import ConfigError
    from sim.run.runner import preflight
    from sim.scenario import load_scenario

    p = _scenario(tmp_path, BASE + "pause_policy:\n  kind: offload_host\n", trace=False)
    missing = (
        f"{p}:18: workload.lengths.path: no such file: data/lengths.csv (looked for "
        f"{tmp_path / 'data' / 'lengths.csv'})"
    )
    tier = (
        f"{p}:20: pause_policy.kind: pause policy kind 'offload_host' needs a host-DRAM tier, "
        "and none is configured: set hardware.node (a node profile) or "
        "hardware.host_kv_pool_bytes"
    )
    code, _, err = run_cli(["validate", str(p)])
    assert (code, err) == (2, f"kvsim: error: {missing}\nkvsim: error: {tier}\n")
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o")])
    assert (code, err) == (2, f"kvsim: error: {missing} (and 1 more problem)\n")
    with pytest.raises(ConfigError) as exc:
        preflight(load_scenario(p))
    assert [str(e) for e in exc.value.problems] == [missing, tier]


def test_trace_paths_become_absolute_in_the_resolved_config(tmp_path):
    from sim.run.provenance import resolved_config
    from sim.scenario import load_scenario

    p = _scenario(tmp_path, BASE.replace(
        "  arrival: {kind: poisson, rate_per_s: 1.0}",
        "  arrival: {kind: trace, path: data/lengths.csv, time_column: ContextTokens}",
    ))  # fmt: skip
    config = resolved_config(load_scenario(p))
    trace = str(tmp_path.resolve() / "data" / "lengths.csv")
    assert config["workload"]["lengths"]["path"] == trace
    assert config["workload"]["arrival"]["path"] == trace
    assert load_scenario(p).scenario.workload.lengths.path == "data/lengths.csv"  # as written

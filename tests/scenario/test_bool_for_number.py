"""A boolean where a number is due is refused, never run as 1 or 0, and a number or a
string where a boolean is due is refused, never run as true or false
(``sim.config_model.ConfigModel``, the base of every config model).

Before: pydantic's lax mode took ``true`` / ``yes`` as 1 and ``false`` as 0 for an int or
a float, so ``seed: yes`` ran with seed 1 and ``tp: true`` with TP 1, in a scenario, a
``--set``, a profile or a calibration file alike; ``kvsim validate`` said ok. Conversely
it took ``1`` / ``0`` / ``1.0`` and the strings ``"yes"`` / ``"true"`` / ``"off"`` for a
``bool``: ``scheduler: {chunked_prefill: 0}`` ran monolithic prefill, ``kvsim validate``
said ok."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.config_model import _WRAPPED, ConfigModel
from sim.scenario import json_schema, load_scenario
from sim.scenario.schema import scenario_model

ROOT = Path(__file__).resolve().parents[2]
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"
CALIBRATION = ROOT / "hardware_profiles" / "calibration" / "synthetic-example.yaml"
ACCELERATOR = ROOT / "hardware_profiles" / "accelerators" / "e20-accelerator.yaml"


def _line(text: str, starts: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(starts))


def test_a_boolean_for_an_int_in_a_scenario_is_one_line_with_its_line(run_cli, tmp_path):
    text = E20.read_text().replace("seed: 0", "seed: yes").replace("  tp: 1", "  tp: true")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    code, out, err = run_cli(["validate", str(scenario)])
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"kvsim: error: {scenario}:{_line(text, 'seed:')}: seed: Input should be a valid "
        "integer, not a boolean (true)",
        f"kvsim: error: {scenario}:{_line(text, '  tp:')}: hardware.tp: Input should be a "
        "valid integer, not a boolean (true)",
    ]


@pytest.mark.parametrize(
    "item,message",
    [
        ("seed=true", "--set seed: seed: Input should be a valid integer, not a boolean (true)"),
        ("hardware.gpu_memory_utilization=false", "--set hardware.gpu_memory_utilization: "
         "hardware.gpu_memory_utilization: Input should be a valid number, not a boolean (false)"),
        ("allocator.block_size=on", "--set allocator.block_size: allocator.block_size: Input "
         "should be a valid integer, not a boolean (true)"),
        ("schema_version=true", "--set schema_version: schema_version: Input should be 1, not "
         "a boolean (true)"),
    ],
)  # fmt: skip
def test_a_boolean_for_a_number_in_a_set_is_refused(run_cli, item, message):
    code, out, err = run_cli(["validate", str(E20), "--set", item])
    assert (code, out, err) == (2, "", f"kvsim: error: {message}\n")


def test_a_boolean_in_a_user_profile_names_its_file_and_line(run_cli, tmp_path, monkeypatch):
    folder = tmp_path / "profiles" / "accelerators"
    folder.mkdir(parents=True)
    text = ACCELERATOR.read_text().replace("memory_bytes: 214748364800", "memory_bytes: true")
    (folder / "my-acc.yaml").write_text(text)
    monkeypatch.setenv("KVSIM_PROFILES", str(tmp_path / "profiles"))
    code, _, err = run_cli(["validate", str(E20), "--set", "hardware.accelerator=my-acc"])
    assert code == 2
    assert err.endswith(
        f"{folder / 'my-acc.yaml'}:{_line(text, 'memory_bytes')}: memory_bytes: Input should "
        "be a valid integer, not a boolean (true)\n"
    )


def test_a_boolean_in_a_calibration_file_names_its_file_and_line(run_cli, tmp_path):
    text = CALIBRATION.read_text().replace("step_overhead_s: 0.00025", "step_overhead_s: true")
    cal = tmp_path / "cal.yaml"
    cal.write_text(text)
    code, _, err = run_cli(["validate", str(E20), "--set", f"cost.calibration={cal}"])
    assert code == 2
    assert err.endswith(
        f"{cal}:{_line(text, 'step_overhead_s')}: step_overhead_s: Input should be a valid "
        "number, not a boolean (true)\n"
    )


def test_booleans_still_fill_bool_fields_and_numbers_still_parse_as_before():
    loaded = load_scenario(str(E20), {"scheduler.chunked_prefill": False, "seed": "3",
                                      "hardware.kv_pool_bytes_per_gpu": "20e9"})  # fmt: skip
    sc = loaded.scenario
    assert sc.scheduler.chunked_prefill is False and sc.cost.weights is True
    assert sc.seed == 3 and sc.hardware.kv_pool_bytes_per_gpu == 20e9


class _Inner(ConfigModel):
    n: int = Field(1, ge=1)
    flag: bool = False


class _Outer(ConfigModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    x: float | None = None
    xs: list[float] = []
    by: dict[int, str] = {}
    pair: tuple[int, float] = (1, 1.0)
    version: Literal[1, 2] = 1
    auto: int | Literal["auto"] = "auto"
    either: bool | int = 0
    inner: _Inner = _Inner()
    plain: dict = {}


@pytest.mark.parametrize(
    "data,loc",
    [
        ({"x": True}, ("x",)),
        ({"xs": [1.5, False]}, ("xs", 1)),
        ({"by": {True: "a"}}, ("by", 1, "[key]")),
        ({"pair": [1, True]}, ("pair", 1)),
        ({"version": True}, ("version",)),
        ({"auto": True}, ("auto",)),
        ({"inner": {"n": True}}, ("inner", "n")),
    ],
)
def test_every_place_a_number_sits_refuses_a_boolean(data, loc):
    with pytest.raises(ValidationError) as exc:
        _Outer.model_validate(data)
    errors = [e for e in exc.value.errors() if e["type"] == "bool_for_number"]
    assert [tuple(p for p in e["loc"] if "[" not in str(p) or p == "[key]") for e in errors] == [loc]


def test_a_bool_member_and_untyped_values_still_take_booleans():
    got = _Outer.model_validate({"either": True, "inner": {"flag": True}, "plain": {"a": True}})
    assert got.either is True and got.inner.flag is True and got.plain == {"a": True}


def test_the_json_schema_is_pydantic_s_own():
    """The check adds no JSON Schema: the same fields on a plain ``BaseModel`` give the same
    schema (so ``kvsim schema`` is unchanged), and the scenario's schema still says
    ``integer`` / ``number`` where it did."""

    class Plain(BaseModel):
        x: float | None = None
        n: int = Field(1, ge=1)
        version: Literal[1, 2] = 1

    class Mine(ConfigModel):
        x: float | None = None
        n: int = Field(1, ge=1)
        version: Literal[1, 2] = 1

    plain, mine = Plain.model_json_schema(), Mine.model_json_schema()
    plain.pop("title"), mine.pop("title")
    assert mine == plain
    seed = json_schema()["properties"]["seed"]
    assert seed == {"default": 0, "minimum": 0, "title": "Seed", "type": "integer"}


# ----------------------------------------------------- a number or a string for a boolean
def test_a_number_for_a_boolean_in_a_scenario_is_one_line_with_its_line(run_cli, tmp_path):
    text = E20.read_text().replace("chunked_prefill: true", "chunked_prefill: 1")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    code, out, err = run_cli(["validate", str(scenario)])
    assert (code, out) == (2, "")
    assert err == (
        f"kvsim: error: {scenario}:{_line(text, '  chunked_prefill:')}: "
        "scheduler.chunked_prefill: Input should be a boolean (true or false), not a number "
        "(1)\n"
    )


@pytest.mark.parametrize(
    "value,shown",
    [("1", "a number (1)"), ("0", "a number (0)"), ("2", "a number (2)"),
     ("1.0", "a number (1.0)"), ('"yes"', "a string ('yes')"),
     ('"true"', "a string ('true')"), ("'off'", "a string ('off')")],
)  # fmt: skip
def test_a_number_or_a_string_for_a_boolean_in_a_set_is_refused(run_cli, value, shown):
    code, out, err = run_cli(["validate", str(E20), "--set", f"scheduler.chunked_prefill={value}"])
    assert (code, out) == (2, "")
    assert err == (
        "kvsim: error: --set scheduler.chunked_prefill: scheduler.chunked_prefill: Input "
        f"should be a boolean (true or false), not {shown}\n"
    )


@pytest.mark.parametrize("value,expected", [("true", True), ("false", False), ("yes", True),
                                            ("off", False)])  # fmt: skip
def test_yaml_booleans_still_fill_a_boolean_from_a_set(run_cli, value, expected):
    code, out, err = run_cli(["validate", str(E20), "--set", f"scheduler.chunked_prefill={value}"])
    assert (code, err) == (0, "") and out.startswith(f"{E20}: ok: ")
    loaded = load_scenario(str(E20), {"scheduler.chunked_prefill": expected, "engine.exact": True})
    assert loaded.scenario.scheduler.chunked_prefill is expected
    assert loaded.scenario.engine.exact is True


@pytest.mark.parametrize(
    "data,loc",
    [({"inner": {"flag": 1}}, ("inner", "flag")), ({"inner": {"flag": "yes"}}, ("inner", "flag")),
     ({"flags": [True, 0]}, ("flags", 1)), ({"maybe": "false"}, ("maybe",))],
)  # fmt: skip
def test_every_place_a_boolean_sits_refuses_a_number_or_a_string(data, loc):
    class Flags(_Outer):
        flags: list[bool] = []
        maybe: bool | None = None

    with pytest.raises(ValidationError) as exc:
        Flags.model_validate(data)
    errors = [e for e in exc.value.errors() if e["type"] == "bool_not_boolean"]
    assert [tuple(p for p in e["loc"] if "[" not in str(p)) for e in errors] == [loc]


def test_a_bool_or_int_union_still_takes_both():
    assert _Outer.model_validate({"either": 1}).either == 1
    assert _Outer.model_validate({"either": True}).either is True


def _bool_schemas(schema, path=()):
    """(path, wrapped) of every ``bool`` core schema under ``schema``."""
    if isinstance(schema, list | tuple):
        for s in schema:
            yield from _bool_schemas(s, path)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "bool":
        yield path, False
        return
    inner = schema.get("schema")
    if schema.get("metadata", {}).get(_WRAPPED) and isinstance(inner, dict) and inner.get(
        "type") == "bool":  # fmt: skip
        yield path, True
        return
    if schema.get("type") == "model":
        path = (*path, schema["cls"].__name__)
    fields = schema.get("fields")
    for name, field in fields.items() if isinstance(fields, dict) else ():
        yield from _bool_schemas(field, (*path, name))
    for key, value in schema.items():
        if key != "fields":
            yield from _bool_schemas(value, path)


def test_every_boolean_of_every_scenario_section_is_checked():
    """Every ``bool`` of the full scenario model (each section, each registered kind, the
    cluster section) is wrapped by ``ConfigModel``: none is left to pydantic's lax rule."""
    import sim.cluster.config  # noqa: F401  (the cluster section's models)

    model = scenario_model()
    model.model_rebuild(force=True)
    found = list(_bool_schemas(model.__pydantic_core_schema__))
    assert ("Scenario", "scheduler", "VllmV1Config", "chunked_prefill") in {p for p, _ in found}
    assert len(found) > 20
    assert [p for p, wrapped in found if not wrapped] == []


def test_the_json_schema_of_a_boolean_is_pydantic_s_own():
    class Plain(BaseModel):
        flag: bool = False
        maybe: bool | None = None

    class Mine(ConfigModel):
        flag: bool = False
        maybe: bool | None = None

    plain, mine = Plain.model_json_schema(), Mine.model_json_schema()
    plain.pop("title"), mine.pop("title")
    assert mine == plain
    assert json_schema()["$defs"]["VllmV1Config"]["properties"]["chunked_prefill"] == {
        "default": True, "title": "Chunked Prefill", "type": "boolean"}  # fmt: skip

"""The base of every config model a user's file fills: no boolean where a number is due,
and nothing but a boolean where a boolean is due.

Responsibility: ``ConfigModel``, the pydantic base of the scenario's sections, the
profiles, the calibration files, the workload fits, sweep and regression-suite files. In
lax mode pydantic takes ``true`` / ``false`` (YAML's ``yes``, ``on`` too) as 1 / 0 for an
``int``, a ``float`` or a numeric ``Literal`` (``seed: yes`` ran as seed 1, ``tp: true``
as TP 1); a ``ConfigModel`` refuses them with pydantic's own kind of error
(``bool_for_number``: "Input should be a valid integer, not a boolean (true)"), at the
item's location, so the usual ``file:line: field: message`` line names it. Conversely pydantic takes ``1`` /
``0`` and the strings ``"yes"``, ``"true"``, ``"on"``, ``"1"``, ... for a ``bool``
(``chunked_prefill: 1`` ran as true); a ``ConfigModel`` refuses a number or a string there
(``bool_not_boolean``: "Input should be a boolean (true or false), not a number (1)"). A
boolean in a YAML file is ``true`` / ``false`` (the safe loader of YAML 1.1 reads ``yes`` /
``no`` / ``on`` / ``off`` unquoted as booleans already), and so is a ``--set`` value.

Invariant: each number schema of the model's own fields (an ``int``, a ``float``, a
``Literal`` of numbers, wherever it sits: under ``| None``, in a list, a dict's keys or
values, a tuple, a union member, a default) is wrapped once in a before-validator that
refuses ``bool`` and hands every other value on unchanged, so what pydantic accepted
otherwise it still accepts, with the same value (``"3"``, ``1e9`` written as text, 16.0 for
an int). Each ``bool`` schema is wrapped likewise in a before-validator that refuses an
``int``, a ``float`` or a ``str`` and hands ``True`` / ``False`` (and any other value, which
pydantic's own ``bool`` refuses) on unchanged. A union with a ``bool`` member
(``bool | int``) still takes a boolean and a number (pydantic's smart union picks the exact
type). Nested models are left to their
own class (each ``ConfigModel`` wraps its own fields; a plug-in's plain ``BaseModel`` keeps
pydantic's rule). The JSON Schema is unchanged: a before-validator's schema is its inner
schema's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

#: the metadata key that marks a number or bool schema already wrapped (a schema is walked
#: again when a model's schema holds another's, or is rebuilt)
_WRAPPED = "kvsim_bool_for_number"
#: the keys under which a core schema holds one inner schema
_INNER = ("schema", "items_schema", "keys_schema", "values_schema", "lax_schema",
          "strict_schema", "json_schema", "python_schema", "return_schema")  # fmt: skip


def refuse_bool_for_numbers(schema: Any, owner: type | None = None) -> Any:
    """``schema`` (a pydantic core schema, changed in place and returned) with each number
    schema wrapped to refuse ``bool`` and each ``bool`` schema wrapped to refuse a number or
    a string; a ``model`` schema of a class other than ``owner``
    is left as it is (that class wraps its own fields, or keeps pydantic's rule)."""
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind == "model" and schema.get("cls") is not owner:
        return schema
    if kind == "function-before" and schema.get("metadata", {}).get(_WRAPPED):
        return schema
    if kind in ("int", "float") or (kind == "literal" and _numbers_only(schema["expected"])):
        return core_schema.no_info_before_validator_function(
            _refuser(schema), schema, metadata={_WRAPPED: True}
        )
    if kind == "bool":
        return core_schema.no_info_before_validator_function(
            _refuse_non_bool, schema, metadata={_WRAPPED: True}
        )
    for key in _INNER:
        inner = schema.get(key)
        if isinstance(inner, dict):
            schema[key] = refuse_bool_for_numbers(inner, owner)
        elif isinstance(inner, list):  # a tuple's positional items
            schema[key] = [refuse_bool_for_numbers(s, owner) for s in inner]
    fields = schema.get("fields")  # model-fields, typed-dict (a dict); dataclass-args (a list)
    for field in fields.values() if isinstance(fields, dict) else fields or ():
        field["schema"] = refuse_bool_for_numbers(field["schema"], owner)
    if kind == "union":
        schema["choices"] = [
            (refuse_bool_for_numbers(c[0], owner), c[1]) if isinstance(c, tuple)
            else refuse_bool_for_numbers(c, owner)
            for c in schema["choices"]
        ]  # fmt: skip
    elif kind == "tagged-union":
        schema["choices"] = {k: refuse_bool_for_numbers(c, owner) for k, c in schema["choices"].items()}
    elif kind == "chain":
        schema["steps"] = [refuse_bool_for_numbers(s, owner) for s in schema["steps"]]
    elif kind == "definitions":
        schema["definitions"] = [refuse_bool_for_numbers(d, owner) for d in schema["definitions"]]
    return schema


def _numbers_only(expected: list[Any]) -> bool:
    return bool(expected) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in expected
    )


def _refuser(schema: dict) -> Any:
    """The before-validator of one number schema: ``bool`` refused, anything else as is."""
    kind = schema["type"]
    if kind == "int":
        wanted = "a valid integer"
    elif kind == "float":
        wanted = "a valid number"
    else:
        wanted = " or ".join(repr(v) for v in schema["expected"])

    def refuse_bool(value: Any) -> Any:
        if value is True or value is False:
            raise PydanticCustomError(
                "bool_for_number",
                "Input should be {wanted}, not a boolean ({value})",
                {"wanted": wanted, "value": "true" if value else "false"},
            )
        return value

    return refuse_bool


def _refuse_non_bool(value: Any) -> Any:
    """The before-validator of a ``bool`` schema: a number or a string refused (pydantic
    would read ``1``, ``0``, ``"yes"``, ``"off"`` as a boolean), anything else as is."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        shown = f"a number ({value!r})" if abs(value) < 1e15 else "a number"
    elif isinstance(value, str):
        shown = f"a string ({value!r})" if len(value) <= 40 else "a string"
    else:
        return value
    raise PydanticCustomError(
        "bool_not_boolean", "Input should be a boolean (true or false), not {shown}",
        {"shown": shown},
    )


class ConfigModel(BaseModel):
    """A pydantic model that refuses a boolean for a number and a number or a string for a
    boolean (see the module docstring);
    set ``model_config`` as any ``BaseModel``."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[BaseModel], handler: GetCoreSchemaHandler, /
    ) -> core_schema.CoreSchema:
        return refuse_bool_for_numbers(handler(source), cls)

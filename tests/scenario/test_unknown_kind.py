"""An unknown ``kind`` is the project's one line: file, line, field and the valid kinds
(``sim.yamlio.validation_message``, which ``sim.scenario.load`` and
``format_validation_error`` both word errors with).

Before: pydantic's own wording, ``allocator.kind: Input tag 'pagd' found using 'kind' does
not match any of the expected tags: 'buddy', 'contiguous', ...`` (a tagged union), or
``scheduler.kind: Input should be 'vllm_v1'`` (a section of one registered kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.scenario import load_scenario
from sim.yamlio import validation_message

ROOT = Path(__file__).resolve().parents[2]
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"

ALLOCATORS = "buddy, contiguous, paged, paged_hash, radix, static"
POLICIES = "break_even, hints, hold, min_waste, offload_host, offload_nvme, recompute, ttl_pin"
WORKLOADS = ("agent, agent_trace, chat, claude_code, coding_agent, function_calling, "
             "human_in_loop, interactive_coding_agent, mix, mooncake, multi_agent_team, "
             "requests, tree_search, vllm_requests")  # fmt: skip


def _line(text: str, starts: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(starts))


@pytest.mark.parametrize(
    "old,new,field,valid",
    [
        ("  kind: paged", "  kind: pagd", "allocator.kind", ALLOCATORS),
        ("  kind: vllm_v1", "  kind: vllm", "scheduler.kind", "vllm_v1"),
        ("  kind: requests", "  kind: reqests", "workload.kind", WORKLOADS),
        ("pause_policy:", "pause_policy:\n  kind: hodl\npause_policy_was:", "pause_policy.kind",
         POLICIES),
    ],
)  # fmt: skip
def test_an_unknown_kind_in_a_file_names_its_line_field_and_valid_kinds(
    run_cli, tmp_path, old, new, field, valid
):
    text = E20.read_text()
    if old == "pause_policy:":  # E20 has no pause_policy section: add one
        text += "pause_policy:\n  kind: hodl\n"
    else:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    tag = new.split("kind: ")[1].split("\n")[0]
    code, out, err = run_cli(["validate", str(scenario)])
    assert (code, out) == (2, "")
    line = _line(text, f"  kind: {tag}")
    assert err == f"kvsim: error: {scenario}:{line}: {field}: unknown kind {tag!r}; valid: {valid}\n"


@pytest.mark.parametrize(
    "item,field,valid",
    [
        ("allocator.kind=pagd", "allocator.kind", ALLOCATORS),
        ("scheduler.kind=vllm", "scheduler.kind", "vllm_v1"),
        ("workload.kind=reqests", "workload.kind", WORKLOADS),
        ("pause_policy.kind=hodl", "pause_policy.kind", POLICIES),
    ],
)
def test_an_unknown_kind_in_a_set_is_one_line(run_cli, item, field, valid):
    tag = item.split("=")[1]
    code, out, err = run_cli(["validate", str(E20), "--set", item])
    assert (code, out) == (2, "")
    assert err == (f"kvsim: error: --set {field}: {field}: unknown kind {tag!r}; valid: {valid}"
                   "\n")  # fmt: skip


def test_a_nested_kind_and_a_mix_component_s_kind_are_worded_alike(tmp_path):
    from sim.errors import ConfigError

    doc = {"model": "chapter-70b", "hardware": {"accelerator": "e20-accelerator"},
           "workload": {"kind": "mix", "components": [
               {"kind": "chat", "num_requests": 1, "arrival": {"kind": "poison", "rate_per_s": 1},
                "lengths": {"prompt": 8, "output": 2}}]}}  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        load_scenario(doc)
    problems = [str(p) for p in exc.value.problems]
    assert ("<scenario>: workload.components.0.arrival.kind: unknown kind 'poison'; valid: "
            "closed_loop, diurnal, fixed, gamma, poisson, trace") in problems


def test_the_message_of_other_errors_is_pydantic_s_and_a_long_name_is_cut():
    assert validation_message({"type": "literal_error", "loc": ("attention_mask",),
                               "input": "x", "msg": "Input should be 'causal' or 'square'",
                               "ctx": {"expected": "'causal' or 'square'"}}) == (
        "Input should be 'causal' or 'square'")  # fmt: skip
    assert validation_message({"type": "literal_error", "loc": ("a", "kind"), "input": "x",
                               "msg": "?", "ctx": {"expected": "'b' or 'a'"}}) == (
        "unknown kind 'x'; valid: a, b")  # fmt: skip
    long = "k" * 500
    got = validation_message({"type": "union_tag_invalid", "loc": ("allocator",), "msg": "?",
                              "ctx": {"discriminator": "'kind'", "tag": long,
                                      "expected_tags": "'paged'"}})  # fmt: skip
    assert got == f"unknown kind {'k' * 80!r}...; valid: paged"

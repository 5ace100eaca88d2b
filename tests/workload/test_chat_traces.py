"""``chat`` with the shipped Azure traces by name (conversation or code), their timestamps as
arrivals, and the ``workload`` column."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.run import run_scenario
from sim.workload import traces
from sim.workload.config import ChatWorkload

ROOT = Path(__file__).resolve().parents[2]
CHAT = str(ROOT / "workloads/chat_azure.yaml")
DATA = ROOT / "workloads/data/azure_llm_2023"


def test_the_code_trace_ships_with_its_licence_beside_the_conversation_trace():
    code = DATA / "AzureLLMInferenceTrace_code.csv"
    assert code.is_file() and (DATA / "LICENSE").is_file()
    assert code.read_text().count("\n") == 8819  # header + 8,819 rows, no final newline
    assert "AzureLLMInferenceTrace_code.csv" in (DATA / "README.md").read_text()
    assert traces.shipped_trace("azure_code") == code


def test_chat_reads_the_code_trace_by_name_with_its_timestamps():
    lengths = {"kind": "trace", "trace": "azure_code"}
    res = run_scenario(
        CHAT,
        **{
            "workload.num_requests": 4,
            "workload.lengths": lengths,
            "workload.arrival": {"kind": "trace"},  # default path: the lengths trace
            "engine.check_invariants": True,
        },
    )
    req = res.requests
    assert req.prompt_tokens.tolist() == [4808, 3180, 110, 7433]
    assert req.max_output_tokens.tolist() == [10, 8, 27, 14]
    # 18:17:03.9799600, 04.0319600, 04.0781490, 04.1206440
    assert req.arrival_s.tolist() == pytest.approx([0.0, 0.052, 0.098189, 0.140684], abs=1e-6)
    assert set(req.workload) == {"chat"} and set(res.trajectories.workload) == {"chat"}


def test_a_named_trace_and_a_path_are_one_or_the_other():
    base = {"kind": "chat", "num_requests": 1, "arrival": {"kind": "poisson", "rate_per_s": 1}}
    for lengths in ({"kind": "trace"}, {"kind": "trace", "trace": "azure_code", "path": "x.csv"}):
        with pytest.raises(ValidationError, match="give path"):
            ChatWorkload.model_validate({**base, "lengths": lengths})
    with pytest.raises(ValidationError, match="'azure_conv' or 'azure_code'"):
        ChatWorkload.model_validate({**base, "lengths": {"kind": "trace", "trace": "sharegpt"}})
    # the old form keeps working, and the dump (config.resolved.yaml) validates again
    cfg = ChatWorkload.model_validate({**base, "lengths": {"kind": "trace", "path": "x.csv"}})
    assert ChatWorkload.model_validate(cfg.model_dump(mode="json")) == cfg


def test_a_shipped_trace_missing_from_an_install_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setattr(traces, "DATA_DIR", tmp_path)
    with pytest.raises(ConfigError, match="workload.lengths.trace: the shipped trace 'azure_code'"):
        run_scenario(CHAT, **{"workload.lengths": {"kind": "trace", "trace": "azure_code"}})

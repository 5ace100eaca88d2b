"""``kvsim plan --speculative-method``: the flags, the additive JSON keys, the text line,
one-line refusals (h114; the arithmetic is tests/sizing/test_plan_speculative.py's)."""

import json

import pytest

BASE = "kvsim plan --model llama-3.1-8b --gpu h200-141gb --num-gpus 1 --context 8192"


def test_json_gets_additive_keys_and_the_drafter(run_cli):
    code, out, _ = run_cli(BASE + " --speculative-method eagle --num-speculative-tokens 3 --json")
    assert code == 0
    data = json.loads(out)
    assert data["speculative_method"] == "eagle" and data["num_speculative_tokens"] == 3
    assert data["spec_draft_kv_bytes_per_token"] == 2 * 8 * 128 * 2
    assert data["kv_bytes_per_token"] == 131072 + 4096
    assert data["draft_weights_bytes_per_gpu"] == pytest.approx(8.03e9 * 2 / 32)
    assert data["spec_lookahead_tokens"] == 3 and data["spec_grouped_draft_layers"] == 1
    (ctx,) = data["contexts"]
    assert ctx["max_concurrent"] == 107  # tests/sizing/test_plan_speculative.py, by hand
    assert ctx["spec_draft_kv_bytes_per_trajectory"] == 8195 * 4096


def test_without_the_flags_the_new_keys_are_empty(run_cli):
    code, out, _ = run_cli(BASE + " --json")
    data = json.loads(out)
    assert code == 0 and data["speculative_method"] is None and data["draft_model"] is None
    assert data["spec_draft_kv_bytes_per_token"] == data["draft_weights_bytes_per_gpu"] == 0
    assert data["kv_bytes_per_token"] == 131072 and data["contexts"][0]["max_concurrent"] == 111


def test_text_output_has_a_drafter_line(run_cli):
    code, out, _ = run_cli(BASE + " --speculative-method draft_model --draft-model llama-3.1-8b "
                           "--num-speculative-tokens 2")  # fmt: skip
    assert code == 0
    assert "speculative drafter" in out and "draft_model (llama-3.1-8b), k 2" in out


@pytest.mark.parametrize(("flags", "message"), [
    ("--speculative-method eagle", "--speculative-method eagle needs --num-speculative-tokens"),
    ("--speculative-method draft_model --num-speculative-tokens 2", "needs --draft-model"),
    ("--speculative-method draft_model --num-speculative-tokens 2 --draft-model nope",
     "--draft-model: unknown model 'nope'"),
    ("--speculative-method mtp --num-speculative-tokens 2 --draft-model llama-3.1-8b",
     "--draft-model is only for --speculative-method draft_model, not mtp"),
    ("--speculative-method eagle --num-speculative-tokens 2 --pp 2 --num-gpus 2",
     "speculative decoding with pp > 1 is not modelled (use --pp 1)"),
])  # fmt: skip
def test_refusals_are_one_line(run_cli, flags, message):
    cmd = BASE.replace("--num-gpus 1", "") if "--num-gpus" in flags else BASE
    code, out, err = run_cli(f"{cmd} {flags}")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err

"""``kvsim calibrate --llmservingsim DIR``: LLMServingSim's kernel tables as a calibration,
with the held-out error of their interpolation.

The fixture is a small folder in LLMServingSim's layout made here (one GPU, Llama-3.1-8B at
TP 1): every dense operator is linear in the token count, ``a + b x tokens`` microseconds,
so the held-out error has a closed form: a range inside the curve (65-511 tokens) is
interpolated exactly (error 0), a range above its end is extended along the last slope
(exact again), and a range below its start is clamped to the first point left (error
``(a + 128 b) / (a + n b) - 1`` at ``n`` tokens, the smallest point above 64 being 128).
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from sim.cost.calibration import load_calibration
from sim.cost.llmservingsim import LLAMA_OPS, SEQUENCE_OPS, STEP_OPS

TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
#: operator -> (a, b): a + b x tokens microseconds
LINE = {op: (2.0 + i, 0.01 * (i + 1)) for i, op in enumerate([*LLAMA_OPS, *STEP_OPS])}
META = {
    "vllm_version": "0.19.0", "cuda_version": "12.8", "gpu": "NVIDIA GeForce RTX 4090",
    "profiled_at": "2026-08-17T19:43:32+00:00", "model": "meta-llama/Llama-3.1-8B",
}  # fmt: skip


@pytest.fixture
def data(tmp_path):
    """kernels/<GPU>: one model, TP 1, linear dense operators, a complete small grid."""
    gpu = tmp_path / "RTX4090"
    tp = gpu / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1"
    tp.mkdir(parents=True)
    (tp.parent / "meta.yaml").write_text(yaml.safe_dump(META))
    dense = ["layer,tokens,time_us"]
    dense += [f"{op},{n},{a + b * n}" for op, (a, b) in LINE.items() for n in TOKENS]
    (tp / "dense.csv").write_text("\n".join(dense) + "\n")
    seq = ["layer,sequences,time_us"] + [f"{op},{s},{5.0 + s}" for op in SEQUENCE_OPS for s in (1, 2, 4)]
    (tp / "per_sequence.csv").write_text("\n".join(seq) + "\n")
    attn = ["prefill_chunk,kv_prefill,n_decode,kv_decode,time_us"]
    attn += [f"{pc},{kp},{nd},{kd},{3.0 + pc + kp / 4 + nd * (1 + kd / 8)}"
             for pc in (0, 16) for kp in (0, 16) for nd in (0, 1) for kd in (0, 16)]  # fmt: skip
    (tp / "attention.csv").write_text("\n".join(attn) + "\n")
    return gpu


def _expected_errors() -> np.ndarray:
    """From the closed form (module docstring), per (tokens <= 64, operator group)."""
    groups = {"linear": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
              "elementwise": ["layernorm", "rotary_emb", "act_fn"], "embedding": STEP_OPS}  # fmt: skip
    counts = {**LLAMA_OPS, **dict.fromkeys(STEP_OPS, 1)}
    out = []
    for n in [t for t in TOKENS if t <= 64]:
        for ops in groups.values():
            meas = sum(counts[o] * (LINE[o][0] + LINE[o][1] * n) for o in ops)
            pred = sum(counts[o] * (LINE[o][0] + LINE[o][1] * 128) for o in ops)
            out.append(pred / meas - 1.0)
    return np.array(out)


def test_cli_writes_tables_and_their_held_out_error(run_cli, data, tmp_path):
    out = tmp_path / "c.yaml"
    code, text, err = run_cli(["calibrate", "--llmservingsim", str(data), "--cross-validate",
                               "--overhead-s", "0.0005", "--out", str(out)])  # fmt: skip
    assert code == 0, err
    assert "tables of llama-3.1-8b" in text and "leave_one_token_range_out: median" in text
    cal = load_calibration(str(out))
    assert cal.step_overhead_s == 0.0005
    assert [name for name, _ in cal.kernel_tables] == ["llama-3.1-8b"]  # they load and build
    cv = cal.cross_validation
    assert cv.leave_one_model_out is None  # kernel tables price only the models measured
    split = cv.leave_one_token_range_out
    expected = _expected_errors()
    inside = 3 * len([t for t in TOKENS if 65 <= t <= 511])
    above = 3 * len([t for t in TOKENS if t >= 512])
    # the two exact ranges add zeros: the median and the worst over all points
    every = np.concatenate([expected, np.zeros(inside + above)])
    assert split.points == every.size
    assert split.median_rel_error == pytest.approx(np.median(np.abs(every)), rel=1e-5)
    assert split.worst_rel_error == pytest.approx(expected[np.argmax(np.abs(expected))], rel=1e-5)
    assert cv.domain.accelerator == "rtx-4090-24gb" and cv.domain.models == ["llama-3.1-8b"]
    assert cv.domain.max_tokens == 2048 and cv.domain.tp == [1]
    assert "# Remake: kvsim calibrate --llmservingsim RTX4090" in out.read_text()


def test_the_script_wrapper_writes_the_same_tables(run_cli, data, tmp_path):
    import llmservingsim_import

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert run_cli(["calibrate", "--llmservingsim", str(data), "--out", str(a)])[0] == 0
    assert llmservingsim_import.main([str(data), "--accelerator", "rtx-4090-24gb", "--out", str(b)]) == 0
    ya, yb = yaml.safe_load(a.read_text()), yaml.safe_load(b.read_text())
    assert ya["kernel_tables"] == yb["kernel_tables"] and "cross_validation" not in ya


@pytest.mark.parametrize("change,args,needle", [
    (None, ["--vidur", "a100"], "--llmservingsim DIR takes no"),
    (None, ["--accelerator", "h100-sxm-80gb"], "no reference figures (valid: rtx-4090-24gb"),
    (None, ["--overhead-s", "-1"], "--overhead-s -1.0: expected seconds >= 0"),
    ("no_meta", [], "no */*/bf16/meta.yaml"),
    ("bad_csv", [], "dense.csv: no column 'time_us'"),
    ("gpu", [], "GPU 'NVIDIA H200' has no accelerator profile here; name one with --accelerator"),
    ("empty_attention", [], "malformed LLMServingSim tables: max() arg is an empty sequence"),
    ("no_gpu_field", [], "meta.yaml: a meta.yaml with keys gpu, model"),
])  # fmt: skip
def test_bad_input_is_one_line(run_cli, data, tmp_path, change, args, needle):
    tp = data / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1"
    if change == "no_meta":
        (tp.parent / "meta.yaml").unlink()
    elif change == "bad_csv":
        (tp / "dense.csv").write_text("layer,tokens,us\nqkv_proj,1,2.0\n")
    elif change == "gpu":
        (tp.parent / "meta.yaml").write_text(yaml.safe_dump({**META, "gpu": "NVIDIA H200"}))
    elif change == "empty_attention":
        (tp / "attention.csv").write_text(",".join(("prefill_chunk", "kv_prefill", "n_decode",
                                                    "kv_decode", "time_us")) + "\n")  # fmt: skip
    elif change == "no_gpu_field":
        (tp.parent / "meta.yaml").write_text(yaml.safe_dump({k: v for k, v in META.items() if k != "gpu"}))
    out = tmp_path / "x.yaml"
    code, _, err = run_cli(["calibrate", "--llmservingsim", str(data), *args, "--out", str(out)])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_not_a_folder_and_overhead_alone_are_one_line(run_cli, tmp_path):
    out = tmp_path / "x.yaml"
    code, _, err = run_cli(["calibrate", "--llmservingsim", str(tmp_path / "none"), "--out", str(out)])
    assert code == 2 and "not a folder" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["calibrate", "--overhead-s", "0.1", "--out", str(out)])
    assert code == 2 and "--overhead-s goes with --llmservingsim DIR" in err


def test_a_stray_tp_folder_is_ignored_and_accelerator_names_an_unknown_gpu(run_cli, data, tmp_path):
    """``tp_old`` beside ``tp1`` is not a table folder; a GPU with no profile here is priced
    against the one ``--accelerator`` names, as the refusal without it says to do."""
    (data / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp_old").mkdir()
    meta = data / "meta-llama" / "Llama-3.1-8B" / "bf16" / "meta.yaml"
    meta.write_text(yaml.safe_dump({**META, "gpu": "NVIDIA GeForce RTX 4090 D"}))
    out = tmp_path / "c.yaml"
    code, _, err = run_cli(["calibrate", "--llmservingsim", str(data), "--accelerator",
                            "rtx-4090-24gb", "--out", str(out)])  # fmt: skip
    assert code == 0, err
    cal = yaml.safe_load(out.read_text())
    assert list(cal["kernel_tables"]["llama-3.1-8b"]["by_tp"]) == [1]
    assert cal["device"] == "NVIDIA GeForce RTX 4090 D"


@pytest.mark.parametrize("change,message", [
    ("duplicate_key", "{meta}:3: gpu: duplicate key 'gpu' (first on line 1, again on line 3)"),
    ("oversized", "{meta}: file is 16,777,217 bytes; the limit is 16,777,216"),
    ("alias_bomb", "{meta}:6: YAML document expands to more than 200,000 nodes (aliases "
                   "expanded); refused as an alias bomb or an oversized file"),
])  # fmt: skip
def test_a_meta_yaml_goes_through_the_bounded_loader(run_cli, data, tmp_path, change, message):
    """``meta.yaml`` is read by ``sim.yamlio.load_yaml`` (before: ``yaml.safe_load`` of the
    whole text, which kept the last of two ``gpu`` keys, read a file of any size and
    expanded an alias bomb)."""
    meta = data / "meta-llama" / "Llama-3.1-8B" / "bf16" / "meta.yaml"
    if change == "duplicate_key":
        meta.write_text("gpu: NVIDIA H200\n" + yaml.safe_dump(META))
    elif change == "oversized":
        text = yaml.safe_dump(META)  # ASCII: one byte a character; then 1 byte past 16 MiB
        meta.write_text(text + "#" * (16 * 1024 * 1024 - len(text)) + "\n")
    else:
        bomb = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcd", "bcde", strict=True))
        meta.write_text("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\n" + bomb + "f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n")
    out = tmp_path / "x.yaml"
    code, stdout, err = run_cli(["calibrate", "--llmservingsim", str(data), "--out", str(out)])
    assert (code, stdout) == (2, "")
    assert err == "kvsim: error: " + message.format(meta=meta) + "\n"
    assert not out.exists()


@pytest.mark.parametrize("change,message", [
    ("oversized", "{csv}: file is 16,777,217 bytes; the limit is 16,777,216"),
    ("device", "{csv}: not a regular file (a device or socket)"),
    ("folder", "{csv}: not a regular file (a folder)"),
])  # fmt: skip
def test_a_table_is_read_within_the_file_size_bound(run_cli, data, tmp_path, change, message):
    """The CSV tables go through ``sim.yamlio.read_bytes_bounded`` (the bound of every user
    file, ``MAX_FILE_BYTES``) before pandas parses them (before: ``pd.read_csv`` of a path
    read a file of any size, and an ``attention.csv`` linked to ``/dev/zero`` grew to
    3.6 GB in 30 s and never ended)."""
    table = data / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1" / "attention.csv"
    if change == "oversized":
        text = table.read_text()  # ASCII: one byte a character; then 1 byte past 16 MiB
        table.write_text(text + "0" * (16 * 1024 * 1024 - len(text)) + "\n")
    elif change == "device":
        table.unlink()
        table.symlink_to("/dev/zero")
    else:
        table.unlink()
        table.mkdir()
    out = tmp_path / "x.yaml"
    code, stdout, err = run_cli(["calibrate", "--llmservingsim", str(data), "--out", str(out)])
    assert (code, stdout) == (2, "")
    assert err == "kvsim: error: " + message.format(csv=table) + "\n"
    assert not out.exists()

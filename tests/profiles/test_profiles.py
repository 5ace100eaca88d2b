"""Profiles: every shipped file validates; user folders shadow; bad files are one line."""

import subprocess
import sys

import pytest

from sim.errors import ConfigError, KvsimError, UnknownNameError
from sim.profiles import available, load_accelerator, load_model, load_node, load_profile
from sim.units import GiB


@pytest.mark.parametrize("kind", ["accelerator", "model", "node"])
def test_every_shipped_profile_loads(kind):
    names = available(kind)
    assert names
    for name in names:
        prof = load_profile(kind, name)
        assert prof.name == name and name == name.lower() and " " not in name


def test_nodes_name_existing_accelerators():
    for name in available("node"):
        load_accelerator(load_node(name).accelerator)


def test_h100_memory_is_80_gib_and_vendor_unit_stated():
    gpu = load_accelerator("h100-sxm-80gb")
    assert gpu.memory_bytes == 80 * GiB and gpu.memory_vendor_unit == "GiB"
    assert gpu.host_link.usable_bw_bytes_per_s == 54e9


def test_moe_active_params():
    m = load_model("mixtral-8x7b")
    assert m.active_params == 12.9e9 < m.params_total


def _write(tmp_path, text, name="bad-model"):
    d = tmp_path / "models"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(text)
    return tmp_path


def test_user_folder_shadows_shipped(tmp_path):
    src = (available("model")["llama-3-8b"]).read_text().replace("num_layers: 32", "num_layers: 40")
    _write(tmp_path, src, "llama-3-8b")
    assert load_model("llama-3-8b", [tmp_path]).num_layers == 40


def test_env_var_folder(tmp_path, monkeypatch):
    src = (available("model")["llama-3-8b"]).read_text()
    _write(tmp_path, src, "my-model")
    monkeypatch.setenv("KVSIM_PROFILES", str(tmp_path))
    assert load_model("my-model").num_layers == 32


@pytest.mark.parametrize(
    "text,needle",
    [
        ("attention: gqa\nnum_layers: [\n", "bad-model.yaml:3: invalid YAML"),
        (
            "attention: gqa\nnum_layers: -4\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 64\n"
            "d_model: 512\nparams_total: 1e9\n",
            "bad-model.yaml:2: num_layers: Input should be greater than 0",
        ),
        (
            "attention: gqb\nnum_layers: 4\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 64\n"
            "d_model: 512\nparams_total: 1e9\n",
            "bad-model.yaml:1: attention: Input should be 'mha', 'gqa' or 'mla'",
        ),
        (
            "attention: gqa\nnum_layers: 4\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 64\n"
            "d_model: 512\nparams_total: 1e9\nlayerz: 3\n",
            "bad-model.yaml:8: layerz: unknown field",
        ),
        ("- a\n- b\n", "a profile must be a mapping"),
        (
            "attention: gqa\nnum_layers: 4\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 64\n"
            "d_model: 512\nparams_total: 1e9\nexpert_weight_bits: 4.25\n",
            "expert_weight_bits needs routed experts (num_experts)",
        ),
    ],
)
def test_bad_profile_is_one_clear_line(tmp_path, text, needle):
    _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_model("bad-model", [tmp_path])
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_bad_profile_through_cli_is_one_line(tmp_path, run_cli):
    _write(tmp_path, "attention: gqa\nnum_layers: four\n")
    code, _, err = run_cli(
        f"kvsim plan --model bad-model --gpu a100-80gb --num-gpus 1 "
        f"--context 10 --profiles {tmp_path}"
    )
    assert code == 2 and "bad-model.yaml:2: num_layers:" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_unknown_name_lists_choices():
    with pytest.raises(UnknownNameError) as err:
        load_model("gpt-5")
    assert "valid: " in str(err.value) and "llama-3-70b" in str(err.value)


def test_missing_profiles_folder(tmp_path):
    with pytest.raises(KvsimError) as err:
        load_model("llama-3-8b", [tmp_path / "nope"])
    assert str(err.value) == f"profiles folder {str(tmp_path / 'nope')!r} does not exist"


def test_a_profiles_folder_that_is_a_file_is_named_so(tmp_path):
    """``--profiles afile``: it exists, so "does not exist" misled."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(KvsimError) as err:
        load_model("llama-3-8b", [afile])
    assert str(err.value) == f"profiles folder {str(afile)!r} is not a folder"


def test_import_sim_does_not_import_torch():
    code = (
        "import sys, sim, sim.sizing, sim.profiles, sim.cli, sim.cost; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_gpt_oss_weights_are_the_checkpoints_mxfp4_experts_and_bf16_rest():
    """config.json's quantization_config (mxfp4; attention, router, embeddings and LM head
    not converted): the routed experts at 4 + 8 / 32 = 4.25 bits, the rest bf16.
    gpt-oss-120b: 36 layers x 128 experts x 3 x 2,880 x 2,880 = 114,661,785,600 expert
    parameters -> 60,914,073,600 B; 116.8e9 - that = 2,138,214,400 others x 2 = 4,276,428,800 B;
    65,190,502,400 B in all (vLLM logs 64.38 GiB loaded on one H100, vllm#33155, its
    activations' buffers included). gpt-oss-20b: 24 x 32 x 3 x 2,880^2 = 19,110,297,600 ->
    10,152,345,600 B, (20.9e9 - that) x 2 = 3,579,404,800 B: 13,731,750,400 B."""
    big, small = load_model("gpt-oss-120b"), load_model("gpt-oss-20b")
    assert big.routed_expert_params == 114_661_785_600
    assert big.weights_bytes == 65_190_502_400 >= 64e9
    assert small.routed_expert_params == 19_110_297_600
    assert small.weights_bytes == 13_731_750_400
    dense = load_model("llama-3.1-8b")  # no expert format: every parameter at weight_dtype
    assert dense.weights_bytes == 8.03e9 * 2

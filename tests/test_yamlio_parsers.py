"""``sim.yamlio`` reads kvsim's own files (``shipped=True``: profiles, calibrations) with
libyaml's scanner when PyYAML has it (in a checkout, a file of ``hardware_profiles/``
while its text is the committed one: ``committed_sha256``), and every other file with PyYAML's
pure loader.

libyaml gives the same data and lines for every file kvsim ships (checked here, so a
shipped file that parses otherwise fails CI); a shipped file with a problem is parsed
again by the pure loader, which words it. On malformed text libyaml is not PyYAML's twin
(it accepts ``a\\t`` and ``|#``; hypothesis found both), which is why user files stay on
the pure loader."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

import sim.yamlio as yamlio
from sim.cost.calibration import load_calibration
from sim.errors import ConfigError
from sim.profiles.registry import builtin_profiles_dir, committed_sha256, is_shipped

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")


def _both(path: Path) -> tuple:
    text = path.read_text(encoding="utf-8")
    fast = yamlio._parse(yamlio._LibyamlLoader, text, str(path), yamlio.MAX_NODES)
    return fast, yamlio._parse(yamlio._BoundedLoader, text, str(path), yamlio.MAX_NODES)


def test_every_shipped_file_parses_alike_with_libyaml():
    shipped = sorted(builtin_profiles_dir().rglob("*.yaml"))  # what a wheel ships
    assert len(shipped) > 20
    for path in shipped:
        fast, pure = _both(path)
        assert fast == pure, path


def test_the_other_yaml_files_of_the_repository_parse_alike_too():
    """Not required (they are read by the pure loader), but a wider check of the two."""
    for d in ("workloads", "benchmarks", "tests"):
        for path in sorted((ROOT / d).rglob("*.y*ml")):
            fast, pure = _both(path)
            assert fast == pure, path


def test_only_an_installed_kvsims_own_files_count_as_shipped(tmp_path, monkeypatch):
    from sim.profiles import registry

    model = builtin_profiles_dir() / "models" / "llama-3.1-8b.yaml"
    if registry._packaged_dir() is None:  # a checkout: its files as committed
        assert not is_shipped(model)
        assert committed_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    # an installed wheel's sim/_profiles (here: the same files standing in for it)
    folder = builtin_profiles_dir()
    monkeypatch.setattr(registry, "_packaged_dir", lambda: folder)
    assert is_shipped(model)
    assert not is_shipped(tmp_path / "models" / "llama-3.1-8b.yaml")
    assert not is_shipped(ROOT / "workloads" / "seed_chunked_prefill.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\na: 2\n",  # a repeated key: both lines named
        "a: [1, 2\n",  # a syntax error
        "a: *nope\n",  # an undefined alias
        "a: &x [*x]\n",  # an alias inside the node it names
        "a: 2024-13-45\n",  # a value the safe constructor cannot build
        "a: \x07\n",  # a control character
        "a: " + "[" * 70 + "]" * 70 + "\n",  # nested too deeply
        "a: !!python/object:os.system x\n",  # a tag the safe loader refuses
        "--- 1\n--- 2\n",  # two documents
    ],
)
def test_a_problem_in_a_shipped_file_is_worded_by_the_pure_loader(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as pure:
        yamlio.load_yaml(path)
    with pytest.raises(ConfigError) as shipped:
        yamlio.load_yaml(path, shipped=True)
    assert str(shipped.value) == str(pure.value)


def test_what_libyaml_accepts_and_pyyaml_refuses_stays_refused_in_user_files(tmp_path):
    for i, (text, libyaml_reads) in enumerate((("a\t", "a"), ("|#", ""))):
        path = tmp_path / f"odd{i}.yaml"
        path.write_text(text, encoding="utf-8")
        assert yamlio.load_yaml(path, shipped=True) == (libyaml_reads, {})
        with pytest.raises(ConfigError, match="invalid YAML"):
            yamlio.load_yaml(path)


def test_a_shipped_calibration_loads_as_with_the_pure_loader(monkeypatch):
    fast = load_calibration("h100-sxm-80gb-vidur")
    monkeypatch.setattr(yamlio, "_SHIPPED_LOADERS", ())
    import sim.cost.calibration as calibration

    monkeypatch.setattr(calibration, "_LOADED", {})  # no cached load
    assert load_calibration("h100-sxm-80gb-vidur") == fast


CHECKOUT_PROFILES = ROOT / "hardware_profiles"


@pytest.mark.skipif(not CHECKOUT_PROFILES.is_dir(), reason="not a checkout")
def test_the_checkout_s_manifest_is_current():
    """``hardware_profiles/SHA256SUMS`` holds every shipped file's SHA-256 as committed,
    and nothing else: the texts CI parsed both ways alike (the test above), which a
    checkout reads with libyaml (``committed_sha256``)."""
    assert (CHECKOUT_PROFILES / "SHA256SUMS").is_file(), "hardware_profiles/SHA256SUMS is missing"
    listed = {}
    for line in (CHECKOUT_PROFILES / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    files = {p.relative_to(CHECKOUT_PROFILES).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in CHECKOUT_PROFILES.rglob("*.yaml")}  # fmt: skip
    assert listed == files, (
        "hardware_profiles/SHA256SUMS is out of date: in hardware_profiles/, run "
        "find . -name '*.yaml' -printf '%P\\n' | sort | xargs sha256sum > SHA256SUMS "
        "(this file's tests then check that every file listed parses alike both ways)")


def test_a_checkout_file_counts_as_shipped_only_with_its_committed_text(tmp_path, monkeypatch):
    """A checkout (no packaged profiles): a file of ``hardware_profiles/`` is read with
    libyaml while its text has the manifest's digest, by the pure loader once edited (or
    when it is not listed, or there is no manifest); a file elsewhere never counts."""
    from sim.profiles import registry

    folder = tmp_path / "hardware_profiles"
    shutil.copytree(CHECKOUT_PROFILES / "models", folder / "models")
    odd = "a\t"  # libyaml reads "a"; PyYAML refuses it
    (folder / "models" / "odd.yaml").write_text(odd, encoding="utf-8")
    digest = hashlib.sha256(odd.encode()).hexdigest()
    (folder / "SHA256SUMS").write_text(f"{digest}  models/odd.yaml\n", encoding="utf-8")
    monkeypatch.setattr(registry, "_packaged_dir", lambda: None)
    monkeypatch.setattr(registry, "_CHECKOUT_PROFILES_DIR", folder)
    registry._manifest.cache_clear()
    try:
        path = folder / "models" / "odd.yaml"
        assert committed_sha256(path) == digest
        assert registry.load_shipped_yaml(path) == ("a", {})  # libyaml
        path.write_text(odd + " ", encoding="utf-8")  # edited: the user's now
        with pytest.raises(ConfigError, match="invalid YAML"):
            registry.load_shipped_yaml(path)
        other = folder / "models" / "llama-3.1-8b.yaml"  # not listed
        assert committed_sha256(other) is None
        outside = tmp_path / "odd.yaml"
        outside.write_text(odd, encoding="utf-8")
        assert committed_sha256(outside) is None
        with pytest.raises(ConfigError, match="invalid YAML"):
            registry.load_shipped_yaml(outside)
        (folder / "SHA256SUMS").unlink()
        registry._manifest.cache_clear()
        path.write_text(odd, encoding="utf-8")
        assert committed_sha256(path) is None
    finally:
        registry._manifest.cache_clear()


# ------------------------------------------------------------------ the shipped workload fits
def test_the_shipped_fits_manifest_is_current_and_each_fit_parses_alike(tmp_path):
    """``sim/workload/fitted/SHA256SUMS`` lists every shipped fit with its SHA-256 (what
    ``write_manifest`` writes for the folder as it is), and each listed text parses alike
    both ways: the texts a run reads with libyaml."""
    from sim.workload import params

    folder = params.fitted_dir()
    listed = params.committed_sha256()
    assert set(listed) == {f"{kind}.yaml" for kind in params.FITTED_KINDS}
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, (
            f"sim/workload/fitted/SHA256SUMS is out of date for {name}: run "
            "python -c 'from sim.workload.params import fitted_dir, write_manifest; "
            "write_manifest(fitted_dir())' (this test then checks each fit parses alike)")
        fast, pure = _both(folder / name)
        assert fast == pure, name
    copy = tmp_path / "fitted"
    copy.mkdir()
    for name in listed:
        shutil.copyfile(folder / name, copy / name)
    params.write_manifest(copy)
    try:
        assert (copy / "SHA256SUMS").read_text() == (folder / "SHA256SUMS").read_text()
    finally:
        params.committed_sha256.cache_clear()


def test_a_shipped_fit_is_read_by_libyaml_only_with_its_committed_text(tmp_path, monkeypatch):
    """A shipped fit whose text has the manifest's digest is parsed by libyaml (``a<TAB>``
    reads as the string "a": not a mapping); edited, unlisted, without a manifest, or
    named by a user's ``params: {path: ...}``, the pure loader refuses it as invalid YAML."""
    from sim.workload import params

    odd = "a\t"
    fit = tmp_path / "coding_agent.yaml"
    fit.write_text(odd, encoding="utf-8")
    digest = hashlib.sha256(odd.encode()).hexdigest()
    (tmp_path / "SHA256SUMS").write_text(f"{digest}  coding_agent.yaml\n", encoding="utf-8")
    monkeypatch.setattr(params, "fitted_dir", lambda: tmp_path)

    def load(path=None):
        params.committed_sha256.cache_clear()
        params._load.cache_clear()
        with pytest.raises(ConfigError) as err:
            params.load_params("coding_agent", path)
        return str(err.value)

    try:
        assert "expected a mapping of coding_agent parameters" in load()  # libyaml's "a"
        assert "invalid YAML" in load(fit)  # the same file as a user's: the pure loader
        fit.write_text(odd + " ", encoding="utf-8")  # edited
        assert "invalid YAML" in load()
        fit.write_text(odd, encoding="utf-8")
        (tmp_path / "SHA256SUMS").write_text(f"{digest}  other.yaml\n", encoding="utf-8")
        assert "invalid YAML" in load()  # not listed
        (tmp_path / "SHA256SUMS").unlink()
        assert "invalid YAML" in load()  # no manifest
    finally:
        params.committed_sha256.cache_clear()
        params._load.cache_clear()

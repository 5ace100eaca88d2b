"""Start-up imports only what the command uses (issue 25 item 4).

Each case runs in a fresh interpreter (a subprocess: this process has imported
everything already) and reports which heavy modules ended up in ``sys.modules``. How long
start-up takes is measured in ``benchmarks/bench_startup.py``, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "pyarrow", "matplotlib", "rich", "simpy", "numpy", "pydantic", "scipy")

PROBE = """
import contextlib, io, json, sys
{body}
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
engine = sorted(m for m in sys.modules if m.startswith(("sim.engine", "sim.metrics", "sim.report")))
print(json.dumps({{"heavy": heavy, "engine": engine, "rc": rc}}))
"""

MAIN = """
from sim.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main({argv!r})
"""


def _probe(body: str) -> dict:
    code = PROBE.format(body=body, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_sim_imports_nothing_heavy():
    got = _probe("import sim\nrc = 0")
    assert got == {"heavy": [], "engine": [], "rc": 0}


def test_kvsim_version_imports_no_command_and_nothing_heavy():
    got = _probe(MAIN.format(argv=["--version"]))
    assert got == {"heavy": [], "engine": [], "rc": 0}


def test_kvsim_version_alone_builds_no_command_line_parser():
    """``kvsim --version`` answers before typer (click) or the YAML loader is imported;
    with another flag it goes through the parser and still answers."""
    body = MAIN.format(argv=["--version"]) + "rc = [rc, sorted(m for m in ('typer', 'click', 'yaml', 'sim.cli._common') if m in sys.modules)]"
    assert _probe(body)["rc"] == [0, []]
    out = subprocess.run([sys.executable, "-m", "sim.cli", "--version"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    assert out.stdout.startswith("kvsim ") and out.stdout.count("\n") == 1
    assert _probe(MAIN.format(argv=["--version", "--help"]))["rc"] == 0


def test_kvsim_validate_imports_neither_the_engine_nor_numpy_nor_the_parser():
    """The scenario is validated by pydantic alone: the allocator is built and the
    calibration read without numpy (``sim.lazy_numpy``), and a plain ``validate FILE
    [--set ...]`` builds no typer parser (``sim.cli._validate``)."""
    body = "rc = [rc, sorted(m for m in ('typer', 'click', 'sim.cost.roofline') if m in sys.modules)]"
    for scenario in ("workloads/seed_chunked_prefill.yaml", "workloads/cluster_coding_agents.yaml"):
        got = _probe(MAIN.format(argv=["validate", scenario, "--set", "seed=3"]) + body)
        assert got["rc"] == [0, []], scenario
        assert got["engine"] == [], scenario
        assert got["heavy"] == ["pydantic"], scenario
    body = MAIN.format(argv=["validate", "workloads/seed_chunked_prefill.yaml"])
    got = _probe(body + "rc = [rc, 'sim.sweep.spec' in sys.modules]")  # the sweep schema
    assert got["rc"] == [0, False]


def test_a_command_still_loads_what_it_needs_and_help_lists_every_command():
    from sim.cli import COMMANDS, get_app

    names = [c.name for c in get_app().registered_commands]
    names += [g.name for g in get_app().registered_groups]
    assert sorted(names) == sorted(COMMANDS)
    got = _probe(MAIN.format(argv=["schema"]))  # prints the scenario JSON Schema
    assert got["rc"] == 0 and "pydantic" in got["heavy"]


def test_kvsim_validate_builds_the_scenario_validator_alone():
    """The workload and cluster sections are built once, as parts of the scenario model
    (``defer_build``): their own classes stay unbuilt, the workload kind validated
    included (built alone at import, they cost validate about a tenth of its CPU)."""
    body = MAIN.format(argv=["validate", "workloads/seed_chunked_prefill.yaml"]) + """
from sim.cluster.config import ClusterSection
from sim.workload.config import AgentWorkload, ChatWorkload, MixWorkload, RequestsWorkload
from sim.workload.distributions import Empirical
classes = (ClusterSection, AgentWorkload, ChatWorkload, MixWorkload, RequestsWorkload, Empirical)
rc = [rc, [c.__name__ for c in classes if c.__pydantic_complete__]]
"""
    assert _probe(body)["rc"] == [0, []]


def test_the_parser_path_of_validate_still_imports_no_numpy():
    """``validate`` in a form the quick path leaves to typer (``--`` before the file) goes
    through the parser, validates the scenario and still leaves numpy out."""
    body = MAIN.format(argv=["validate", "--", "workloads/seed_chunked_prefill.yaml"])
    got = _probe(body + "rc = [rc, 'typer' in sys.modules]")
    assert got["rc"] == [0, True]  # validated (status 0) by the typer command
    assert "numpy" not in got["heavy"]


def test_main_puts_back_the_pydantic_plugin_switch():
    """``main`` turns pydantic's plug-in scan off for the command only: a caller in the
    same process finds the variable as it was (unset, or its own value)."""
    body = MAIN.format(argv=["validate", "workloads/seed_chunked_prefill.yaml"])
    got = _probe(
        "import os\nos.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)\n"
        + body
        + "first = 'PYDANTIC_DISABLE_PLUGINS' in os.environ\n"
        + "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'mine'\n"
        + body.replace("rc = main", "rc2 = main")
        + "rc = [rc, rc2, first, os.environ['PYDANTIC_DISABLE_PLUGINS']]"
    )
    assert got["rc"] == [0, 0, False, "mine"]


#: what a scenario imports only when it names it: the agent kinds, the mix (and with it
#: every kind), the calibration file's models
BY_NAME = ("sim.workload.agent_config", "sim.workload.billing", "sim.workload.hints",
           "sim.workload.layout", "sim.workload.context_limit", "sim.workload.vllm_requests",
           "sim.workload.mix_config", "sim.cost.calibration", "sim.cost.table_schema",
           "sim.cost.kernel_tables")  # fmt: skip


def _validate_imports(scenario: str, *sets: str) -> tuple[int, list[str]]:
    argv = ["validate", scenario, *(a for s in sets for a in ("--set", s))]
    body = MAIN.format(argv=argv) + f"rc = [rc, sorted(m for m in {BY_NAME!r} if m in sys.modules)]"
    rc, modules = _probe(body)["rc"]
    return rc, modules


def test_kvsim_validate_imports_only_the_workload_kind_and_calibration_it_names():
    """The scenario model is narrowed to the workload kind the document names
    (``scenario_model_for``): a ``requests`` scenario without a calibration imports no
    agent kind, no mix and no calibration model; an agent kind with a calibration imports
    those two and still no mix; a mix imports every kind."""
    assert _validate_imports("workloads/seed_chunked_prefill.yaml") == (0, [])
    agents = ["sim.cost.calibration", "sim.cost.kernel_tables", "sim.cost.table_schema",
              "sim.workload.agent_config", "sim.workload.billing",
              "sim.workload.context_limit", "sim.workload.hints", "sim.workload.layout"]  # fmt: skip
    assert _validate_imports("workloads/cluster_coding_agents.yaml") == (0, agents)
    rc, modules = _validate_imports("workloads/mixed_chat_agents.yaml")
    assert rc == 0 and {"sim.workload.mix_config", "sim.workload.agent_config",
                        "sim.workload.vllm_requests"} <= set(modules)  # fmt: skip


def test_a_refused_document_is_reported_by_the_full_model():
    """A kind the narrowed model refuses is validated again with the full one: its error
    lists every valid kind, so every kind's module is imported then."""
    rc, modules = _validate_imports("workloads/seed_chunked_prefill.yaml", "workload.requests=[]")
    assert rc == 2 and "sim.workload.mix_config" in modules


def _validate_modules(scenario: str, prefixes: tuple[str, ...]) -> tuple[int, list[str]]:
    """(status, the sorted modules under ``prefixes`` a validate of ``scenario`` imported)."""
    body = MAIN.format(argv=["validate", scenario])
    body += f"rc = [rc, sorted(m for m in sys.modules if m.startswith({prefixes!r}))]"
    rc, modules = _probe(body)["rc"]
    return rc, modules


def test_a_one_node_validate_imports_no_cluster_module():
    """The cluster section (its routers and their options) is imported only for a
    scenario that has one (``scenario_model_for`` narrows ``cluster`` to ``None``)."""
    assert _validate_modules("workloads/seed_chunked_prefill.yaml", ("sim.cluster",)) == (0, [])
    rc, modules = _validate_modules("workloads/cluster_coding_agents.yaml", ("sim.cluster",))
    assert rc == 0 and {"sim.cluster.config", "sim.cluster.routers"} <= set(modules)


def test_kvsim_validate_imports_neither_pydantic_s_plugin_loader_nor_importlib_metadata():
    """With plug-ins off (the command's default) pydantic's loader is a stand-in
    (``sim.cli._pydantic_plugins``), so ``importlib.metadata`` stays out."""
    for scenario in ("workloads/seed_chunked_prefill.yaml", "workloads/cluster_coding_agents.yaml"):
        rc, modules = _validate_modules(scenario, ("importlib.metadata", "email"))
        assert (rc, modules) == (0, []), scenario


def test_kvsim_validate_imports_only_the_pause_policy_it_names():
    """The narrowed model holds the pause policy a document names (``hold`` without the
    section), so only that policy's module is imported (``sim.policy.base.POLICY_MODULES``)
    besides ``hold``'s, the section's default; a refused policy section is worded by the
    full model, which imports every one."""
    policies = tuple(f"sim.policy.{m}" for m in ("break_even", "fixed", "hinted", "min_waste", "ttl_pin"))
    assert _validate_modules("workloads/seed_chunked_prefill.yaml", policies) == (
        0, ["sim.policy.fixed"])  # fmt: skip
    assert _validate_modules("workloads/human_in_loop_nvme.yaml", policies) == (
        0, ["sim.policy.break_even", "sim.policy.fixed"])  # fmt: skip
    argv = ["validate", "workloads/seed_chunked_prefill.yaml", "--set", "pause_policy.kind=ttl_pin",
            "--set", "pause_policy.ttl_s=-1"]  # fmt: skip
    body = MAIN.format(argv=argv) + f"rc = [rc, sorted(m for m in {policies!r} if m in sys.modules)]"
    assert _probe(body)["rc"] == [2, sorted(policies)]


def test_kvsim_validate_builds_the_named_allocator_kind_s_model_alone():
    """The narrowed model holds the allocator kind a document names: one config model is
    built, not one per registered kind (each costs a ``create_model``)."""
    body = MAIN.format(argv=["validate", "workloads/seed_chunked_prefill.yaml"]) + """
from sim.scenario.schema import _allocator_model
rc = [rc, _allocator_model.cache_info().currsize]
"""
    assert _probe(body)["rc"] == [0, 1]


DRIVERS = ("agent", "agent_trace", "chat", "claude_code", "coding_agent", "function_calling",
           "human_in_loop", "interactive", "mix", "mooncake", "multi_agent", "tree_search")  # fmt: skip


def _built_drivers(scenario: str, overrides: dict) -> list[str]:
    body = f"""
from sim.run.runner import build
build({scenario!r}, **{overrides!r})
rc = sorted(m for m in sys.modules if m in {tuple(f"sim.workload.{d}" for d in DRIVERS)!r}
            or m.startswith(("sim.run.cluster", "sim.cluster")))
"""
    return _probe(body)["rc"]


def test_a_run_imports_its_own_workload_driver_and_no_other():
    """The shipped kinds' drivers are imported on their first call
    (``sim.workload.builtin.shipped``): a chat run imports the chat driver alone, a
    coding-agent run the coding agent's and what it is built on (the agent driver's
    module), never every driver; a one-node run imports no cluster module."""
    assert _built_drivers("benchmarks/chat_azure_5000.yaml", {"workload.num_requests": 5}) == [
        "sim.workload.chat"]  # fmt: skip
    got = _built_drivers("benchmarks/agents_500.yaml", {"workload.num_trajectories": 2})
    assert "sim.workload.coding_agent" in got and "sim.workload.chat" not in got
    assert not {"sim.workload.mix", "sim.workload.tree_search", "sim.workload.mooncake"} & set(got)
    assert not [m for m in got if "cluster" in m]
    got = _built_drivers("workloads/cluster_coding_agents.yaml", {"workload.num_trajectories": 2})
    assert {"sim.run.cluster", "sim.workload.coding_agent"} <= set(got)


def test_a_run_off_a_terminal_draws_no_progress_bar_and_imports_no_rich(tmp_path):
    """``kvsim run`` with standard error on a pipe (here) runs without the progress bar,
    whose rich import and redraws nobody would see, and still says its end line."""
    out = tmp_path / "r"
    argv = ["run", "workloads/seed_chunked_prefill.yaml", "--out", str(out), "--no-report",
            "--set", "duration_s=100"]  # fmt: skip
    body = """
err = io.StringIO()
with contextlib.redirect_stderr(err):
""" + "\n".join("    " + line for line in MAIN.format(argv=argv).strip().splitlines()) + """
rc = [rc, 'rich' in sys.modules, err.getvalue()]
"""
    rc, rich, err = _probe(body)["rc"]
    assert (rc, rich) == (0, False)
    assert err == "finished at 19.7 s of simulated time: all work done before duration_s = 100 s\n"
    assert (out / "summary.json").is_file()


#: the trace readers ``kvsim validate`` imports only for a workload that names a trace
TRACE_READERS = ("sim.workload.traces", "sim.workload.chat_trace", "sim.workload.mooncake_trace",
                 "sim.workload.claude_code_trace", "sim.prefix.trace_replay",
                 "sim.workload.turns_file", "pandas")  # fmt: skip


def test_kvsim_validate_imports_a_trace_reader_only_for_a_workload_that_names_a_trace():
    """``validate`` reads the traces a workload names with the run's readers
    (``sim.workload.trace_files``); a scenario without a trace imports none of them."""
    for scenario in ("workloads/seed_chunked_prefill.yaml", "workloads/cluster_coding_agents.yaml"):
        assert _validate_modules(scenario, TRACE_READERS) == (0, []), scenario
    rc, modules = _validate_modules("workloads/mooncake_replay.yaml", TRACE_READERS)
    assert rc == 0 and {"sim.workload.mooncake_trace", "sim.prefix.trace_replay"} <= set(modules)


#: the workload drivers and what only a run needs (the engine's arrival strategies)
DRIVER_MODULES = tuple(f"sim.workload.{d}" for d in DRIVERS) + ("sim.workload.arrivals",)


def test_kvsim_validate_of_a_trace_reads_it_without_numpy_or_its_driver():
    """A scenario whose workload names a trace (the Azure CSV lengths of a chat, a mix
    holding one, a Mooncake replay, recorded Claude Code sessions) is validated with the
    trace read (``sim.workload.chat_trace``, ``mooncake_trace``, ``claude_code_trace``:
    the functions the run calls) and neither numpy nor the workload's driver imported
    (issue 25 item 4: numpy's import was about a third of these commands' time)."""
    readers = {"workloads/chat_azure.yaml": "sim.workload.chat_trace",
               "workloads/mixed_chat_agents.yaml": "sim.workload.chat_trace",
               "workloads/mooncake_replay.yaml": "sim.workload.mooncake_trace",
               "workloads/interactive_coding_service.yaml": "sim.workload.claude_code_trace"}  # fmt: skip
    for scenario, reader in readers.items():
        body = MAIN.format(argv=["validate", scenario])
        body += f"rc = [rc, {reader!r} in sys.modules, sorted(m for m in {DRIVER_MODULES!r} if m in sys.modules)]"
        got = _probe(body)
        assert got["rc"] == [0, True, []], scenario
        assert "numpy" not in got["heavy"], scenario


def test_a_one_node_run_and_its_folder_import_no_pandas(tmp_path):
    """A one-node run keeps its record tables numpy through the summary and writes them
    with pyarrow alone (``sim.metrics.table``): neither ``run_scenario`` + ``write`` nor
    ``kvsim run --no-report`` imports pandas (tool pauses, and so pauses.parquet, in the
    first). Reading a table of the result as a DataFrame imports it then."""
    body = f"""
from sim.run import run_scenario
result = run_scenario("workloads/agent_swarm.yaml", **{{"workload.num_trajectories": 4}})
result.write({str(tmp_path / "api")!r})
before = sorted(m for m in ("pandas", "click", "typer") if m in sys.modules)
frame = result.requests
rc = [before, type(frame).__name__, "pandas" in sys.modules, result.summary["pause_count"] > 0]
"""
    assert _probe(body)["rc"] == [[], "DataFrame", True, True]
    assert (tmp_path / "api" / "pauses.parquet").is_file()
    argv = ["run", "benchmarks/chat_azure_5000.yaml", "--out", str(tmp_path / "cli"), "--no-report",
            "--quiet", "--set", "workload.num_requests=20"]  # fmt: skip
    got = _probe(MAIN.format(argv=argv))
    assert got["rc"] == 0 and "pandas" not in got["heavy"], got
    assert (tmp_path / "cli" / "requests.parquet").is_file()


def test_a_plain_kvsim_run_builds_no_command_line_parser(tmp_path):
    """``kvsim run FILE --out DIR`` with only the plain flags is answered by
    ``sim.cli._run`` without typer (click) imported; another flag goes through the parser
    and runs the same command."""
    base = ["run", "workloads/seed_chunked_prefill.yaml", "--no-report", "--quiet",
            "--set", "duration_s=100"]  # fmt: skip
    body = "rc = [rc, sorted(m for m in ('typer', 'click', 'sim.cli.run') if m in sys.modules)]"
    got = _probe(MAIN.format(argv=[*base, "--out", str(tmp_path / "plain"), "--force"]) + body)
    assert got["rc"] == [0, []]
    got = _probe(MAIN.format(argv=[*base, "--out", str(tmp_path / "parsed"), "--force", "--force"]) + body)
    assert got["rc"] == [0, ["sim.cli.run", "typer"]]
    assert (tmp_path / "plain" / "summary.json").is_file() and (tmp_path / "parsed" / "summary.json").is_file()

"""Fitted parameters of the data-driven workload kinds: their models and where they load from.

Responsibility: the schema of a ``kvsim workload fit`` output per kind (``coding_agent``,
``function_calling``, ``human_in_loop``, ``multi_agent_team``) and loading it, either
the fit shipped as package data (``sim/workload/fitted/<kind>.yaml``, fitted by the scripts
of ``workloads/fit/`` from ``../shared/data``; each file names its source and licence)
or a user's own fit (a workload's ``params: {path: FILE}``).

Invariant: files are read through the bounded safe YAML loader and validated (unknown
fields are errors, every number finite); a problem is one ``file:line: field: message``
line; a file is parsed once per process (cached by path and modification time). A shipped
fit is parsed with libyaml only while its text is the one committed (its SHA-256 in
``fitted/SHA256SUMS``, shipped beside it; CI parses every listed file both ways alike);
an edited one, and every user's file, goes to PyYAML's pure loader.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, model_validator

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.workload.distributions import MAX_TIME_S, Dist, Quantiles
from sim.workload.empirical import check_shares
from sim.yamlio import format_validation_error, load_yaml, loads_yaml, read_sha256_manifest

#: the kinds whose defaults are fitted from data
FITTED_KINDS = (
    "coding_agent", "function_calling", "human_in_loop", "multi_agent_team",
    "interactive_coding_agent",
)  # fmt: skip


def fit_source(data: str, licence: str, trajectories: int, calls: int, notes: str = "") -> dict:
    """The ``source`` block of a fitted parameters file: the data, its licence and its size."""
    return {
        "data": data,
        "licence": licence,
        "trajectories": int(trajectories),
        "calls": int(calls),
        "notes": notes,
    }


class _P(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _shares(value: dict[str, float]) -> dict[str, float]:
    """A mapping of names to the shares a draw picks them by (``empirical.chooser``), by
    the draw's own rule (``empirical.check_shares``)."""
    check_shares(value)
    return value


#: names and the shares a draw picks them by (validated by ``_shares``)
Shares = Annotated[dict[str, float], AfterValidator(_shares)]


class Source(_P):
    """Where a fit came from (shown in docs and ``kvsim workload sample``)."""

    data: str  # the data set and file
    licence: str  # the data's licence
    trajectories: int = Field(ge=0)  # trajectories (tasks, sessions) fitted
    calls: int = Field(ge=0)  # LLM calls fitted
    notes: str = ""


class ToolCategory(_P):
    """One tool category of a coding agent: what its calls look like and what follows."""

    share: float = Field(ge=0, le=1)  # share of the calls that run a tool (informative)
    start: float = Field(ge=0, le=1)  # probability that a trajectory's first action is this
    next: Shares  # category of the next action (first-order chain)
    tools: Shares  # tool names (first word of the command) and their shares
    completion_tokens: Quantiles  # the reply that issues this action
    tool_s: Quantiles  # tool time, timeouts excluded
    growth_tokens: Quantiles  # what the next prompt adds beyond this prompt and reply
    rank_correlation: float = Field(ge=-1, le=1)  # Spearman(tool_s, growth_tokens)
    timeout_share: float = Field(0.0, ge=0, le=1)  # calls killed by the harness timeout


class CodingAgentParams(_P):
    kind: Literal["coding_agent"] = "coding_agent"
    source: Source
    system_prompt_tokens: int = Field(ge=0)  # the prefix every first prompt shares
    turns: Dist  # LLM calls per trajectory
    first_prompt_tokens: Dist  # the first call's whole prompt
    final_completion_tokens: Quantiles  # the last call (the submission; no tool follows)
    timeout_s: float = Field(gt=0, le=MAX_TIME_S)  # the harness's tool timeout
    timeout_overhead_s: Quantiles  # a timed-out call's time past ``timeout_s`` (kill, cleanup)
    categories: dict[str, ToolCategory] = Field(min_length=1)

    @model_validator(mode="after")
    def _chain(self) -> CodingAgentParams:
        """The chain draws only categories it has: every ``next`` names one, and the
        first action has a positive ``start`` (or, without one, ``share``) somewhere."""
        for name, c in self.categories.items():
            unknown = sorted(set(c.next) - set(self.categories))
            if unknown:
                raise ValueError(
                    f"categories.{name}.next: {unknown[0]!r} is not a category "
                    f"(categories: {', '.join(self.categories)})"
                )
        try:
            check_shares(self.start_shares())
        except ValueError:
            raise ValueError("categories: every start and share is 0: no first action can be drawn") from None
        return self

    def start_shares(self) -> dict[str, float]:
        """The first action's shares: the categories' positive ``start``, or, with none,
        their ``share``."""
        start = {k: c.start for k, c in self.categories.items() if c.start > 0}
        return start or {k: c.share for k, c in self.categories.items()}


class CallsByLength(_P):
    """Calls per user turn in conversations of at most ``max_user_turns`` user turns."""

    max_user_turns: int = Field(ge=1)
    calls: Dist


def calls_for(bins: list[CallsByLength], user_turns: int) -> Dist:
    """The calls-per-turn distribution of conversations with ``user_turns`` turns."""
    for b in bins:
        if user_turns <= b.max_user_turns:
            return b.calls
    return bins[-1].calls


class FunctionCallingParams(_P):
    kind: Literal["function_calling"] = "function_calling"
    source: Source
    doc_tokens: int = Field(ge=0)  # the function-doc prefix every first prompt shares
    first_prompt_tokens: Dist  # the first call's whole prompt (docs + first user message)
    user_turns: Dist  # user turns per task
    # LLM calls per user turn (tool calls, then the answer), by the task's user turns:
    # tasks with more user turns have shorter ones
    calls_per_user_turn: list[CallsByLength] = Field(min_length=1)
    completion_tokens: Quantiles  # every call's reply (reasoning included)
    call_growth_tokens: Quantiles  # prompt growth from one call to the next in a user turn
    user_growth_tokens: Dist  # prompt growth at a new user turn (the user message)
    observation_min_tokens: int = Field(ge=1)  # the smallest tool result with its framing
    rank_correlation: float = Field(ge=-1, le=1)  # Spearman(completion, call growth)
    tools: Shares  # function names and their shares


class ServiceTool(_P):
    """One tool of a human-in-the-loop agent: how often it is called, what it returns."""

    share: float = Field(ge=0, le=1)  # share of the tool calls
    call_tokens: Quantiles  # the assistant message that calls it
    result_tokens: Quantiles  # its result (the next call's input)


class HumanInLoopParams(_P):
    kind: Literal["human_in_loop"] = "human_in_loop"
    source: Source
    policy_prompt_tokens: int = Field(ge=0)  # the shared policy (system) prompt
    user_turns: Dist  # user messages answered per conversation
    first_turn_calls: Dist  # LLM calls answering the first user message
    # LLM calls per later user message (tool calls, then the reply), by conversation length:
    # long conversations have shorter turns
    calls_per_user_turn: list[CallsByLength] = Field(min_length=1)
    user_message_tokens: Dist
    reply_tokens: Dist  # an assistant message to the user
    # Spearman correlation of a turn's reply and the user message answering it (drawn
    # through a Gaussian copula; 0, the default of older fits: independent)
    reply_user_rank_correlation: float = Field(0.0, ge=-1.0, le=1.0)
    tools: dict[str, ServiceTool] = Field(min_length=1)  # the most called, the rest "other"
    max_calls: int | None = Field(None, ge=1)  # the harness's step limit (None: none seen)

    @model_validator(mode="after")
    def _tool_shares(self) -> HumanInLoopParams:
        """A call's tool is drawn by these shares: they need a positive total."""
        try:
            check_shares({name: t.share for name, t in self.tools.items()})
        except ValueError as exc:
            raise ValueError(f"tools: {exc}") from None
        return self


class RoleParams(_P):
    """One role of a multi-agent team round (programmer, reviewer, reviser)."""

    system_tokens: int = Field(ge=0)  # the role prompt, the same in every round and team
    context_tokens: Dist  # the round's shared context (code base, reviews) after it
    branch_tokens: Dist  # the part of each branch's prompt its own (the file it works on)
    completion_tokens: Dist


class MultiAgentTeamParams(_P):
    kind: Literal["multi_agent_team"] = "multi_agent_team"
    source: Source
    task_tokens: int = Field(ge=1)  # the architect's prompt
    architect_tokens: int = Field(ge=1)  # the architect's design (the first reply)
    branches: int = Field(ge=1)  # parallel branches (files) per round
    rounds: int = Field(ge=1)  # rounds after the architect: write, then review/revise
    roles: dict[str, RoleParams]  # programmer, reviewer, reviser


class SubagentParams(_P):
    """The subagents of an interactive coding agent (Claude Code's Task tool)."""

    spawn_share: float = Field(ge=0, le=1)  # tool-issuing calls after which subagents start
    fan_out: Dist  # subagents started together
    shared_prefix_tokens: int = Field(ge=0)  # their tool definitions and system prompt
    calls: Dist  # calls per subagent
    first_prompt_tokens: Quantiles  # a subagent's first prompt (its prefix and task)
    delta_tokens: Quantiles  # prompt change from one call to the next
    completion_tokens: Quantiles
    think_s: Quantiles  # the tool time before each later call


class InteractiveCodingAgentParams(_P):
    kind: Literal["interactive_coding_agent"] = "interactive_coding_agent"
    source: Source
    shared_prefix_tokens: int = Field(ge=0)  # tool definitions + system prompt (the median)
    user_turns: Dist  # user messages per session (the task is the first)
    # LLM calls answering one user message, by the session's user turns (longer sessions
    # have shorter turns)
    calls_per_user_turn: list[CallsByLength] = Field(min_length=1)
    # how alike one session's turns are: the correlation of their calls' normal scores (a
    # session-level factor; 0 = every turn drawn alone, as fits written before it)
    calls_session_correlation: float = Field(0.0, ge=0.0, lt=1.0)
    first_prompt_tokens: Dist  # the first call's whole prompt
    # by what follows the call: "tool" (a tool result), "human" (a user message), "final"
    completion_tokens: dict[str, Quantiles]
    # prompt change from the previous call by the new input ("tool", "human"), compactions
    # excluded
    delta_tokens: dict[str, Quantiles]
    compaction_share: dict[str, float]  # calls whose prompt is compacted, by input kind
    compacted_prompt_tokens: Quantiles  # a compacted prompt's whole length
    think_s: dict[str, Quantiles]  # the pause before a call by its input kind: tool, human
    subagents: SubagentParams


PARAMS_MODELS: dict[str, type[_P]] = {
    "coding_agent": CodingAgentParams,
    "function_calling": FunctionCallingParams,
    "human_in_loop": HumanInLoopParams,
    "multi_agent_team": MultiAgentTeamParams,
    "interactive_coding_agent": InteractiveCodingAgentParams,
}


#: the shipped fits' SHA-256 as committed, beside them (``sha256sum`` lines, written by
#: ``write_manifest``; tests/test_yamlio_parsers.py checks it is current and that every
#: file it lists parses alike both ways)
MANIFEST = "SHA256SUMS"


def fitted_dir() -> Path:
    """The folder of the shipped fits and their manifest (package data)."""
    return Path(str(resources.files("sim.workload").joinpath("fitted")))


def shipped_path(kind: str) -> Path:
    """The shipped fit of ``kind`` (package data; present in a wheel install)."""
    return fitted_dir() / f"{kind}.yaml"


@functools.cache
def committed_sha256() -> dict[str, str]:
    """The shipped fits' manifest: file name -> hex SHA-256 of its committed text; empty
    when the manifest is missing or unreadable (every fit then goes to the pure loader)."""
    return read_sha256_manifest(fitted_dir() / MANIFEST)


def write_manifest(folder: Path) -> None:
    """Write ``folder``'s manifest of its ``*.yaml`` fits (what the re-fit scripts of
    ``workloads/fit/`` call after writing a shipped fit)."""
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
             for p in sorted(folder.glob("*.yaml"))]  # fmt: skip
    (folder / MANIFEST).write_text("".join(lines), encoding="utf-8")
    committed_sha256.cache_clear()


def load_params(kind: str, path: str | Path | None = None):
    """The fitted parameters of ``kind``: the shipped fit, or the file at ``path``."""
    p = shipped_path(kind) if path is None else Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise ConfigError("no such file (fitted parameters)", location=str(p)) from None
    digest = committed_sha256().get(p.name) if path is None else None
    return _load(kind, str(p), mtime, digest)


@functools.lru_cache(maxsize=32)
def _load(kind: str, path: str, mtime_ns: int, shipped_sha256: str | None = None):
    data, lines = load_yaml(path, shipped_sha256=shipped_sha256)
    return validate_params(kind, data, path, lines)


def validate_params(kind: str, data, source: str = "<params>", lines=None):
    """Validate a parsed fit of ``kind`` (one-line ConfigError naming the first problem)."""
    model = PARAMS_MODELS[kind]
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of {kind} parameters", location=source)
    if data.get("kind", kind) != kind:
        raise ConfigError(
            f"these are {data.get('kind')!r} parameters, not {kind!r}", location=source
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = format_validation_error(exc, source, lines or {}, data=data).splitlines()
        more = f" (and {len(first) - 1} more problems)" if len(first) > 1 else ""
        raise ConfigError(first[0] + more) from None


def params_from_text(kind: str, text: str, source: str = "<params>"):
    """Parse and validate fitted parameters given as YAML text (tests, tools)."""
    data, lines = loads_yaml(text, source)
    return validate_params(kind, data, source, lines)

"""``kvsim plan``: the analytic capacity planner (F1, F4, F5, F34-F37).

Invariant: the command only parses flags and prints; all arithmetic and the range checks
of the numbers are in ``sim.sizing`` (``plan``, ``bounds``). ``--json`` prints exactly one
object on stdout; warnings (a context beyond the model's window, weights that leave no KV
pool, nothing fitting) go to stderr as well and never change the exit status.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.cli._common import (
    gb_or_gib,
    int_list,
    load_with_sets,
    parse_sets,
    print_json,
    print_warnings,
)
from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.sizing.plan import (
    DEFAULT_PREFILL_CHUNK_TOKENS,
    RESERVE_ALONE_WARNING,
    PlanInputs,
    PlanResult,
    default_gpu_memory_utilization,
    plan_capacity,
)
from sim.units import GB, GiB, dtype_bytes

HELP = """Capacity plan: KV bytes per token, the KV pool of a node and how many trajectories of
each context length fit, with and without a shared prefix.

Capacity is computed per GPU (its pool over its own KV bytes per token) and multiplied by
the data-parallel replicas (num_gpus / (tp x pp)), each holding its own weights. The pool
per GPU is memory x --gpu-memory-utilization - weights - reserve (F34); the utilization
defaults to 0.9 (as kvsim run), or 1.0 when a --gpu-mem-* or --reserve-* figure is given.
A context beyond the model's window, weights that leave no KV pool, or none fitting is a
warning (exit 0). Every number must be finite and in range (a one-line error naming the
flag, exit 2). GB means 10^9 bytes and GiB 2^30 bytes. Example (E1):

  kvsim plan --model llama-3.1-70b --params 70.6e9 --gpu h100-sxm-80gb --gpu-mem-gib 80
  --num-gpus 8 --reserve-gb-per-gpu 2.5 --context 8192,32768,131072
"""


def register(app: typer.Typer) -> None:
    """Add ``plan`` to the app."""
    app.command("plan", help=HELP)(plan)


#: the flags of ``kvsim plan`` (module level, so that ``plan`` itself stays short)
Model = Annotated[str, typer.Option(help="Model profile name (kvsim profiles list).")]
Gpu = Annotated[str, typer.Option(help="Accelerator profile name.")]
NumGpus = Annotated[int, typer.Option(help="GPUs in the node; a multiple of tp x pp.")]
Contexts = Annotated[
    list[str], typer.Option(help="Context lengths in tokens, comma-separated or repeated.")
]
Tp = Annotated[int | None, typer.Option(help="Tensor parallelism \\[default: num_gpus / pp].")]
Pp = Annotated[int, typer.Option(help="Pipeline parallelism; extra layers go to the first stages.")]
OutputTokens = Annotated[
    int, typer.Option(help="Generated tokens K_avg added to each trajectory (F35-F37).")
]
KvDtype = Annotated[
    str | None,
    typer.Option(
        help="KV element type: bf16, fp16, fp8 or nvfp4 (4.5 bits with its scales) "
        "\\[default: model's]; layer groups that pin their own (an fp8 indexer, Mamba states) "
        "keep it."
    ),
]
BlockSize = Annotated[
    int,
    typer.Option(
        help="KV block size in tokens; a hybrid model with Mamba or linear-attention layers "
        "gets the larger block vLLM raises it to."
    ),
]
PrefillChunk = Annotated[
    int,
    typer.Option(
        help="Prompt tokens prefilled per step (vLLM's max_num_batched_tokens, or "
        "long_prefill_token_threshold when lower): a sliding window or chunk also holds the "
        "chunk's blocks during that step (peak_kv_bytes_per_trajectory)."
    ),
]
MambaCacheMode = Annotated[
    str,
    typer.Option(
        help="vLLM's --mamba-cache-mode for a model with Mamba / linear-attention layers: "
        "none (one running state per sequence) or all (a saved state, one page padded to the "
        "attention page per state layer, at every block boundary; the block size aligns to "
        "the state kernel's chunk). plan has no allocator, so unlike a run's auto it is not "
        "settled from prefix caching: give all to plan what vLLM runs with prefix caching on."
    ),
]
WeightDtype = Annotated[
    str | None, typer.Option(help="Weight element type: bf16, fp8 or int4 \\[default: model's].")
]
Params = Annotated[float | None, typer.Option(help="Parameter count override, e.g. 70e9.")]
GpuMemGib = Annotated[
    float | None, typer.Option(help="Memory per GPU in GiB (2^30 B), overriding the profile.")
]
GpuMemGb = Annotated[
    float | None, typer.Option(help="Memory per GPU in GB (10^9 B), overriding the profile.")
]
ReserveGb = Annotated[float | None, typer.Option(help="Runtime/activation reserve per GPU in GB.")]
ReserveGib = Annotated[
    float | None, typer.Option(help="Runtime/activation reserve per GPU in GiB.")
]
Utilization = Annotated[
    float | None,
    typer.Option(
        help="Share of each GPU's memory the engine may use, in (0, 1] (F34) "
        "\\[default: 0.9, or 1.0 when a --gpu-mem-* or --reserve-* figure is given]."
    ),
]
Headroom = Annotated[float, typer.Option(help="Fraction of the KV pool kept free (F37 uses 0.10).")]
SharedPrefix = Annotated[
    int | None,
    typer.Option(help="Tokens of each context shared by all trajectories, stored once."),
]
Profiles = Annotated[
    list[str] | None,
    typer.Option(help="Extra profile folder(s), searched before the shipped ones."),
]
Sets = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a profile field: model.FIELD=V or gpu.FIELD=V."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
SpecMethod = Annotated[
    str | None,
    typer.Option(
        help="Speculative decoding's drafter, as a run's speculative.method: eagle or mtp "
        "(one more attention layer of the target's, 1/num_layers of its weights), "
        "draft_model (--draft-model's KV and weights) or ngram (none). Its KV joins the pool's "
        "demand per token, its weights come out of the pool, and each trajectory holds K "
        "lookahead slots (not for ngram), as kvsim run charges them. Needs --pp 1."
    ),
]
SpecTokens = Annotated[
    int | None, typer.Option(help="Drafts per step K (speculative.num_speculative_tokens, 1 to 32).")
]
DraftModel = Annotated[
    str | None,
    typer.Option(help="The draft model's profile, for --speculative-method draft_model only."),
]


def plan(
    model: Model,
    gpu: Gpu,
    num_gpus: NumGpus,
    context: Contexts,
    tp: Tp = None,
    pp: Pp = 1,
    output_tokens: OutputTokens = 0,
    kv_dtype: KvDtype = None,
    weight_dtype: WeightDtype = None,
    params: Params = None,
    gpu_mem_gib: GpuMemGib = None,
    gpu_mem_gb: GpuMemGb = None,
    reserve_gb_per_gpu: ReserveGb = None,
    reserve_gib_per_gpu: ReserveGib = None,
    gpu_memory_utilization: Utilization = None,
    headroom: Headroom = 0.0,
    shared_prefix_tokens: SharedPrefix = None,
    block_size: BlockSize = 16,
    mamba_cache_mode: MambaCacheMode = "none",
    prefill_chunk_tokens: PrefillChunk = DEFAULT_PREFILL_CHUNK_TOKENS,
    profiles: Profiles = None,
    set_: Sets = None,
    json_out: JsonOut = False,
    speculative_method: SpecMethod = None,
    num_speculative_tokens: SpecTokens = None,
    draft_model: DraftModel = None,
) -> None:
    """Parse the flags, plan, print."""
    sets = parse_sets(set_, ("model", "gpu"))
    _check_dtypes(kv_dtype, weight_dtype)
    gpu_mem_bytes = gb_or_gib(gpu_mem_gb, gpu_mem_gib, "--gpu-mem")
    reserve_bytes = gb_or_gib(
        reserve_gb_per_gpu, reserve_gib_per_gpu, "--reserve", "-per-gpu", allow_zero=True
    )
    # a reserve alone switches F34's u to 1.0: the reserve then stands for what the 0.9
    # holds back, so a small reserve gives a larger pool than none; the plan says so
    reserve_alone = gpu_memory_utilization is None and gpu_mem_bytes is None and bool(reserve_bytes)
    if gpu_memory_utilization is None:
        figures = gpu_mem_bytes is not None or reserve_bytes is not None
        gpu_memory_utilization = default_gpu_memory_utilization(figures)
    inputs = PlanInputs(  # checks every number's range (sim.sizing.bounds)
        model=load_with_sets(load_model, model, profiles, sets["model"], "model"),
        accelerator=load_with_sets(load_accelerator, gpu, profiles, sets["gpu"], "gpu"),
        num_gpus=num_gpus,
        contexts=int_list(context, "--context"),
        tp=tp,
        pp=pp,
        output_tokens=output_tokens,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        params=params,
        gpu_mem_bytes=gpu_mem_bytes,
        reserve_bytes_per_gpu=reserve_bytes or 0.0,
        headroom=headroom,
        shared_prefix_tokens=shared_prefix_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        mamba_cache_mode=mamba_cache_mode,
        prefill_chunk_tokens=prefill_chunk_tokens,
        speculative_method=speculative_method,
        num_speculative_tokens=num_speculative_tokens,
        draft_model=_draft_profile(draft_model, profiles),
    )
    result = plan_capacity(inputs)
    if reserve_alone:
        result.warnings.append(RESERVE_ALONE_WARNING)
    _show(result, json_out)


def _draft_profile(name: str | None, profiles: Profiles):
    """``--draft-model``'s profile (None without the flag); an unknown one in one line."""
    if name is None:
        return None
    try:
        return load_model(name, profiles)
    except KvsimError as exc:
        raise KvsimError(f"--draft-model: {exc}") from None


def _check_dtypes(kv_dtype: str | None, weight_dtype: str | None) -> None:
    """An unknown element type is a one-line error naming the flag and the valid types."""
    for name, value in (("--kv-dtype", kv_dtype), ("--weight-dtype", weight_dtype)):
        if value is not None:
            try:
                dtype_bytes(value)
            except ValueError as exc:
                raise KvsimError(f"{name}: {exc}") from None


def _show(result: PlanResult, json_out: bool) -> None:
    """The plan on stdout (one JSON object, or tables); its warnings on stderr."""
    if json_out:
        print_json(result.to_dict())
    else:
        _print_table(result)
    print_warnings(result.warnings)


def _both(n: float) -> str:
    return f"{n / GB:,.3f} GB ({n / GiB:,.3f} GiB)"


def _print_table(r: PlanResult) -> None:
    console = Console()
    head = Table(
        title=f"{r.model} on {r.num_gpus} x {r.gpu} (TP {r.tp}, PP {r.pp}, {r.replicas} replica(s))",
        show_header=False,
    )
    head.add_row("KV bytes per token (all layers)", f"{r.kv_bytes_per_token:,.0f} B ({r.kv_dtype})")
    head.add_row("KV bytes per token per GPU", f"{r.kv_bytes_per_token_per_gpu:,.0f} B")
    if r.speculative_method is not None:
        head.add_row("speculative drafter", _drafter_line(r))
    head.add_row(
        "weights per GPU / node", f"{_both(r.weights_bytes_per_gpu)} / {_both(r.weights_bytes)}"
    )
    if r.weights_bytes_per_gpu_by_stage:  # PP: the pool is the most loaded stage's
        head.add_row("weights per GPU by stage",
                     " / ".join(f"{w / GB:,.3f}" for w in r.weights_bytes_per_gpu_by_stage)
                     + " GB (per GPU above: the most loaded, whose pool is the smallest)")  # fmt: skip
    head.add_row("memory per GPU", _both(r.gpu_mem_bytes))
    used_bytes = r.gpu_mem_bytes * r.gpu_memory_utilization
    head.add_row(
        "GPU memory utilization (F34)", f"{r.gpu_memory_utilization:g} x memory = {_both(used_bytes)}"
    )
    head.add_row("reserve per GPU", _both(r.reserve_bytes_per_gpu))
    head.add_row(
        "KV pool per GPU / node", f"{_both(r.kv_pool_bytes_per_gpu)} / {_both(r.kv_pool_bytes)}"
    )
    head.add_row("KV pool leaves out", r.kv_pool_leaves_out)
    head.add_row(f"usable KV pool (headroom {r.headroom:.0%})", _both(r.usable_kv_pool_bytes))
    block = f"{r.block_size_tokens:,} tokens"
    if r.block_size_tokens != r.requested_block_size_tokens:
        block += f" (raised from {r.requested_block_size_tokens}, as vLLM does)"
    head.add_row("KV block size", block)
    if r.state_page_bytes_per_gpu:
        head.add_row(
            "state page per layer per GPU",
            f"{r.state_page_bytes_per_gpu:,.0f} B (padded to {r.state_page_padded_bytes_per_gpu:,.0f} B)",
        )
    console.print(head)
    if r.contexts and len(r.contexts[0].groups) > 1:  # one group would repeat the totals
        console.print(_groups_table(r))
    table = Table(title="Concurrent trajectories per node")
    for col in ("context", "+output", "KV per trajectory", "max concurrent"):
        table.add_column(col, justify="right")
    # a window's or chunk's prefill transient (vLLM V1 keeps w - 1 tokens plus the chunk)
    peaks = any(c.peak_kv_bytes_per_trajectory > c.kv_bytes_per_trajectory for c in r.contexts)
    if peaks:
        table.add_column(f"peak in a {r.contexts[0].prefill_chunk_tokens:,}-token prefill step",
                         justify="right")  # fmt: skip
    shared = r.shared_prefix_tokens is not None
    if shared:
        table.add_column(f"with {r.shared_prefix_tokens:,} shared", justify="right")
    for c in r.contexts:
        row = [
            f"{c.context_tokens:,}",
            f"{r.output_tokens:,}",
            _both(c.kv_bytes_per_trajectory),
            f"{c.max_concurrent:,}",
        ]
        if peaks:
            row.append(_both(c.peak_kv_bytes_per_trajectory))
        if shared:
            row.append(f"{c.max_concurrent_shared:,}")
        table.add_row(*row)
    console.print(table)


def _drafter_line(r: PlanResult) -> str:
    """The drafter's line: what it adds per token, takes of each GPU, holds per sequence."""
    name = f"{r.speculative_method} ({r.draft_model})" if r.draft_model else r.speculative_method
    line = (f"{name}, k {r.num_speculative_tokens}: {r.spec_draft_kv_bytes_per_token:,.0f} B of "
            f"KV per token ({r.spec_draft_kv_bytes_per_token_per_gpu:,.0f} B per GPU, in the "
            f"figures above), weights {_both(r.draft_weights_bytes_per_gpu)} per GPU (in the "
            f"weights below), {r.spec_lookahead_tokens} lookahead slot(s) per trajectory")  # fmt: skip
    if r.spec_grouped_draft_layers:
        line += f", {r.spec_grouped_draft_layers} layer grouped with the target's full/MLA layers"
    return line


def _groups_table(r: PlanResult) -> Table:
    """KV by layer group for each context: per-token and per-sequence state, and totals."""
    table = Table(title="KV by layer group (whole model, one copy; per GPU: most loaded stage)")
    for col in ("context", "group", "kind", "layers", "dtype", "held tokens", "B per token",
                "state per seq", "KV per trajectory", "per GPU"):  # fmt: skip
        table.add_column(col, justify="right")
    for c in r.contexts:
        for g in c.groups:
            kind = g.kind + (f" ({g.window_tokens:,})" if g.window_tokens else "")
            table.add_row(
                f"{c.context_tokens:,}",
                g.name,
                kind,
                f"{g.num_layers}" + (f" +{g.padding_layers} pad" if g.padding_layers else ""),
                g.dtype,
                f"{g.held_tokens:,}" if not g.state_bytes else "-",
                f"{g.bytes_per_token:,.0f}",
                f"{g.state_bytes:,.0f}" if g.state_bytes else "-",
                _both(g.bytes),
                _both(g.bytes_per_gpu),
            )
    return table

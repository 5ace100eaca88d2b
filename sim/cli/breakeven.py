"""``kvsim breakeven``: hold, offload or recompute one paused trajectory (F29-F33).

Invariant: flag parsing and printing only; the arithmetic is ``sim.sizing.breakeven`` and
every number is range-checked (``sim.sizing.bounds``: finite, in range, one line naming
the flag, exit 2) before it is used.
``--json`` prints one object on stdout; warnings (a context beyond the model's window) go
to stderr as well and never change the exit status.
"""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.cli._common import load_with_sets, parse_sets, print_json, print_warnings
from sim.errors import KvsimError
from sim.policy.analytic import EngineView, engine_view
from sim.profiles import load_accelerator, load_model, load_node
from sim.sizing.bounds import MAX_GPUS, MAX_TIME_S, check_number
from sim.sizing.breakeven import (
    BreakEvenInputs,
    BreakEvenResult,
    break_even,
    prefill_rate,
)
from sim.units import GB

HELP = """Pause economics of one trajectory: reload time over the host link, offload round
trip, recompute time, their ratio, the memory-time cost of holding for --wait (the bytes
every GPU holds: an MLA latent or a replicated KV head counts once per rank, as the
engine charges it), and the break-even wait (F33) above which offloading beats holding.

Each GPU moves its own share of the KV over its own link, all at once: --link-gb-per-s is
the per-GPU one-way bandwidth in GB/s (10^9 B/s) \\[default: the GPU profile's effective
figure]. The prefill rate is --prefill-tflops (the replica's sustained FLOP/s, in 10^12)
or --prefill-mfu x dense BF16 peak x GPUs in the replica. Recompute counts F30's linear
term 2 x P x S; --attention adds F23's attention term, its (query, key) pairs counted under
--attention-mask: causal (default, as the engine prices a prefill: 4 L d_model S (S + 1) /
2) or full (F23's square, 4 L d_model S^2, as the chapter states it; before the flag
existed --attention counted the square). Arithmetic only: the weights are
not checked to fit; a context beyond the model's window is a warning (exit 0).

With --wait, the decision is the engine's break_even pause policy's, asked with these
figures (hold, offload_host, offload_nvme, or recompute when the reload is not faster,
F31): host DRAM and NVMe from --node's profile (without it: host DRAM with room, no NVMe),
its horizon --horizon-s \\[default: the policy's]. "decision" in --json stays F33's hold or
offload alone; "policy_decision" is the engine's. With an accelerator profile (--gpu or
--node) the engine's own count of the recompute is shown beside F30's (its per_group step
pricer: layer GEMMs, the LM head on each chunk's last token, the attention under
--attention-mask, in the default scheduler's chunks). Every
number must be finite and in range (a one-line error naming the flag, exit 2). Example
(E24):

  kvsim breakeven --model llama-3.1-70b --params 70.6e9 --gpu h100-sxm-80gb --num-gpus 8
  --context 32768 --link-gb-per-s 64 --prefill-mfu 0.45 --wait 45
"""


def register(app: typer.Typer) -> None:
    """Add ``breakeven`` to the app."""
    app.command("breakeven", help=HELP)(breakeven)


#: the flags of ``kvsim breakeven`` (module level, so that ``breakeven`` itself stays short)
Model = Annotated[str, typer.Option(help="Model profile name.")]
Context = Annotated[int, typer.Option(help="Tokens of the paused trajectory's context.")]
NumGpus = Annotated[int, typer.Option(help="GPUs holding the trajectory (tp x pp).")]
Gpu = Annotated[str | None, typer.Option(help="Accelerator profile (default link and peak).")]
Tp = Annotated[int | None, typer.Option(help="Tensor parallelism \\[default: num_gpus / pp].")]
Pp = Annotated[int, typer.Option(help="Pipeline parallelism.")]
Params = Annotated[float | None, typer.Option(help="Parameter count override, e.g. 70e9.")]
KvDtype = Annotated[str | None, typer.Option(help="KV element type \\[default: model's].")]
Link = Annotated[float | None, typer.Option(help="Per-GPU one-way link, GB/s.")]
Mfu = Annotated[float | None, typer.Option(help="Prefill MFU on the GPU's BF16 peak.")]
Tflops = Annotated[float | None, typer.Option(help="Replica's sustained prefill rate, TFLOP/s.")]
Attention = Annotated[
    bool, typer.Option("--attention", help="Add the attention term to the recompute.")
]
AttentionMask = Annotated[
    str,
    typer.Option(help="Pairs the attention term counts: causal or full (F23's square)."),
]
Wait = Annotated[float | None, typer.Option(help="Expected tool wait in seconds.")]
MuRatio = Annotated[float, typer.Option(help="mu_HBM / mu_DRAM shadow-price ratio (> 1).")]
StallS = Annotated[float, typer.Option(help="Resume stall the scheduler accepts, seconds.")]
Node = Annotated[
    str | None,
    typer.Option(help="Node profile: host DRAM and NVMe for the decision (and the GPU)."),
]
HorizonS = Annotated[
    float | None,
    typer.Option(help="break_even's longest wait in host DRAM, s \\[default: the policy's]."),
]
Profiles = Annotated[list[str] | None, typer.Option(help="Extra profile folder(s).")]
Sets = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a profile field: model.F=V or gpu.F=V."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def breakeven(
    model: Model,
    context: Context,
    num_gpus: NumGpus = 1,
    gpu: Gpu = None,
    tp: Tp = None,
    pp: Pp = 1,
    params: Params = None,
    kv_dtype: KvDtype = None,
    link_gb_per_s: Link = None,
    prefill_mfu: Mfu = None,
    prefill_tflops: Tflops = None,
    attention: Attention = False,
    attention_mask: AttentionMask = "causal",
    wait: Wait = None,
    mu_ratio: MuRatio = math.inf,
    stall_s: StallS = 0.0,
    node: Node = None,
    horizon_s: HorizonS = None,
    profiles: Profiles = None,
    set_: Sets = None,
    json_out: JsonOut = False,
) -> None:
    """Parse, compute, print."""
    sets = parse_sets(set_, ("model", "gpu"))
    prof = load_with_sets(load_model, model, profiles, sets["model"], "model")
    node_prof = load_node(node, profiles) if node else None
    gpu = gpu or (node_prof.accelerator if node_prof else None)  # --node's GPU by default
    acc = load_with_sets(load_accelerator, gpu, profiles, sets["gpu"], "gpu") if gpu else None
    tp = _tensor_parallel(num_gpus, tp, pp)
    link = _link(link_gb_per_s, acc)
    rate = prefill_rate(prefill_mfu, prefill_tflops, acc, num_gpus)
    result = break_even(
        inputs := BreakEvenInputs(  # checks every number's range (sim.sizing.bounds)
            model=prof,
            context_tokens=context,
            link_bw_bytes_per_s=link,
            prefill_flops_per_s=rate.flops_per_s,
            tp=tp,
            pp=pp,
            params=params,
            kv_dtype=kv_dtype,
            attention=attention,
            attention_mask=attention_mask,
            wait_s=wait,
            mu_ratio=mu_ratio,
            stall_s=stall_s,
        )
    )
    if horizon_s is not None:
        check_number(horizon_s, "--horizon-s", 0, MAX_TIME_S, low_open=True)
    view = engine_view(inputs, result, acc, node_prof, horizon_s)
    # --gpu or --num-gpus against --node (whose tiers the decision reads): said, not refused
    said = list(result.warnings)
    if acc is not None:  # an nvfp4 KV on a chip without FP4: said, as plan and run say it
        dtypes = [kv_dtype or prof.kv_dtype, *(getattr(g, "kv_dtype", None) for g in prof.kv_groups())]
        said += [w for w in [acc.fp4_kv_warning(dtypes)] if w]
    if node_prof is not None and gpu:
        said += [f"--node: {w}" for w in node_prof.mismatch(gpu, num_gpus)]
    if json_out:
        print_json({**result.to_dict(), "prefill_rate_basis": rate.basis, **view.to_dict(),
                    "warnings": said})  # fmt: skip
    else:
        _print(result, rate.basis, view, node)
    print_warnings(said)


def _tensor_parallel(num_gpus: int, tp: int | None, pp: int) -> int:
    """TP from the flags (default num_gpus / pp); the GPUs must be exactly tp x pp."""
    check_number(num_gpus, "--num-gpus", 1, MAX_GPUS)
    check_number(pp, "--pp", 1, MAX_GPUS)
    if tp is not None:
        check_number(tp, "--tp", 1, MAX_GPUS)
    tp = tp if tp is not None else num_gpus // pp
    if tp < 1 or num_gpus != tp * pp:
        raise KvsimError(f"--num-gpus {num_gpus} must equal tp x pp = {tp} x {pp}")
    return tp


def _link(link_gb_per_s, acc) -> float:
    if link_gb_per_s is not None:
        return link_gb_per_s * GB
    if acc is None:
        raise KvsimError("give --link-gb-per-s, or --gpu to use its profile's host link")
    return acc.host_link.usable_bw_bytes_per_s


def _print(r: BreakEvenResult, basis: str, view: EngineView, node: str | None) -> None:
    t = Table(show_header=False, title=f"Pause economics at {r.context_tokens:,} tokens")
    t.add_row("KV state", f"{r.kv_bytes / GB:,.3f} GB ({r.kv_bytes_per_gpu / GB:,.3f} GB per GPU)")
    if r.kv_bytes_all_gpus != r.kv_bytes:  # TP replicates it (an MLA latent, KV heads)
        t.add_row("held on all GPUs", f"{r.kv_bytes_all_gpus / GB:,.3f} GB (hold cost, offload)")
    t.add_row("reload (one way)", f"{r.reload_s * 1e3:,.2f} ms")
    t.add_row("offload round trip", f"{r.round_trip_s * 1e3:,.2f} ms")
    t.add_row("recompute", f"{r.recompute_s:,.4f} s ({r.recompute_flops / 1e12:,.1f} TFLOP)")
    t.add_row("engine's recompute count", _engine_count(view))
    t.add_row("prefill rate (recompute)", basis)
    t.add_row("recompute / reload", f"{r.recompute_over_reload:,.1f}x")
    t.add_row("break-even wait (F33)", f"{r.break_even_wait_s * 1e3:,.2f} ms")
    if r.wait_s is not None:
        t.add_row(f"hold cost for {r.wait_s:g} s", f"{_sig(r.hold_gb_s)} GB*s")
        t.add_row("F33 at this wait", f"{r.decision} (wait vs the break-even wait alone)")
        t.add_row("parking tiers", _tiers(view, node))
        t.add_row("decision at this wait", f"{view.policy_decision}: {view.policy_reason} "
                  f"(the engine's break_even policy, horizon {view.horizon_s:g} s)")  # fmt: skip
    Console().print(t)


def _sig(x: float | None) -> str:
    """4 significant digits (0.537, 2.147, 483.2), whole numbers from 10,000 up."""
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


def _engine_count(view: EngineView) -> str:
    if view.engine_recompute_flops is None or view.engine_over_f30 is None:
        return f"n/a ({view.engine_recompute_note})"
    chunks = view.engine_recompute_chunks or []
    return (f"{view.engine_recompute_flops / 1e12:,.1f} TFLOP ({view.engine_over_f30 - 1:+.1%} "
            f"vs the recompute above; {view.engine_recompute_pricing} pricing, "
            f"{len(chunks)} chunk(s))")  # fmt: skip


def _tiers(view: EngineView, node: str | None) -> str:
    if node is None:
        return "host DRAM assumed to have room; no NVMe (--node names a node profile)"
    host = "none" if view.host_free_bytes is None else f"{view.host_free_bytes / GB:,.0f} GB"
    nvme = "no NVMe" if not view.nvme_bw_bytes_per_s else (
        f"NVMe {view.nvme_free_bytes / GB:,.0f} GB at {view.nvme_bw_bytes_per_s / GB:,.0f} GB/s")
    return f"{node}: pinned host DRAM {host}, {nvme}"

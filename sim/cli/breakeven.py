"""``kvsim breakeven``: hold, offload or recompute one paused trajectory (F29-F33).

Invariant: flag parsing and printing only; the arithmetic is ``sim.sizing.breakeven``.
``--json`` prints one object on stdout; warnings (a context beyond the model's window) go
to stderr as well and never change the exit status.
"""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.cli._common import parse_sets, print_json, print_warnings
from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.sizing.breakeven import BreakEvenInputs, BreakEvenResult, break_even
from sim.units import GB

HELP = """Pause economics of one trajectory: reload time over the host link, offload round
trip, recompute time, their ratio, the memory-time cost of holding for --wait, and the
break-even wait (F33) above which offloading beats holding.

Each GPU moves its own share of the KV over its own link, all at once: --link-gb-per-s is
the per-GPU one-way bandwidth in GB/s (10^9 B/s) [default: the GPU profile's effective
figure]. The prefill rate is --prefill-tflops (the replica's sustained FLOP/s, in 10^12)
or --prefill-mfu x dense BF16 peak x GPUs in the replica. Recompute counts F30's linear
term 2 x P x S; --attention adds F23's 4 L d_model S^2. Arithmetic only: the weights are
not checked to fit; a context beyond the model's window is a warning (exit 0). Example
(SPEC E24):

  kvsim breakeven --model llama-3.1-70b --params 70.6e9 --gpu h100-sxm-80gb --num-gpus 8
  --context 32768 --link-gb-per-s 64 --prefill-mfu 0.45 --wait 45
"""


def register(app: typer.Typer) -> None:
    """Add ``breakeven`` to the app."""
    app.command("breakeven", help=HELP)(breakeven)


def breakeven(
    model: Annotated[str, typer.Option(help="Model profile name.")],
    context: Annotated[int, typer.Option(help="Tokens of the paused trajectory's context.")],
    num_gpus: Annotated[int, typer.Option(help="GPUs holding the trajectory (tp x pp).")] = 1,
    gpu: Annotated[
        str | None, typer.Option(help="Accelerator profile (default link and peak).")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="Tensor parallelism [default: num_gpus / pp].")
    ] = None,
    pp: Annotated[int, typer.Option(help="Pipeline parallelism.")] = 1,
    params: Annotated[
        float | None, typer.Option(help="Parameter count override, e.g. 70e9.")
    ] = None,
    kv_dtype: Annotated[
        str | None, typer.Option(help="KV element type [default: model's].")
    ] = None,
    link_gb_per_s: Annotated[float | None, typer.Option(help="Per-GPU one-way link, GB/s.")] = None,
    prefill_mfu: Annotated[
        float | None, typer.Option(help="Prefill MFU on the GPU's BF16 peak.")
    ] = None,
    prefill_tflops: Annotated[
        float | None, typer.Option(help="Replica's sustained prefill rate, TFLOP/s.")
    ] = None,
    attention: Annotated[
        bool, typer.Option("--attention", help="Add the attention term to the recompute.")
    ] = False,
    wait: Annotated[float | None, typer.Option(help="Expected tool wait in seconds.")] = None,
    mu_ratio: Annotated[
        float, typer.Option(help="mu_HBM / mu_DRAM shadow-price ratio (> 1).")
    ] = math.inf,
    stall_s: Annotated[
        float, typer.Option(help="Resume stall the scheduler accepts, seconds.")
    ] = 0.0,
    profiles: Annotated[list[str] | None, typer.Option(help="Extra profile folder(s).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a profile field: model.F=V or gpu.F=V."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Parse, compute, print."""
    sets = parse_sets(set_, ("model", "gpu"))
    prof = load_model(model, profiles, sets["model"])
    acc = load_accelerator(gpu, profiles, sets["gpu"]) if gpu else None
    tp = tp if tp is not None else num_gpus // max(pp, 1)
    if tp < 1 or num_gpus != tp * pp:
        raise KvsimError(f"--num-gpus {num_gpus} must equal tp x pp = {tp} x {pp}")
    link = _link(link_gb_per_s, acc)
    rate = _prefill_rate(prefill_mfu, prefill_tflops, acc, num_gpus)
    if wait is not None and wait < 0:
        raise KvsimError("--wait must be >= 0")
    result = break_even(
        BreakEvenInputs(
            model=prof,
            context_tokens=context,
            link_bw_bytes_per_s=link,
            prefill_flops_per_s=rate,
            tp=tp,
            pp=pp,
            params=params,
            kv_dtype=kv_dtype,
            attention=attention,
            wait_s=wait,
            mu_ratio=mu_ratio,
            stall_s=stall_s,
        )
    )
    if json_out:
        print_json(result.to_dict())
    else:
        _print(result)
    print_warnings(result.warnings)


def _link(link_gb_per_s, acc) -> float:
    if link_gb_per_s is not None:
        return link_gb_per_s * GB
    if acc is None:
        raise KvsimError("give --link-gb-per-s, or --gpu to use its profile's host link")
    return acc.host_link.usable_bw_bytes_per_s


def _prefill_rate(mfu, tflops, acc, num_gpus) -> float:
    if mfu is not None and tflops is not None:
        raise KvsimError("give --prefill-mfu or --prefill-tflops, not both")
    if tflops is not None:
        return tflops * 1e12
    if acc is None:
        raise KvsimError("give --prefill-tflops, or --gpu with --prefill-mfu (default 0.45)")
    mfu = 0.45 if mfu is None else mfu
    if not 0 < mfu <= 1:
        raise KvsimError(f"--prefill-mfu must be in (0, 1], got {mfu}")
    return mfu * acc.peak_bf16_flops_per_s * num_gpus


def _print(r: BreakEvenResult) -> None:
    t = Table(show_header=False, title=f"Pause economics at {r.context_tokens:,} tokens")
    t.add_row("KV state", f"{r.kv_bytes / GB:,.3f} GB ({r.kv_bytes_per_gpu / GB:,.3f} GB per GPU)")
    t.add_row("reload (one way)", f"{r.reload_s * 1e3:,.2f} ms")
    t.add_row("offload round trip", f"{r.round_trip_s * 1e3:,.2f} ms")
    t.add_row("recompute", f"{r.recompute_s:,.4f} s ({r.recompute_flops / 1e12:,.1f} TFLOP)")
    t.add_row("recompute / reload", f"{r.recompute_over_reload:,.1f}x")
    t.add_row("break-even wait (F33)", f"{r.break_even_wait_s * 1e3:,.2f} ms")
    if r.wait_s is not None:
        t.add_row(f"hold cost for {r.wait_s:g} s", f"{r.hold_gb_s:,.1f} GB*s")
        t.add_row("decision at this wait", r.decision)
    Console().print(t)

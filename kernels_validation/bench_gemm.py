"""Benchmark: linear-layer throughput vs tokens, on real model geometry with random weights.

Responsibility: time the four weight matrices of one transformer layer (qkv, o, gate_up,
down) and the four back to back ("layer") for token counts 1..16384. Small token counts
are the decode regime (a GEMV-like pass that streams the weights: report
``weight_bw_bytes_per_s``), large ones the prefill regime (report ``flop_per_s``); the
calibration turns them into bandwidth efficiency vs batch and MFU vs tokens.

Invariant: ``flops = 2 * tokens * in_features * out_features`` and ``weight_bytes`` is the
matrix read once; repeats cycle through enough copies of the weights that they do not
run from L2. Random weights, no downloads. Imports only torch and the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

COLUMNS = [
    "geometry", "op", "tokens", "in_features", "out_features", "dtype", "device", "flops",
    "weight_bytes", "act_bytes", "rotations", "time_s_median", "time_s_p10", "time_s_p90",
    "reps", "flop_per_s", "weight_bw_bytes_per_s",
]  # fmt: skip
OPS = ("qkv", "o", "gate_up", "down")


def layer_weights(geo: bl.Geometry, dtype, device, rotations: int, gen):
    """``rotations`` independent sets of one layer's weights, nn.Linear layout [out, in]."""
    sets = []
    for _ in range(rotations):
        ws = {}
        for op, (k, n) in geo.linear_shapes().items():
            w = torch.randn((n, k), dtype=dtype, device=device, generator=gen)
            ws[op] = w.mul_(k**-0.5)
        sets.append(ws)
    return sets


def bench_geometry(geo, tokens_list, dtype, device, gen, sink, deadline, quick) -> int:
    shapes = geo.linear_shapes()
    smallest = min(k * n for k, n in shapes.values()) * dtype.itemsize
    rotations = bl.rotation_count(smallest, device)
    sets = layer_weights(geo, dtype, device, rotations, gen)
    skipped = 0
    for tokens in tokens_list:
        x_in = {op: torch.randn((tokens, k), dtype=dtype, device=device, generator=gen)
                for op, (k, _) in shapes.items()}  # fmt: skip
        for op in (*OPS, "layer"):
            if deadline.expired():
                skipped += 1
                continue
            state = {"i": 0}
            ops = OPS if op == "layer" else (op,)

            def call(ops=ops, state=state, x_in=x_in):
                r = state["i"] = (state["i"] + 1) % rotations
                for o in ops:
                    F.linear(x_in[o], sets[r][o])

            t = bl.time_fn(call, device, warmup=2, reps=5 if quick else 20,
                           max_time_s=0.1 if quick else 0.25)  # fmt: skip
            k_sum = sum(shapes[o][0] * shapes[o][1] for o in ops)
            act = sum(tokens * (shapes[o][0] + shapes[o][1]) for o in ops) * dtype.itemsize
            flops = 2 * tokens * k_sum
            wbytes = k_sum * dtype.itemsize
            in_f, out_f = shapes[op] if op != "layer" else (geo.d_model, geo.d_model)
            sink.write({
                "geometry": geo.name, "op": op, "tokens": tokens, "in_features": in_f,
                "out_features": out_f, "dtype": str(dtype).replace("torch.", ""),
                "device": device.type, "flops": flops, "weight_bytes": wbytes,
                "act_bytes": act, "rotations": rotations, **t.row(),
                "flop_per_s": flops / t.median_s, "weight_bw_bytes_per_s": wbytes / t.median_s,
            })  # fmt: skip
            if op == "layer":
                bl.log(f"{geo.name:12s} tokens={tokens:<6} layer {t.median_s * 1e6:10.1f} us "
                       f"{flops / t.median_s / 1e12:8.2f} TFLOP/s "
                       f"{wbytes / t.median_s / 1e9:8.1f} GB/s weights")  # fmt: skip
    return skipped


def main() -> None:
    args = bl.common_args(__doc__.splitlines()[0]).parse_args()
    device = bl.pick_device(args.device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    if args.quick:
        geos, tokens_list, dtype = ["tiny"], [1, 4, 16, 64, 256], torch.float32
    else:
        geos = ["llama-3-8b", "llama-3-70b"]
        tokens_list = [2**i for i in range(15)]  # 1 .. 16384
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sink = bl.CsvSink(args.out, COLUMNS)
    deadline = bl.Deadline(args.budget_s)
    skipped = 0
    for name in geos:
        skipped += bench_geometry(bl.GEOMETRIES[name], tokens_list, dtype, device, gen, sink,
                                  deadline, args.quick)  # fmt: skip
        if device.type == "cuda":
            torch.cuda.empty_cache()
    bl.finish(sink, deadline, skipped)


if __name__ == "__main__":
    main()

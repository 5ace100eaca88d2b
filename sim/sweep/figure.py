"""The ``--vary`` figure of ``kvsim capacity``: capacity per configuration with its interval,
beside F37's two analytic estimates.

Invariant: matplotlib is imported here only, with the ``Agg`` backend (no display); the
figure is written whole (a temporary renamed over the target).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sim.errors import KvsimError


def capacity_figure(comp, path: str | Path) -> Path:
    """Write a bar chart of ``comp`` (a ``CapacityComparison``) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    labels = [str(v) for v in comp.values]
    caps = [r.capacity["value"] or 0.0 for r in comp.results]
    lows = [r.capacity["ci95_low"] for r in comp.results]
    highs = [r.capacity["ci95_high"] for r in comp.results]
    err = [
        [c - lo if lo is not None else 0.0 for c, lo in zip(caps, lows, strict=True)],
        [hi - c if hi is not None else 0.0 for c, hi in zip(caps, highs, strict=True)],
    ]
    xs = range(len(labels))
    nan = float("nan")  # a configuration without an analytic estimate: no marker
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(labels), 3.6))
    ax.bar(xs, caps, yerr=err, capsize=6, color="#4c72b0", label="simulated (95% CI)")
    ax.scatter(xs, [r.analytic_estimate["value"] or nan for r in comp.results], marker="_", s=600,
               color="#dd8452", label="F37, time-averaged context", zorder=3)  # fmt: skip
    ax.scatter(xs, [r.analytic_estimate["peak_value"] or nan for r in comp.results], marker="_", s=600,
               color="#55a868", label="F37, peak context", zorder=3)  # fmt: skip
    ax.set_xticks(list(xs), labels)
    ax.set_xlabel(comp.key)
    ax.set_ylabel(comp.results[0].capacity["unit"])
    ax.set_title(f"capacity under {', '.join(comp.results[0].slos)}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.partial.png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # ``afile/x.png``: no folder to hold it either
            tmp.unlink(missing_ok=True)
        raise KvsimError(f"--figure {path}: cannot write: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return path

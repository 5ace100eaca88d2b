"""numpy imported on first use, for modules that a quick command imports but does not run.

A module whose numpy work only happens when something runs (an allocator's hold path, a
distribution's sampling, a calibration's interpolation) writes

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = numpy_on_first_use(globals())

and uses ``np`` as before. ``kvsim validate`` imports such modules (it builds the
allocator and checks the calibration) without paying for numpy (~0.1-0.2 CPU s with its
BLAS threads; docs/performance.md, "Start-up").

Invariant: the placeholder is in the namespace only until the first attribute is read
from it; that read imports numpy and puts the numpy module itself in its place, so every
later ``np.x`` of that module is a plain global look-up (no wrapper on the hot path).
"""

from __future__ import annotations

from typing import Any


class _NumpyOnFirstUse:
    """Stands for ``numpy`` under ``name`` in ``namespace`` until its first attribute read."""

    __slots__ = ("_namespace", "_name")

    def __init__(self, namespace: dict[str, Any], name: str) -> None:
        self._namespace = namespace
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import numpy

        if self._namespace.get(self._name) is self:
            self._namespace[self._name] = numpy
        return getattr(numpy, attr)

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


def numpy_on_first_use(namespace: dict[str, Any], name: str = "np") -> Any:
    """A placeholder for ``numpy`` bound to ``namespace[name]`` (pass ``globals()``) that
    imports numpy and replaces itself there on its first attribute read."""
    return _NumpyOnFirstUse(namespace, name)

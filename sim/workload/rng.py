"""Named random streams derived from the scenario seed.

Responsibility: ``streams("arrivals")`` is a numpy ``Generator`` whose state depends only
on the seed and the name, so drawing from one stream never changes another (adding fork
decisions does not move arrival times).

Invariant: the name is hashed with BLAKE2b (stable across processes and Python versions,
unlike ``hash``); the same seed and name give the same stream in every run.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import TYPE_CHECKING

from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())


def stream_key(name: str) -> int:
    """A stable 64-bit integer for a stream name."""
    return int.from_bytes(blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")


class Streams:
    """A lazily created ``numpy.random.Generator`` per stream name."""

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed = seed
        self._streams: dict[str, np.random.Generator] = {}

    def __call__(self, name: str) -> np.random.Generator:
        g = self._streams.get(name)
        if g is None:
            g = np.random.default_rng([self.seed, stream_key(name)])
            self._streams[name] = g
        return g

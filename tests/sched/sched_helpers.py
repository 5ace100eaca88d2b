"""Test helpers: a KV manager over a small real allocator (1 byte per token), requests by size."""

from __future__ import annotations

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.sched import Request, VllmV1Config, VllmV1Scheduler


def kv_manager(pool_tokens: int, kind: str = "paged", **options) -> KVManager:
    alloc = make_allocator(kind, pool_bytes=pool_tokens, kv_bytes_per_token=1, **options)
    return KVManager(alloc)


def scheduler(pool_tokens: int = 4096, kind: str = "paged", alloc_options=None, **config):
    kv = kv_manager(pool_tokens, kind, **(alloc_options or {}))
    return VllmV1Scheduler(VllmV1Config(**config), kv)


def end_turn(kv: KVManager, req: Request) -> None:
    """What the engine does when a request finished: a last turn releases its sequence,
    any other turn is held (the trivial pause, as the ``hold`` policy would)."""
    if req.last_turn:
        kv.release(req.seq_id)
    else:
        kv.hold(req.seq_id, req.traj_id, key=req.req_id)


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def req(self, prompt: int, output: int, **kw) -> Request:
        self.n += 1
        kw.setdefault("seq_id", self.n)
        seq = kw.pop("seq_id")
        return Request(self.n, seq, prompt, output, **kw)

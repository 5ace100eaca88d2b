"""A sliding window's (and a chunk's) blocks during chunked prefill, by vLLM V1's rule.

vLLM V1 (``vllm/v1/core/kv_cache_manager.py`` ``allocate_slots``) first calls
``remove_skipped_blocks(request, num_computed_tokens)``, which frees the blocks wholly
before ``get_num_skipped_tokens(num_computed)`` (``SlidingWindowManager``:
``max(0, num_computed - w + 1)``; ``ChunkedLocalAttentionManager``: ``c * floor(num_computed
/ c)``), then allocates up to ``cdiv(num_computed + chunk, B)`` blocks. A step that
computes ``chunk`` tokens after ``num_computed`` therefore holds every block with a token in
``[num_computed - w + 1, num_computed + chunk)``: ``w - 1 + chunk`` tokens' worth, not the
last ``w``. The engine holds exactly that per step (``KVManager.step``,
``PagedAllocator.set_step``); a decode step (chunk 1) holds the last ``w`` tokens' blocks,
as before.

The side group here has the table's bytes per token, so a sequence's side blocks are the
window's blocks of one layer.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.sched import FINISHED, Request, VllmV1Config, VllmV1Scheduler
from sim.sizing.group_demand import GroupDemand, KVGroups

B = 16


def _sched(kind: str, window: int, pool_tokens: int = 1 << 20, block: int = B, **config):
    side = GroupDemand("local", kind, 1.0, window, 0.0)
    groups = KVGroups(1.0, (side,), 2.0)
    alloc = make_allocator("paged", pool_bytes=pool_tokens, kv_bytes_per_token=1.0,
                           block_size=block, kv_groups=groups)  # fmt: skip
    return VllmV1Scheduler(VllmV1Config(**config), KVManager(alloc))


def _side_blocks(s: VllmV1Scheduler, req: Request) -> int:
    return len(s.kv.alloc._side.get(req.seq_id, ()))


def _held_per_step(s: VllmV1Scheduler, req: Request) -> list[int]:
    """The request's side blocks at each step (after scheduling, as memory.parquet's row),
    the step's deferred appends made first (so a decode step shows its own token)."""
    s.add(req)
    held = []
    while req.status != FINISHED:
        plan = s.schedule()
        s.kv.flush_all()
        s.kv.check_invariants()
        held.append(_side_blocks(s, req))
        s.commit(plan)
    return held


def test_window_128_prompt_1000_in_chunks_of_256():
    """Steps [0,256) [256,512) [512,768) [768,1000), then decodes. Blocks held:
    cdiv(end, 16) - floor(max(0, computed - 127) / 16):
    16 - 0 = 16; 32 - floor(129/16) = 32 - 8 = 24; 48 - floor(385/16) = 48 - 24 = 24;
    63 - floor(641/16) = 63 - 40 = 23; the first decode [1000, 1001): 63 - floor(873/16)
    = 63 - 54 = 9; [1001, 1002): 63 - floor(874/16) = 9. Before the fix the window held
    the prompt's last 128 tokens' 9 blocks from admission on."""
    s = _sched("sliding_window", 128, max_num_batched_tokens=256)
    assert _held_per_step(s, Request(1, 1, 1000, 3)) == [16, 24, 24, 23, 9, 9]


def test_window_128_prompt_1000_in_chunks_of_64():
    """Steps of 64: [0,64) 4 blocks; [64,128) 8; from [128,192) on the window's 127
    tokens before the chunk plus its 64: cdiv(n + 64, 16) - floor((n - 127) / 16) = 12
    (n = 128: 12 - 0; n = 192: 16 - 4; ...; n = 896: 60 - 48); the last chunk [960, 1000):
    63 - floor(833/16) = 63 - 52 = 11; then decodes, 9."""
    s = _sched("sliding_window", 128, max_num_batched_tokens=64)
    held = _held_per_step(s, Request(1, 1, 1000, 2))
    assert held == [4, 8] + [12] * 13 + [11, 9]


def test_long_prefill_threshold_is_the_chunk():
    s = _sched("sliding_window", 128, max_num_batched_tokens=8192, long_prefill_token_threshold=256)
    assert _held_per_step(s, Request(1, 1, 1000, 1)) == [16, 24, 24, 23]


def test_chunked_local_holds_its_chunk_and_the_new_tokens():
    """Attention chunk 256, prompt 1000 in chunks of 384: [0,384) 24 - 0 = 24;
    [384,768): 48 - floor(256/16) = 48 - 16 = 32; [768,1000): 63 - floor(768/16) = 63 - 48
    = 15; decode [1000, 1001): 63 - floor(768/16) = 15 (the chunk from 768 on)."""
    s = _sched("chunked_local", 256, max_num_batched_tokens=384)
    assert _held_per_step(s, Request(1, 1, 1000, 2)) == [24, 32, 15, 15]


def test_one_chunk_prompt_holds_all_its_tokens_then_the_window():
    """A 1,000-token prompt in one step writes all 1,000 tokens in the window's layers:
    63 blocks; the first decode frees all but the last window's (9)."""
    s = _sched("sliding_window", 128)
    assert _held_per_step(s, Request(1, 1, 1000, 2)) == [63, 9]


def test_a_chunk_that_does_not_fit_preempts_like_a_table_block():
    """Two 1,000-token prompts in chunks of 256: the first step holds 63 table + 16
    window blocks each (158); the second chunk [256, 512) needs 24 window blocks (8 more)
    but 4 are free: the most recently admitted request is preempted (its blocks freed,
    recomputed later), as vLLM does when allocate_slots fails."""
    s = _sched("sliding_window", 128, pool_tokens=(158 + 4) * B, max_num_batched_tokens=512,
               long_prefill_token_threshold=256)  # fmt: skip
    a, b = Request(1, 1, 1000, 2), Request(2, 2, 1000, 2)
    s.add(a)
    s.add(b)
    plan = s.schedule()
    s.kv.check_invariants()
    assert [(r.req_id, n) for r, n in plan.scheduled] == [(1, 256), (2, 256)]
    assert _side_blocks(s, a) == _side_blocks(s, b) == 16
    s.commit(plan)
    plan = s.schedule()
    s.kv.check_invariants()
    assert plan.preempted == [b] and [(r.req_id, n) for r, n in plan.scheduled] == [(1, 256)]
    assert _side_blocks(s, a) == 24 and not s.kv.is_live(b.seq_id) and b.num_computed == 0


def test_a_new_request_whose_first_chunk_does_not_fit_waits():
    """Admission allocates the whole prompt (rule 3.4.2) and the first chunk's window
    blocks, counted together before any is taken; when they do not fit the request is not
    admitted and waits (vLLM's allocate_slots fails for it), its lookup not counted
    (tests/memory/test_refused_admission.py: with a prefix cache, nothing is evicted)."""
    s = _sched("sliding_window", 128, pool_tokens=(63 + 9 + 63 + 40) * B)
    a, b = Request(1, 1, 1000, 5), Request(2, 2, 1000, 5)
    s.add(a)
    plan = s.schedule()  # a alone: 63 table + 63 window blocks
    s.kv.check_invariants()
    s.commit(plan)
    s.add(b)
    plan = s.schedule()  # a decodes (9 window blocks); b: 63 + 63 > 175 - 72 = 103 free
    s.kv.check_invariants()
    assert [r.req_id for r, _ in plan.scheduled] == [1]
    assert plan.waiting_blocked and b.num_computed == 0 and b.lookup_tokens == 0
    assert not s.kv.is_live(b.seq_id) and list(s.waiting) == [b]


# ---------------------------------------------------------------- against vLLM's rule
class _VllmWindowManager:
    """A straightforward re-implementation of vLLM V1's ``SingleTypeKVCacheManager`` for
    one request: a block list with null entries; ``remove_skipped_blocks(num_computed)``
    nulls the blocks wholly before ``get_num_skipped_tokens``; ``allocate_new_blocks``
    extends to ``cdiv(num_tokens, B)``; held = the non-null entries."""

    def __init__(self, kind: str, window: int, block: int) -> None:
        self.kind, self.window, self.block = kind, window, block
        self.blocks: list[bool] = []  # True: a real block, False: the null block

    def skipped(self, computed: int) -> int:
        if self.kind == "sliding_window":
            return max(0, computed - self.window + 1)
        return computed // self.window * self.window

    def step(self, computed: int, new: int) -> int:
        for i in range(min(self.skipped(computed) // self.block, len(self.blocks))):
            self.blocks[i] = False
        need = -(-(computed + new) // self.block)
        self.blocks += [True] * (need - len(self.blocks))
        return sum(self.blocks)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["sliding_window", "chunked_local"]),
    window=st.integers(1, 300),
    block=st.sampled_from([1, 4, 16, 32]),
    budget=st.integers(8, 700),
    threshold=st.sampled_from([0, 5, 64, 100]),
    prompts=st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 6)), min_size=1, max_size=4),
)
def test_engine_blocks_per_step_are_vllms(kind, window, block, budget, threshold, prompts):
    """Several requests share the token budget (so their chunks vary step by step); at
    every step each running request's window blocks equal the re-implementation's, fed
    the (num_computed, tokens) vLLM's allocate_slots would get."""
    s = _sched(kind, window, block=block, max_num_batched_tokens=budget,
               long_prefill_token_threshold=threshold)  # fmt: skip
    reqs = [Request(i, i, p, o) for i, (p, o) in enumerate(prompts, 1)]
    ref = {r.req_id: _VllmWindowManager(kind, window, block) for r in reqs}
    for r in reqs:
        assert s.add(r)
    for step in range(10_000):
        if all(r.status == FINISHED for r in reqs):
            break
        before = {r.req_id: r.num_computed for r in reqs}
        plan = s.schedule()
        assert not plan.preempted  # the pool is ample: vLLM's rule alone decides
        s.kv.flush_all()
        if step % 16 == 0:
            s.kv.check_invariants()
        for r, n in plan.scheduled:
            want = ref[r.req_id].step(before[r.req_id], n)
            assert _side_blocks(s, r) == want, (r.req_id, before[r.req_id], n)
        s.commit(plan)
        for r in reqs:
            if r.status == FINISHED and s.kv.is_live(r.seq_id):
                s.kv.release(r.seq_id)
    assert all(r.status == FINISHED for r in reqs)

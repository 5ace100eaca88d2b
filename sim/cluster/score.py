"""The cluster routing score (F20) and the chunk arithmetic of rule 3.15.4 / E17.

Responsibility: the pure numbers a prefix-aware router needs, with no state and no
simulation: ``routing_score`` (F20: affinity to a node's cached prefix against its load),
``best_node`` (the argmax, ties to the lowest node id), ``chunks_skipped`` (whole chunks of
a matched prefix the chosen node does not prefill) and ``prefill_tokens`` (the suffix it
does prefill).

Invariant: the score is ``mu * (Match / S) - (1 - mu) * (L / L_max) ** gamma`` with the
two degenerate cases defined rather than raised: ``S = 0`` gives affinity 0 and
``L_max = 0`` gives load term 0; for ``mu`` in [0, 1] it never decreases with the match
and never increases with the load. ``best_node`` is deterministic (lowest id wins a tie).
"""

from __future__ import annotations

from collections.abc import Sequence

#: tokens per chunk of the chained chunk hashes (F19)
CHUNK_TOKENS = 16


def routing_score(
    match_tokens: int,
    prompt_tokens: int,
    load: float,
    load_max: float,
    *,
    mu: float,
    gamma: float,
) -> float:
    """F20 for one node: ``mu * (Match / S) - (1 - mu) * (L / L_max) ** gamma``.

    ``match_tokens`` (Match_j) is the node's cached prefix of the prompt, ``prompt_tokens``
    (S) the prompt length, ``load`` (L_j) its queued + running requests and ``load_max``
    (L_max) the normaliser. ``S = 0`` -> affinity 0; ``L_max = 0`` -> load term 0 (no node
    is loaded, or nothing normalises). A match longer than the prompt counts as the prompt.
    """
    affinity = min(match_tokens, prompt_tokens) / prompt_tokens if prompt_tokens > 0 else 0.0
    penalty = (load / load_max) ** gamma if load_max > 0 else 0.0
    return mu * affinity - (1.0 - mu) * penalty


def best_node(scores: Sequence[float]) -> int:
    """Index of the highest score; a tie goes to the lowest index (node id)."""
    if not scores:
        raise ValueError("best_node: no nodes to choose from")
    best, best_score = 0, scores[0]
    for j in range(1, len(scores)):
        if scores[j] > best_score:  # strictly greater: an equal later node never wins
            best, best_score = j, scores[j]
    return best


def chunks_skipped(match_tokens: int, chunk_tokens: int = CHUNK_TOKENS) -> int:
    """Whole chunks of the matched prefix (rule 3.15.4): ``floor(Match / chunk)``."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens!r}")
    return max(match_tokens, 0) // chunk_tokens


def prefill_tokens(prompt_tokens: int, match_tokens: int) -> int:
    """Prompt tokens the chosen node prefills: ``S - Match`` (never below 0).

    Rule 3.15's arithmetic; the node itself recomputes at least one token of a fully cached
    prompt and shares whole blocks only (its own cap and F18 truncation).
    """
    return max(prompt_tokens - max(match_tokens, 0), 0)

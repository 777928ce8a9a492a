"""``compress_to_tokens``: fit a search's hits to a prompt budget, weakest first.

Why this order: the hits arrive best first, so dropping whole hits from the end keeps the passages
that matter most intact; only when the best hits alone overflow is text cut, and then from the tail
of the longest hit, which loses the least per token saved. Tokens are counted with the embedder's
own counter, the unit the caller's model budget is closest to among what this process has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.embeddings.tokens import head_tokens
from context_engine.models import Hit

#: a hit is never cut below this many tokens; below it the hit is dropped instead
MIN_HIT_TOKENS = 16


def compress(hits: list[Hit], budget: int, count_tokens: Callable[[str], int]) -> tuple[list[Hit], dict[str, Any]]:
    """The hits that fit ``budget`` tokens, and what was cut (``usage["compression"]``)."""
    sizes = [count_tokens(h.chunk_text) for h in hits]
    before = sum(sizes)
    kept = list(hits)
    dropped = 0
    while kept and sum(sizes) > budget and len(kept) > 1:
        kept.pop()
        sizes.pop()
        dropped += 1
    truncated = 0
    while kept and sum(sizes) > budget:
        longest = max(range(len(kept)), key=lambda i: sizes[i])
        excess = sum(sizes) - budget
        target = sizes[longest] - excess
        if target < MIN_HIT_TOKENS:
            if len(kept) == 1:
                target = max(1, min(budget, sizes[longest]))
            else:
                kept.pop(longest)
                sizes.pop(longest)
                dropped += 1
                continue
        text = head_tokens(kept[longest].chunk_text, target, count_tokens)
        kept[longest] = kept[longest].model_copy(update={"chunk_text": text})
        sizes[longest] = count_tokens(text)
        truncated += 1
        if sizes[longest] > target:  # a single token the counter cannot split: stop cutting
            break
    report = {
        "budget": budget,
        "tokens_before": before,
        "tokens_after": sum(sizes),
        "hits_dropped": dropped,
        "hits_truncated": truncated,
    }
    return kept, report

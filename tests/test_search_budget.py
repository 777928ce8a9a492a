"""``search(compress_to_tokens=N)``: the hits fit N tokens of the embedder's counter, the weakest
dropped first and then the longest cut at a word, with ``usage["compression"]`` saying what was cut."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine, InvalidRequest


async def test_hits_fit_the_budget_weakest_first(engine: ContextEngine) -> None:
    for i in range(6):
        body = f"Glacier report {i}: " + "ice retreats each summer. " * (10 + 10 * i)
        await engine.ingest(text=body, name=f"g{i}.md")
    whole = await engine.search("glacier ice report", principals=TRUSTED, top_k=6)
    count = engine.embedder.count_tokens
    total = sum(count(h.chunk_text) for h in whole.hits)
    budget = total // 3
    cut = await engine.search("glacier ice report", principals=TRUSTED, top_k=6, compress_to_tokens=budget)
    used = sum(count(h.chunk_text) for h in cut.hits)
    report = cut.usage["compression"]
    assert used <= budget and report["tokens_after"] == used and report["tokens_before"] == total
    assert report["hits_dropped"] >= 1 and len(cut.hits) == len(whole.hits) - report["hits_dropped"]
    assert [h.chunk_id for h in cut.hits] == [h.chunk_id for h in whole.hits][: len(cut.hits)]  # weakest went
    tiny = await engine.search("glacier ice report", principals=TRUSTED, top_k=6, compress_to_tokens=20)
    assert len(tiny.hits) == 1 and count(tiny.hits[0].chunk_text) <= 20 and tiny.usage["compression"]["hits_truncated"]
    for bad in (0, -3, True, "50"):
        with pytest.raises(InvalidRequest, match="compress_to_tokens"):
            await engine.search("glacier", principals=TRUSTED, compress_to_tokens=bad)  # type: ignore[arg-type]

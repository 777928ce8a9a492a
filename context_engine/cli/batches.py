"""``context-engine batches poll``: finish the documents ``ingest(batch=True)`` left waiting.

Meant for a scheduler (cron, a periodic job): each run asks the provider once about every pending
job, stores the vectors of the finished ones and prints one line per job. It exits 0 when the poll
ran, whatever the jobs' outcomes (a failed job is reported, and its document is left resumable),
and 1 when the poll itself could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from typing import Any

from context_engine.cli.settings import config_for
from context_engine.errors import ContextEngineError
from context_engine.ingest.batch_poll import BatchOutcome


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``batches`` (with ``poll``) to the CLI's subcommands."""
    batches = subparsers.add_parser("batches", help="embedding batches submitted with ingest(batch=True)")
    actions = batches.add_subparsers(dest="batches_command", metavar="ACTION")
    poll = actions.add_parser(
        "poll", help="ask the provider about every pending batch once; store the finished ones and print each"
    )
    poll.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    poll.add_argument("--json", action="store_true", help="print one JSON object per batch instead of text")
    batches.set_defaults(batches_parser=batches)
    return batches


def run(args: argparse.Namespace) -> int:
    """Run the ``batches`` action in ``args``; 0 when the poll ran, 1 when it could not, 2 on bad usage."""
    if getattr(args, "batches_command", None) != "poll":
        args.batches_parser.print_help()
        return 2
    try:
        outcomes = asyncio.run(_poll(args.database_url))
    except (ContextEngineError, ValueError, OSError) as exc:
        code = exc.code if isinstance(exc, ContextEngineError) else type(exc).__name__
        print(f"error: {code}: {exc}", file=sys.stderr)
        return 1
    for outcome in outcomes:
        print(json.dumps(outcome.model_dump(mode="json")) if args.json else describe(outcome))
    if not args.json:
        print(summary(outcomes))
    return 0


async def _poll(database_url: str | None) -> list[BatchOutcome]:
    from context_engine.engine import ContextEngine

    config = config_for(database_url)
    async with ContextEngine(config) as engine:
        return await engine.poll_batches()


def describe(outcome: BatchOutcome) -> str:
    """One line for one job: what happened, to which document, through which provider job."""
    head = f"{outcome.outcome:<11} {outcome.document_id} {outcome.name!r} batch {outcome.batch_id}"
    if outcome.outcome == "completed":
        return f"{head}: {outcome.stored} of {outcome.chunks} vectors stored, document completed"
    status = f" ({outcome.provider_status})" if outcome.provider_status else ""
    return f"{head}{status}" + (f": {outcome.message}" if outcome.message else "")


def summary(outcomes: list[BatchOutcome]) -> str:
    if not outcomes:
        return "no pending batches"
    counts = Counter(o.outcome for o in outcomes)
    return f"polled {len(outcomes)} batches: " + ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))

"""``context-engine ingest``: files and folders, one document per file (``--bulk``: :mod:`.bulk`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from context_engine.cli.settings import config_for


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("ingest", help="ingest files and folders")
    parser.add_argument("paths", nargs="+", type=Path, help="files or folders (folders are walked)")
    parser.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    parser.add_argument("--source-id", default="default", help="the source (namespace) to file under")
    parser.add_argument("--acl", default="", help="comma-separated principals; empty = visible to everyone")
    parser.add_argument("--bulk", action="store_true", help="load new documents in bulk (binary COPY)")
    parser.add_argument(
        "--keep-indexes", action="store_true", help="with --bulk: keep the search indexes during the load"
    )
    return parser


_SKIP = {".git", ".venv", "__pycache__", "node_modules"}


def named_files(paths: Sequence[Path]) -> list[tuple[Path, str]]:
    """Each file to ingest with its document name: the path relative to the folder given, or the file's name.

    The name is what identifies a document, so it must not depend on how the path was typed
    (``/abs/dir`` and ``dir`` name ``dir/notes.csv`` the same: ``notes.csv``). Two files that
    would share a name are refused before anything is ingested.
    """
    files: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
                for name in sorted(n for n in names if not n.startswith(".")):
                    found = Path(root) / name
                    files.append((found, found.relative_to(path).as_posix()))
        elif path.is_file():
            files.append((path, path.name))
        else:
            raise ValueError(f"no such file or folder: {path}")
    named: dict[str, Path] = {}
    for found, name in files:
        earlier = named.setdefault(name, found)
        if earlier.resolve() != found.resolve():
            raise ValueError(f"{earlier} and {found} would both be named {name!r}; ingest their common folder instead")
    return [(found, name) for name, found in named.items()]  # the same file given twice is ingested once


async def run(args: argparse.Namespace) -> int:
    from context_engine.cli.progress import ProgressDisplay
    from context_engine.engine import ContextEngine
    from context_engine.hooks import Hooks

    files = named_files(args.paths)
    acl = [p.strip() for p in args.acl.split(",") if p.strip()]
    if args.bulk:
        from context_engine.cli.bulk import ingest_files_in_bulk

        config = config_for(args.database_url)
        return await ingest_files_in_bulk(
            config, files, source_id=args.source_id, acl=acl, build_index=not args.keep_indexes
        )
    counts = {"completed": 0, "skipped": 0, "failed": 0}
    failures: list[str] = []
    display = ProgressDisplay(sys.stderr, len(files))
    hooks = Hooks(on_progress=display.on_progress)
    async with ContextEngine(config_for(args.database_url), hooks=hooks) as engine:
        for i, (path, name) in enumerate(files):
            display.start_file(i, name)
            try:
                report = await engine.ingest(file=path, name=name, source_id=args.source_id, acl=acl)
            except Exception as exc:  # one refused file never stops the batch
                counts["failed"] += 1
                failures.append(f"{name}: {exc}")
                display.finish_file("failed")
                continue
            doc = report.documents[0]
            counts[doc.status if doc.status in counts else "failed"] += 1
            if doc.status == "failed":
                failures.append(f"{name}: {doc.failure_reason}: {doc.error}")
            display.finish_file(doc.status)
    display.close()
    print(
        f"ingested {len(files)} files: {counts['completed']} completed, {counts['skipped']} skipped, "
        f"{counts['failed']} failed"
    )
    for line in failures:
        print(f"  failed {line}")
    return 0 if counts["failed"] == 0 else 1

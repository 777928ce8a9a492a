"""``context-engine ingest --bulk``: files loaded through :mod:`context_engine.ingest.bulk`."""

from __future__ import annotations

from pathlib import Path

from context_engine.config import ContextEngineConfig


async def ingest_files_in_bulk(
    config: ContextEngineConfig, files: list[tuple[Path, str]], *, source_id: str, acl: list[str], build_index: bool
) -> int:
    """Load ``(path, name)`` pairs in bulk and print one summary; 1 when a document failed."""
    from context_engine.engine import ContextEngine

    async with ContextEngine(config) as engine:
        documents = ({"file": path, "name": name, "source_id": source_id, "acl": acl} for path, name in files)
        report = await engine.bulk_ingest(documents, build_index=build_index)
    failed = [r for r in report.ordinary if r.status == "failed"]
    handed = len(report.ordinary)
    print(
        f"ingested {len(files)} files in bulk: {report.documents} written in bulk ({report.chunks} chunks), "
        f"{handed} through the ordinary ingest, {len(failed)} failed"
    )
    if report.index_rebuilt:
        built = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.index_seconds.items())
        print(f"  indexes rebuilt: {built}")
    for r in failed:
        print(f"  failed {r.name}: {r.failure_reason}: {r.error}")
    return 1 if failed else 0

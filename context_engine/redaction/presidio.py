"""Microsoft Presidio entities as ordinary detectors (optional ``[presidio]`` extra).

The built-in detectors are deliberately few. For names, locations and the long tail of entity
types, Presidio's analyzer can supply the spans instead; wrapped here, each entity becomes a plain
detector, so its rules get the same merge, action, stage and ``unless`` handling as any other.
Presidio is imported only when this function is called, so the core package never depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_engine.redaction.detectors import Detector

_INSTALL_HINT = 'Presidio detectors need the optional extra: pip install "pg-context-engine[presidio]"'


def presidio_detectors(
    entities: Sequence[str],
    *,
    language: str = "en",
    score_threshold: float = 0.5,
    analyzer: Any | None = None,
) -> dict[str, Detector]:
    """Map each Presidio entity name (``"PERSON"``, ``"LOCATION"``...) to a detector.

    Pass the result as ``RedactionPolicy(custom_detectors=...)`` and name the entity in a rule's
    ``detector=``. One analyzer is shared by all the returned detectors, and a text is analysed
    once for all of them, so several entity rules do not multiply the cost. ``analyzer`` accepts
    a ready ``presidio_analyzer.AnalyzerEngine`` (or anything with the same ``analyze`` method),
    e.g. one configured with extra recognisers; without it a default engine is created.
    """
    wanted = list(dict.fromkeys(entities))
    if isinstance(entities, str) or not wanted or not all(isinstance(e, str) and e for e in wanted):
        raise ValueError("presidio_detectors needs a list of entity names, e.g. ['PERSON']")
    if analyzer is None:
        try:
            from presidio_analyzer import AnalyzerEngine
        except ImportError as exc:
            raise ImportError(_INSTALL_HINT) from exc
        analyzer = AnalyzerEngine()

    # The last text analysed and its spans per entity. Rules run one after another over the same
    # string, so a one-entry cache is enough to analyse each text once.
    # Swapping one tuple keeps the text and its spans consistent across threads.
    last: list[tuple[str | None, dict[str, list[tuple[int, int]]]]] = [(None, {})]

    def spans_for(text: str, entity: str) -> list[tuple[int, int]]:
        cached_text, by_entity = last[0]
        if cached_text is not text and cached_text != text:
            results = analyzer.analyze(
                text=text, entities=wanted, language=language, score_threshold=score_threshold
            )
            by_entity = {name: [] for name in wanted}
            for result in results:
                if result.entity_type in by_entity and result.score >= score_threshold:
                    by_entity[result.entity_type].append((int(result.start), int(result.end)))
            last[0] = (text, by_entity)
        return list(by_entity.get(entity, []))

    def make(entity: str) -> Detector:
        def detect(text: str) -> list[tuple[int, int]]:
            return spans_for(text, entity)

        detect.__qualname__ = f"presidio[{entity}]"
        return detect

    return {entity: make(entity) for entity in wanted}

"""The knowledge tool's pure rules: file names in a question, aggregate questions, frame keys, argument checks."""

from __future__ import annotations

import pytest

from context_engine.knowledge.tool.actions import KNOWLEDGE_ACTIONS, actions, honours_document_ids, properties
from context_engine.knowledge.tool.arguments import check
from context_engine.knowledge.tool.call import Refusal
from context_engine.knowledge.tool.search import named_file
from context_engine.knowledge.tool.sheets import first_columns, frame_keys, is_aggregate


@pytest.mark.parametrize(
    ("question", "name"),
    [
        ("get detail about INV-EG.pdf", "INV-EG.pdf"),
        ("what is in report_2024.xlsx?", "report_2024.xlsx"),
        ("summarise 'notes.v2.md'.", "notes.v2.md"),
        ("rapport-café.pdf, please", None),  # detection is ASCII-only
        ("what is the leave policy", None),
        ("see example.com for details", None),
    ],
)
def test_named_file(question: str, name: str | None) -> None:
    assert named_file(question) == name


@pytest.mark.parametrize(
    ("question", "aggregate"),
    [
        ("what is the total amount by region", True),
        ("average price per product", True),
        ("how many invoices are over 1000", True),
        ("top 5 customers", True),
        ("who approved the discount", False),
        ("what does the contract say about renewal", False),
    ],
)
def test_is_aggregate(question: str, aggregate: bool) -> None:
    assert is_aggregate(question) is aggregate


def test_frame_keys_are_computes_own_names() -> None:
    sheets = [{"id": "a", "name": "Costs 2024.csv", "sheets": [{"name": "Costs 2024"}]},
              {"id": "b", "name": "book.xlsx", "sheets": [{"name": "Sales"}, {"name": "Q1"}]},
              {"id": "c", "name": "old.csv", "sheets": [{"name": "old"}]}]
    keys = frame_keys(sheets, None, max_documents=2)
    assert keys == {("a", "Costs 2024"): "Costs 2024.csv", ("b", "Sales"): "book.xlsx:Sales",
                    ("b", "Q1"): "book.xlsx:Q1"}  # the third is past what compute would load
    assert frame_keys(sheets[1:2], None, max_documents=20) == {("b", "Sales"): "Sales", ("b", "Q1"): "Q1"}
    assert first_columns([{"name": "id", "type": "text"}, {"name": "n", "type": "integer"}]) == ("n", "id")
    assert first_columns([{"name": "d", "type": "date"}]) == (None, None)


def test_every_action_has_its_arguments_in_the_table() -> None:
    assert len(KNOWLEDGE_ACTIONS) == 13 and [a.name for a in actions()] == list(KNOWLEDGE_ACTIONS)
    for action in actions():
        assert set(action.arguments) <= set(properties()) - {"action"}
    assert honours_document_ids() == {"search", "compute", "get_docs", "map_reduce", "discover", "list"}


@pytest.mark.parametrize(
    ("action", "args", "fragment"),
    [
        ("search", {"query": "x", "top_k": 0}, "top_k must be between 1 and 50"),
        ("search", {"query": "x", "top_k": True}, "top_k must be an integer"),
        ("search", {"query": "   "}, "query must be a non-empty string"),
        ("search", {"query": "x", "mode": "fast"}, "mode must be one of hybrid, graph"),
        ("search", {"query": "x", "source_ids": "hr"}, "source_ids must be a list of id strings"),
        ("search", {"query": "x", "principals": ["admin"]}, "unknown argument 'principals'"),
        ("get_chunks", {"document_id": "x", "start": -1}, "start must be at least 0"),
        ("traverse", {"entity": "x", "document_ids": ["y"]}, "document_ids is not honored by traverse"),
    ],
)
def test_argument_refusals(action: str, args: dict[str, object], fragment: str) -> None:
    with pytest.raises(Refusal) as refused:
        check(action, args)
    assert fragment in refused.value.message


def test_none_values_are_dropped() -> None:
    assert check("search", {"query": " leave ", "top_k": None, "cursor": None}) == ("search", {"query": "leave"})

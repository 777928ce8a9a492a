"""Parse a keyword query into bound tsquery pieces: words, "quoted phrases" and -terms.

The query is split on ASCII whitespace. In ``all`` mode every positive piece must match; in
``any`` mode one is enough, and single words on the stop-word list are dropped first (otherwise
"the" or "of" would match nearly every chunk of a ``simple``-configuration index, where nothing
removes them). Negated pieces exclude in both modes, and quoted phrases are never dropped. Each
piece becomes its own bound ``websearch_to_tsquery`` call, so the text is never spliced into SQL.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

_PIECE = re.compile(r'(-?)"([^"]+)"|(\S+)')
_EDGE_PUNCT = re.compile(r"^\W+|\W+$")
#: a piece the default parser reads as one token, the same for ``websearch_to_tsquery`` and
#: ``to_tsvector``: ASCII letters and digits starting with a letter, or digits alone, between plain
#: brackets, quotes and sentence punctuation. Anything else is left to the checked pass: a piece that
#: starts with a digit and holds a letter may be split ('3e14a6' is '3e14' <-> 'a6'), '..' is a
#: lexeme of its own, and other edges change the query ('(-cell' is a negation, '(~cell' the lexeme
#: '~cell'), which a test against the server's parser shows (tests/test_bm25_pruning.py).
_ONE_TOKEN = re.compile(r"[(\[']*(?P<word>[A-Za-z][A-Za-z0-9]*|[0-9]+)[)\]',;:!?.]*")
#: configurations whose dictionaries turn one ASCII word into at most one lexeme (no thesaurus)
_ONE_LEXEME_CONFIGS = frozenset({"english", "simple"})

#: PostgreSQL's (Snowball's) English stop-word list, the one the ``english`` configuration drops.
#: Kept here so ``any`` matching drops the same words under the ``simple`` configuration.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself
    it its itself they them their theirs themselves what which who whom this that these those am is are was were be
    been being have has had having do does did doing a an the and but if or because as until while of at by for with
    about against between into through during before after above below to from up down in out on off over under
    again further then once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now
    """.split()
)


@dataclass
class LexicalQuery:
    positive: list[str]
    negative: list[str]


def parse(query: str) -> LexicalQuery:
    positive: list[str] = []
    negative: list[str] = []
    for match in _PIECE.finditer(query):
        neg, phrase, word = match.groups()
        if phrase is not None:
            (negative if neg else positive).append(f'"{phrase.strip()}"')
        elif word.startswith("-") and len(word) > 1:
            negative.append(word[1:])
        elif word.strip('"'):
            positive.append(word.strip('"'))
    return LexicalQuery(positive=positive, negative=negative)


def stopword_set(stopwords: str | Collection[str] | None) -> frozenset[str]:
    """``"english"`` -> the built-in list; a collection -> those words; ``None`` -> nothing dropped."""
    if stopwords is None:
        return frozenset()
    if isinstance(stopwords, str):
        if stopwords != "english":
            raise ValueError(f"unknown stop-word list {stopwords!r}; use 'english', a list of words or None")
        return ENGLISH_STOPWORDS
    return frozenset(w.lower() for w in stopwords)


def searchable(parsed: LexicalQuery, *, match: str, stopwords: frozenset[str]) -> list[str]:
    """The positive pieces that take part in matching.

    ``any`` drops stop words (a phrase is kept whole). If the query is nothing but stop words they
    are all kept, so "to be or not to be" still finds the chunk that says it.
    """
    if match != "any" or not stopwords:
        return list(parsed.positive)
    kept = [p for p in parsed.positive if p.startswith('"') or _EDGE_PUNCT.sub("", p).lower() not in stopwords]
    return kept or list(parsed.positive)


def plain_disjunction(
    query: str, *, match: str, config: str, stopwords: str | Collection[str] | None = "english"
) -> bool:
    """True when :func:`tsquery_sql` gives an OR of single lexemes and nothing else, the lexemes
    :func:`terms_sql` gives: ``any`` matching, no -terms, and every searched piece one token of the
    parser (see ``_ONE_TOKEN``) that is not websearch's ``or``, under a configuration that maps a
    token to one lexeme at most. Anything else (a phrase, a hyphenated or accented word, a negation) may
    hold a chunk with a query term that the tsquery still rejects."""
    if match != "any" or config not in _ONE_LEXEME_CONFIGS:
        return False
    parsed = parse(query)
    if parsed.negative:
        return False
    for piece in searchable(parsed, match=match, stopwords=stopword_set(stopwords)):
        token = _ONE_TOKEN.fullmatch(piece)
        if token is None or ".." in piece or token["word"].lower() == "or":
            return False
    return True


def tsquery_sql(
    query: str,
    *,
    match: str,
    params: dict[str, Any],
    stopwords: str | Collection[str] | None = "english",
) -> str | None:
    """A SQL tsquery expression over bound pieces, or ``None`` when nothing is searchable.

    Adds ``lx_p<i>``/``lx_n<i>`` to ``params``; ``:lx_cfg`` (the regconfig name) is the caller's.
    """
    parsed = parse(query)
    positive = searchable(parsed, match=match, stopwords=stopword_set(stopwords))
    if not positive:
        return None
    joiner = " && " if match == "all" else " || "
    pos = []
    for i, piece in enumerate(positive):
        params[f"lx_p{i}"] = piece
        pos.append(f"websearch_to_tsquery(CAST(:lx_cfg AS regconfig), unaccent(:lx_p{i}))")
    params["lx_npos"] = len(positive)
    expr = "(" + joiner.join(pos) + ")"
    for i, piece in enumerate(parsed.negative):
        params[f"lx_n{i}"] = piece
        expr += f" && !!websearch_to_tsquery(CAST(:lx_cfg AS regconfig), unaccent(:lx_n{i}))"
    return expr


def terms_sql(params: dict[str, Any]) -> str:
    """SQL ``text[]`` of the distinct lexemes of the positive pieces bound by :func:`tsquery_sql`.

    Scoring functions that weigh each query term (BM25) need the terms as the index saw them:
    parsed, stemmed and unaccented by the database's own configuration, never by Python.
    """
    count = int(params.get("lx_npos", 0))
    if count == 0:
        return "CAST(ARRAY[] AS text[])"
    vectors = " || ".join(f"to_tsvector(CAST(:lx_cfg AS regconfig), unaccent(:lx_p{i}))" for i in range(count))
    return f"tsvector_to_array({vectors})"

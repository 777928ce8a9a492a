"""``ContextEngineConfig``: the one settings object.

Built in code or from ``CE_``-prefixed environment variables with ``__`` nesting
(``CE_EMBEDDING__PROVIDER=openai``). Every section forbids unknown keys and validates on
assignment, so a misspelt setting raises and names itself instead of being silently ignored.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from context_engine.errors import ConfigError
from context_engine.providers import registry
from context_engine.redaction import RedactionPolicy

_STRICT = ConfigDict(extra="forbid", validate_assignment=True)



def _registered_names(names: Callable[[], dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """The settings schema lists a provider field's registered names (read when the schema is built)."""
    return lambda schema: schema.update(enum=list(names()))


class EmbeddingConfig(BaseModel):
    """Which model turns text into vectors, and how requests to it are shaped."""

    model_config = _STRICT

    #: a name registered in :mod:`context_engine.providers.registry` (``local``, ``openai``, ...)
    provider: str = Field(default="local", json_schema_extra=_registered_names(registry.embedding_providers))
    #: model name; ``None`` picks the provider's default (all-MiniLM-L6-v2 for ``local``)
    model: str | None = None
    api_key: SecretStr | None = None
    base_url: str | None = None
    #: vector width; ``None`` = the model's native width (384 for the local default)
    dim: int | None = Field(default=None, ge=1, le=16000)
    #: Azure OpenAI only
    api_version: str | None = None
    deployment: str | None = None
    #: ``vertex_ai`` only: the Google Cloud project and region, else ``GOOGLE_CLOUD_PROJECT`` /
    #: ``GOOGLE_CLOUD_LOCATION`` (credentials come from ADC; ``api_key`` with no project = express mode)
    project: str | None = None
    location: str | None = None
    max_retries: int = Field(default=2, ge=0, le=20)
    #: per-attempt timeout in seconds
    timeout: float = Field(default=60.0, gt=0)
    #: batch caps; ``None`` = the per-provider table
    max_batch_items: int | None = Field(default=None, ge=1)
    max_batch_tokens: int | None = Field(default=None, ge=1)
    max_input_tokens: int | None = Field(default=None, ge=1)
    max_concurrency: int = Field(default=4, ge=1, le=64)
    #: embedding requests of all ingests in this process in flight at once, served in turns across
    #: documents so a large one never starves a small one (the local model: always one at a time)
    max_inflight: int = Field(default=8, ge=1, le=256)
    #: how tokens are counted for chunking and batch budgets: ``auto`` counts exactly when the tokenizer
    #: is already on disk (never downloads) and estimates otherwise; ``exact`` may fetch cl100k once
    #: (OpenAI family; ``local`` always has its own); ``estimate`` is UTF-8 bytes / ``token_bytes_ratio``
    tokenizer: Literal["auto", "exact", "estimate"] = "auto"
    token_bytes_ratio: float = Field(default=3.0, gt=0)
    #: batch token budgets are multiplied by this (headroom for estimated counts); never per-input caps
    safety_margin: float = Field(default=0.85, gt=0, le=1)
    #: ``local`` only: worker threads for the forward pass (each runs one sub-batch on one core)
    local_threads: int = Field(default=2, ge=1, le=64)
    #: ``local`` only: ``onnxruntime`` runs the encoder layers with ONNX Runtime's fused CPU kernels
    #: (about 3-5x the chunks/s of ``numpy`` on the same cores, same vectors); ``auto`` picks it when
    #: onnx and onnxruntime import and falls back to the numpy forward pass otherwise; ``openvino``
    #: (the ``openvino`` extra) runs them in bf16 where the CPU has it (vectors within cosine 0.9999)
    local_backend: Literal["auto", "onnxruntime", "numpy", "openvino"] = "auto"

    @field_validator("provider", mode="before")
    @classmethod
    def _registered(cls, value: object) -> object:
        known = registry.embedding_providers()
        if isinstance(value, str) and value not in known:
            llm = registry.llm_providers().get(value)
            reason = f"no embedding provider is named {value!r}"
            if llm is not None:
                reason = llm.no_embeddings or f"{value} serves LLMs only"
            raise ValueError(f"{reason}; set embedding.provider to one of {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _provider_settings(self) -> EmbeddingConfig:
        if self.provider != "vertex_ai" and (self.project is not None or self.location is not None):
            raise ValueError("embedding.project and embedding.location are used by provider 'vertex_ai' only")
        if self.tokenizer == "exact" and not registry.embedding_provider(self.provider).exact_tokenizer:
            raise ValueError(
                f"embedding.tokenizer 'exact' needs the provider's own tokenizer, which {self.provider!r} does "
                "not publish; use 'auto' or 'estimate'"
            )
        return self


class StorageConfig(BaseModel):
    """Where the data lives and how connections are pooled."""

    model_config = _STRICT

    #: directory for the embedded PostgreSQL when no ``database_url`` is given
    data_dir: Path | None = None
    pool_size: int = Field(default=5, ge=1)
    max_overflow: int = Field(default=10, ge=0)
    pool_timeout: float = Field(default=30.0, gt=0)
    pool_recycle: int = Field(default=1800, ge=-1)
    pool_pre_ping: bool = True
    #: with ``pool_pre_ping``, only a connection that sat in the pool at least this many seconds is
    #: pinged before it is handed out: one back from a request a moment ago was alive then, and the
    #: ping was a round trip on every checkout (three to five a search). A server restarted within
    #: this window costs one request a retryable 503, and that failure renews the whole pool.
    #: 0 pings every checkout.
    pool_pre_ping_idle: float = Field(default=1.0, ge=0)
    #: migrate a configured ``database_url`` on first use (the embedded server always is)
    auto_migrate: bool = False
    #: vector leg: up to this many eligible rows scan them exactly (or probe a spread slice, below),
    #: above it probe the HNSW index first (exact fallback). Measured on 100k 384-d rows
    #: (benchmarks/README.md, "ACL recall"): up to 20k rows an exact scan beats the index on a
    #: clustered slice, which the index also gets wrong; from 25k the scan costs about 100 ms
    ann_exact_threshold: int = Field(default=20000, ge=0)
    #: a caller whose ACL and scope admit every indexed row (trusted, or an all-public corpus) uses
    #: the index from this many rows whatever the threshold, since nothing is post-filtered; ``None``
    #: keeps such callers on the threshold (exact answers on small corpora, at the scan's cost)
    ann_unfiltered_min_rows: int | None = Field(default=1000, ge=0)
    #: below the threshold, a slice of at least this share of the index whose vectors are spread like
    #: the whole index's (its centroid no longer than the index's) is probed: the index's nearest rows
    #: to the query are read unfiltered and the caller's kept, proven exact when at least ``limit`` are
    #: the caller's and replaced by the exact scan otherwise (benchmarks/README.md, "ACL recall");
    #: ``None`` keeps every slice below the threshold on the exact scan
    ann_spread_min_share: float | None = Field(default=0.05, gt=0, le=1)
    #: what the vector planner gives up where no plan is both exact and fast (a slice too large to
    #: scan cheaply whose rows are not near the query): ``recall`` (default) answers with the exact
    #: scan, whose cost grows with the slice; ``latency`` answers above ``ann_exact_threshold`` with
    #: pgvector's iterative index scan, tens of ms but recall@10 about 0.5 on a clustered quarter of
    #: the index (benchmarks/README.md, "ACL recall")
    ann_priority: Literal["recall", "latency"] = "recall"
    #: the HNSW index over half-precision copies of the vectors (migration 0026): half the index's
    #: size and build; the exact scan, the probe's proof and every similarity stay float4. On because
    #: recall@10 held (>= 0.997 in every ACL cell at a million chunks); migrating with it off puts the
    #: float4 index back (benchmarks/README.md, "Scale", "halfvec")
    hnsw_halfvec: bool = True


class DatabaseConfig(BaseModel):
    """Read replicas: lag-tolerant reads go to ``read_urls``; ``database_url`` stays the one writer.

    Searches, ``knowledge_query`` and document reads (get, list) run on a replica; writes,
    migrations, leases, idempotency, tool calls and every other read stay on the writer (docs/scaling.md).
    """

    model_config = _STRICT

    #: hot standbys of the writer (streaming replication); reads rotate over them. In the environment:
    #: a JSON list or URLs separated by spaces (``CE_DATABASE__READ_URLS``)
    read_urls: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    #: a read that needs a revision (``as_of``, ``min_revision``) waits this long for a replica to
    #: replay it, then is answered by the writer
    replica_wait_seconds: float = Field(default=1.0, ge=0, le=60)
    #: a replica that could not be reached is left out of the rotation this long (the writer reads)
    replica_retry_seconds: float = Field(default=30.0, ge=0)
    #: seconds a connection to a replica may take before the read goes to the writer (libpq's minimum is 2)
    replica_connect_timeout: int = Field(default=3, ge=2, le=60)

    @field_validator("read_urls", mode="before")
    @classmethod
    def _url_list(cls, value: object) -> object:
        """A JSON list or space-separated URLs (a URL may hold commas: libpq's multi-host form).

        Nothing here raises on a URL's content, since a validation error would echo it, password and
        all: each URL is checked when the engine is built (``ConfigError`` naming its position only).
        """
        if isinstance(value, str):
            stripped = value.strip()
            if stripped.startswith("["):
                try:
                    return json.loads(stripped)
                except ValueError:
                    pass
            return stripped.split()
        return value


class Bm25Config(BaseModel):
    """Okapi BM25 parameters for ``search.lexical_rank="bm25"``."""

    model_config = _STRICT

    #: term-frequency saturation: higher lets repeated terms keep adding to the score. SciFact was flat
    #: over k1 0.9-2.0 and b 0.5-0.75 (within 0.01 nDCG@10), so the usual Lucene values stay
    k1: float = Field(default=1.2, ge=0, le=10)
    #: length normalisation: 0 ignores chunk length, 1 divides fully by length / average length
    b: float = Field(default=0.75, ge=0, le=1)


class SearchConfig(BaseModel):
    """How each search leg matches and ranks."""

    model_config = _STRICT

    # Defaults below were chosen by measurement on BEIR SciFact, full-text leg alone, nDCG@10
    # (benchmarks/README.md, "Retrieval quality (BEIR SciFact)").
    #: text-search configuration of the full-text leg (fixed at migrate time, see README);
    #: ``english`` (stemming, stop words) 0.669 against 0.632 for ``simple``
    text_search_config: Literal["english", "simple"] = "english"
    #: ``all``: every query word must match; ``any``: any non-stopword may match. ``all`` found
    #: almost nothing for sentence-long queries (0.045)
    lexical_match: Literal["all", "any"] = "any"
    #: ``bm25``: Okapi BM25 over statistics of what the caller may see (0.691); ``ts_rank``:
    #: frequency anywhere (0.594); ``ts_rank_cd``: words close together (0.36)
    lexical_rank: Literal["bm25", "ts_rank_cd", "ts_rank"] = "bm25"
    bm25: Bm25Config = Field(default_factory=Bm25Config)
    #: words dropped from ``any`` queries: ``english`` (PostgreSQL's list), your own list, or ``None``
    lexical_stopwords: Literal["english"] | list[str] | None = "english"
    #: Postgres length-normalisation bitmask passed to ts_rank/ts_rank_cd (0..63; not used by bm25);
    #: 1 (divide by 1 + log length) was the best of 0, 1, 2, 8, 32 for both
    lexical_normalization: int = Field(default=1, ge=0, le=63)
    #: candidates each leg hands to fusion
    candidates: int = Field(default=50, ge=1, le=1000)
    #: pin the trigram threshold; ``None`` follows the query's shape
    trgm_limit: float | None = Field(default=None, gt=0, le=1)
    #: skip the trigram leg for queries longer than this many words; ``None`` = never skip
    trgm_max_query_words: int | None = Field(default=None, ge=1)
    #: ``adaptive`` drops weak vector candidates by a query-shaped cosine floor
    vector_floor: Literal["adaptive"] | None = None
    #: upper bound accepted for ``top_k``
    max_top_k: int = Field(default=100, ge=1, le=1000)
    #: upper bound accepted for ``top_k`` when results are grouped by document
    max_top_documents: int = Field(default=1000, ge=1, le=10000)
    #: passages returned with each document of a ``group_by="document"`` search
    passages_per_document: int = Field(default=3, ge=1, le=50)


class FusionConfig(BaseModel):
    """How the legs' candidates become one ranking (context_engine/retrieval/fusion.py)."""

    model_config = _STRICT

    #: ``convex``: weighted mean of per-query min-max normalised scores (SciFact, plain text, 0.730
    #: nDCG@10); ``rrf``: weighted reciprocal rank fusion (0.716 at its best k); benchmarks/README.md
    method: Literal["convex", "rrf"] = "convex"
    #: RRF constant (``method="rrf"``, and /knowledge/query's fusion of its queries): 10 ranked
    #: SciFact 0.012 nDCG@10 above 20 and 0.025 above 60 (benchmarks/README.md)
    k: int = Field(default=10, ge=1)
    #: weight per search leg, by the leg's registered name (``fts``, ``trigram``, ``vector``, or a leg
    #: a host registered); a leg not named keeps its default (fts 1.4, trigram 0, vector 1.0,
    #: graph 1.0, document_fts 0; ``{"fts": 1, "document_fts": 1, "vector": 1}`` is the measured
    #: setting with the document leg on, benchmarks/README.md "Retrieval quality": see
    #: context_engine/retrieval/legs/), and a leg weighted 0 does not run. Only the weights set here
    #: are held; ``retrieval.registry.weights(fusion.weights)`` is every leg's, and a name no leg has
    #: is refused when the engine is made (the settings are read before a host registers its legs)
    weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for leg, weight in value.items():
            if weight < 0:
                raise ValueError(f"fusion weight for {leg!r} must be >= 0, got {weight}")
        return value

    @property
    def trigram_enabled(self) -> bool:
        """Whether the trigram leg runs (it is off unless weighted), and so whether migrating builds its index."""
        return self.weights.get("trigram", 0) > 0

    @property
    def document_fts_enabled(self) -> bool:
        """Whether the document full-text leg runs (off unless weighted), and so whether migrating builds
        its chunk indexes (migration 0027)."""
        return self.weights.get("document_fts", 0) > 0


class IngestConfig(BaseModel):
    """Intake caps and chunking."""

    model_config = _STRICT

    max_file_bytes: int | None = Field(default=256 * 1024 * 1024, ge=1)
    #: the most rows a spreadsheet (CSV, TSV, XLSX) may have; past it the document is refused (413
    #: ``too_large``, nothing stored) as soon as the first pass reaches the row over it. ``None``: no cap
    max_rows: int | None = Field(default=500_000, ge=1)
    #: the most chunks one document may make (each costs an embedding input); past it, refused the same
    #: way. ``None``: no cap
    max_chunks: int | None = Field(default=100_000, ge=1)
    #: the most characters of text one document may extract to (after redaction); past it, refused the
    #: same way. ``None``: no cap
    max_extracted_chars: int | None = Field(default=64_000_000, ge=1)
    #: how long a writer waits for its turn on a document another run is writing or embedding; then it
    #: answers ``skipped`` / ``in_progress`` (routes: 409 ``document_busy`` with ``Retry-After``)
    write_wait_seconds: float = Field(default=30.0, ge=0, le=3600)
    #: target size of one chunk, in tokens of the embedder's tokenizer
    chunk_tokens: int = Field(default=256, ge=16, le=8192)
    #: how long a poll of a batch job keeps its claim on the job row. Documents are not on a clock:
    #: who writes or embeds one is a session lock that ends with its process
    resume_stale_seconds: int = Field(default=600, ge=0)
    #: the most chunks whose text one ingest holds in memory at once. A document with more is
    #: read twice (the first pass counts and hashes its chunks, the second writes them a slice at
    #: a time) and embedded a page of this many chunks at a time, so memory stays flat however large
    #: the file: ingest of a 22 MB CSV (43,594 chunks) with the local model peaked at 205 MiB
    #: (benchmarks/README.md, "Ingestion")
    hold_chunks: int = Field(default=2_000, ge=1)
    #: after a document is stored, ask ``llm`` for its structured fields (``query_meta`` reads them);
    #: off by default, since it costs one model call per document
    extract_fields: bool = False
    #: field name -> what it means, steering that extraction (``None``: the model chooses the fields)
    field_hints: dict[str, str] | None = None
    #: the most characters of a document's text kept on its row (``get_document``'s ``text``); past it the
    #: text is cut and the document says ``text_truncated``. Chunks are never cut: all stay searchable.
    #: ``None``: no cap
    max_document_text_chars: int | None = Field(default=None, ge=1)
    #: ``on_progress`` gets a ``"progress"`` event per embedded batch; ``False`` keeps to started/done
    progress_batches: bool = True


class ComputeConfig(BaseModel):
    """Off by default: code the model writes runs only when a deployment turns this on on purpose."""

    model_config = _STRICT

    #: run generated code in the built-in worker process (a host ``code_runner`` works without it)
    enable_code_execution: bool = False
    #: CPU seconds the worker may use; past it the kernel stops the process
    cpu_seconds: int = Field(default=10, ge=1, le=600)
    #: wall-clock seconds before the worker's process group is killed
    wall_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: memory the generated code may add to the worker's address space once pandas is loaded
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    #: characters of the JSON result (and, separately, of printed output) kept; the rest is cut
    max_output_chars: int = Field(default=200_000, ge=1000, le=10_000_000)
    #: run the worker as this uid/gid (e.g. 65534) when the host runs as root, so the kernel's
    #: process-count limit applies to it; the uid must be able to execute the interpreter
    worker_uid: int | None = Field(default=None, ge=1)
    worker_gid: int | None = Field(default=None, ge=1)
    #: spreadsheets loaded per compute call (newest first)
    max_documents: int = Field(default=20, ge=1, le=500)


class LLMConfig(BaseModel):
    """The generative model behind query expansion and the LLM rerank judge.

    ``max_retries`` is the number of retries on top of the first attempt (0 = one attempt) and
    ``timeout`` is per attempt, so one call may take up to ``(max_retries + 1) * timeout`` plus
    backoff; the knowledge pipeline caps each of its stages with its own deadline on top.
    """

    model_config = _STRICT
    #: how error messages name this section
    _section: ClassVar[str] = "llm"

    #: a name registered in :mod:`context_engine.providers.registry` (``openai``, ``anthropic``, ...)
    provider: str = Field(default="openai", json_schema_extra=_registered_names(registry.llm_providers))
    #: model name; ``None`` picks the provider's default (``openai``/``anthropic`` only)
    model: str | None = None
    api_key: SecretStr | None = None
    #: ``custom``: the URL before ``/chat/completions``; ``azure_openai``: the resource URL;
    #: ``openai``/``anthropic``: an optional override of the public endpoint
    base_url: str | None = None
    #: Azure OpenAI only
    api_version: str | None = None
    deployment: str | None = None
    #: ``vertex_ai`` only: the Google Cloud project and region, else ``GOOGLE_CLOUD_PROJECT`` /
    #: ``GOOGLE_CLOUD_LOCATION`` (credentials come from ADC; ``api_key`` with no project = express mode)
    project: str | None = None
    location: str | None = None
    #: ``bedrock`` only: the AWS region (else ``AWS_REGION``/``AWS_DEFAULT_REGION``); credentials come
    #: from the AWS credential chain
    region: str | None = None
    max_retries: int = Field(default=2, ge=0, le=20)
    #: per-attempt timeout in seconds
    timeout: float = Field(default=60.0, gt=0)
    max_tokens: int = Field(default=1024, ge=16, le=65536)
    temperature: float = Field(default=0.0, ge=0, le=2)

    @field_validator("provider", mode="before")
    @classmethod
    def _registered(cls, value: object) -> object:
        known = registry.llm_providers()
        if isinstance(value, str) and value not in known:
            embedding_only = value in registry.embedding_providers()
            reason = f"{value} serves embeddings only" if embedding_only else f"no llm provider is named {value!r}"
            raise ValueError(f"{reason}; set {cls._section}.provider to one of {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _provider_settings(self) -> LLMConfig:
        _check_llm_provider_settings(self)
        return self


def _check_llm_provider_settings(config: LLMConfig) -> None:
    """The checks ``llm`` and ``vision_llm`` share: which provider uses which of the settings."""
    # vertex_ai: project and location are optional (GOOGLE_CLOUD_PROJECT / GOOGLE_CLOUD_LOCATION, or
    # found from the credentials); an api_key alone is express mode
    if config.provider != "vertex_ai" and (config.project is not None or config.location is not None):
        raise ValueError("llm.project and llm.location are used by provider 'vertex_ai' only")
    if config.provider == "bedrock" and config.api_key is not None:
        raise ValueError(
            "llm.api_key is not used by provider 'bedrock': it signs requests with the AWS credential chain "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an instance role); unset it"
        )
    if config.region is not None and config.provider != "bedrock":
        raise ValueError("llm.region is used by provider 'bedrock' only")


class VisionLLMConfig(LLMConfig):
    """``vision_llm``: the model that transcribes scanned pages and images to Markdown at ingest.

    Any LLM provider, configured like ``llm``; the defaults are sized for a page of output.
    """

    _section: ClassVar[str] = "vision_llm"

    #: a page dense with tables runs to a few thousand tokens; a reply cut off here fails the document
    max_tokens: int = Field(default=4096, ge=16, le=65536)
    #: per-attempt timeout in seconds (writing out a whole page takes a model far longer than a short answer)
    timeout: float = Field(default=180.0, gt=0)
    #: pages of one document sent to the model at once
    concurrency: int = Field(default=4, ge=1, le=32)

    @model_validator(mode="after")
    def _provider_settings(self) -> VisionLLMConfig:
        try:
            _check_llm_provider_settings(self)
        except ValueError as exc:  # the shared checks name the ``llm`` section; this one is ``vision_llm``
            raise ValueError(vision_section(str(exc))) from None
        return self


def vision_section(message: str) -> str:
    """A message about the ``llm`` settings, re-addressed to the ``vision_llm`` section."""
    return re.sub(r"(?<![\w.])llm\.", "vision_llm.", message).replace("CE_LLM__", "CE_VISION_LLM__")


RerankProvider = Literal["cohere", "voyage", "jina", "llm"]


class RerankConfig(BaseModel):
    """The judge of the knowledge pipeline's guarded rerank (``llm`` uses the ``llm`` section)."""

    model_config = _STRICT

    provider: RerankProvider = "llm"
    #: model name; ``None`` picks the provider's default
    model: str | None = None
    api_key: SecretStr | None = None
    #: the URL before ``/v2/rerank`` (cohere) or ``/v1/rerank`` (voyage, jina)
    base_url: str | None = None
    #: retries on top of the first attempt of the HTTP rerankers (0 = one attempt)
    max_retries: int = Field(default=0, ge=0, le=10)
    #: seconds for the whole rerank step (every attempt included); past it the verdict is discarded
    timeout: float = Field(default=10.0, gt=0)
    #: how many of the best fused candidates the judge sees
    pool_size: int = Field(default=20, ge=2, le=100)
    #: the verdict is discarded when no passage scores at least this (scores are 0..1)
    relevance_floor: float = Field(default=0.1, ge=0, le=1)
    #: the verdict is discarded when Kendall's tau between its order and the fused order is below this
    min_consensus_tau: float = Field(default=-0.2, ge=-1, le=1)


class KnowledgeConfig(BaseModel):
    """``knowledge_query`` and ``POST /knowledge/query``: candidate pools, deadlines, rate limit."""

    model_config = _STRICT

    #: candidates each channel hands to fusion, per sub-query (as ``search.candidates``)
    candidates: int = Field(default=50, ge=1, le=1000)
    #: the same for enumeration questions ("all deadlines", "every client")
    enumeration_candidates: int = Field(default=150, ge=1, le=1000)
    #: sub-queries an expansion may add to the original question
    max_sub_queries: int = Field(default=4, ge=1, le=10)
    #: seconds for the whole expansion step; past it only the original question is searched
    expand_timeout: float = Field(default=15.0, gt=0)
    #: requests per caller per minute on ``POST /knowledge/query``; ``None`` = no limit
    rate_limit_per_minute: int | None = Field(default=60, ge=1)


class GraphConfig(BaseModel):
    """Graph mode: the entity graph built at ``ingest(mode="graph")`` and the graph search leg.

    The tables come from ``migrate --graph``. ``enabled=False`` switches the leg and the graph
    actions off without looking at the database (``usage["graph"]["reason"] == "graph_disabled"``).
    """

    model_config = _STRICT

    enabled: bool = True
    #: the model that reads entities and relationships out of chunks; ``None`` = the ``llm`` section
    extraction_llm: LLMConfig | None = None
    #: one-hop neighbours the leg adds to the entities the query names
    max_query_entities: int = Field(default=30, ge=1, le=500)


class AccessConfig(BaseModel):
    """Write permission beyond the default rule (``context_engine.write_access``)."""

    model_config = _STRICT

    #: principals that may change or delete documents with an empty ACL (besides trusted callers)
    writers: list[str] = Field(default_factory=list)


class ContextEngineConfig(BaseSettings):
    """All settings. ``database_url=None`` starts an embedded PostgreSQL in ``storage.data_dir``."""

    model_config = SettingsConfigDict(
        env_prefix="CE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    database_url: SecretStr | None = None
    #: read replicas of ``database_url`` (none: every read goes to the writer)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    #: the generative model (query expansion, the LLM rerank judge); ``None`` = no model is ever called
    llm: LLMConfig | None = None
    #: the rerank judge; ``None`` = the LLM judge when ``llm`` is set, else no rerank
    rerank: RerankConfig | None = None
    #: transcribes scanned PDF pages and images to Markdown at ingest; ``None`` = the text layer, then Tesseract
    vision_llm: VisionLLMConfig | None = None
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig)
    #: who may change public documents (``access.writers``)
    access: AccessConfig = Field(default_factory=AccessConfig)
    #: ``compute``: generated code over stored spreadsheets, off unless ``enable_code_execution``
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    #: graph mode (``ingest(mode="graph")``, ``search(mode="graph")``, the graph actions)
    graph: GraphConfig = Field(default_factory=GraphConfig)
    #: general secret (redaction hash keys fall back to it, with a warning)
    secret_key: SecretStr | None = None
    #: the engine-wide redaction policy; the default has no rules and changes nothing
    redaction: RedactionPolicy = Field(default_factory=RedactionPolicy)
    #: HMAC key for ``hash`` redaction rules
    redaction_secret_key: SecretStr | None = None
    #: the knowledge tool refuses an aggregate question (search, query_meta) and any map_reduce over
    #: spreadsheets only and points at ``compute``; ``False`` answers them from samples instead
    redirect_aggregates_to_compute: bool = True
    #: the knowledge tool's search answers a question that names a file from document names
    filename_search: bool = True

    def __init__(self, **values: Any) -> None:
        """Settings given here win over ``CE_*`` variables; a misspelt ``CE_`` variable raises and is named.

        Every constructor reads the environment, so every one refuses a variable that would otherwise be
        ignored in silence (``CE_DATABSE_URL`` would leave the engine on the embedded server).
        """
        check_environment(type(self))
        super().__init__(**values)

    @classmethod
    def from_env(cls) -> ContextEngineConfig:
        """Build from ``CE_*`` variables alone (the same as ``ContextEngineConfig()``)."""
        return cls()


#: ``CE_`` variables that are not settings: read by the command line (``serve``'s log level)
NON_SETTING_VARIABLES = frozenset({"CE_LOG_LEVEL"})
#: prefixes of ``CE_`` variables owned by something else (a test suite's own switches)
NON_SETTING_PREFIXES = ("CE_TEST_",)


class UnknownSetting(ConfigError, ValueError):
    """A ``CE_`` variable names no setting: refused rather than ignored."""

    code = "unknown_setting"


def check_environment(settings: type[BaseSettings]) -> None:
    """Raise ``UnknownSetting`` naming the first ``CE_`` variable (top-level name) that is no setting."""
    known = {f"CE_{name.upper()}" for name in settings.model_fields}
    for var in sorted(os.environ):
        upper = var.upper()
        if not upper.startswith("CE_") or upper in NON_SETTING_VARIABLES or upper.startswith(NON_SETTING_PREFIXES):
            continue
        if upper.split("__", 1)[0] not in known:
            close = difflib.get_close_matches(upper.split("__", 1)[0], sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UnknownSetting(f"unknown setting in environment: {var}{hint}", details={"variable": var})


def database_url_text(config: ContextEngineConfig) -> str | None:
    """The plain URL (kept secret everywhere else so it never lands in a log or repr)."""
    return config.database_url.get_secret_value() if config.database_url else None

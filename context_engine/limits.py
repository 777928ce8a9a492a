"""Every input limit, defined once.

The engine, the HTTP request models and the OpenAPI document read these constants, so a bound
said in one place is the bound enforced in every other.
"""

from __future__ import annotations

#: a search or knowledge question, in characters
MAX_QUERY_CHARS = 4000
#: ``topK`` of ``POST /knowledge/query``
KNOWLEDGE_TOP_K_MAX = 20
KNOWLEDGE_TOP_K_DEFAULT = 5
#: ``top_k`` of ``POST /search`` by default, and its ceiling unless ``search.max_top_k`` changes it
SEARCH_TOP_K_DEFAULT = 10
SEARCH_TOP_K_MAX = 100
#: ``top_k`` of a search grouped by document, unless ``search.max_top_documents`` changes it
SEARCH_TOP_DOCUMENTS_MAX = 1000
#: ``compress_to_tokens`` of a search: a prompt budget, in the embedder's tokens
MAX_COMPRESS_TOKENS = 1_000_000

#: page size of ``GET /documents``
LIST_LIMIT_MIN = 1
LIST_LIMIT_MAX = 500
LIST_LIMIT_DEFAULT = 50
#: an opaque page cursor, in characters
MAX_CURSOR_CHARS = 200

#: a document's name and a source id, in characters
MAX_NAME_CHARS = 1000
MAX_SOURCE_ID_CHARS = 500
#: an agent id (``agentId`` of a knowledge query)
MAX_AGENT_ID_CHARS = 200
#: one principal of an ACL, and how many an ACL may list
MAX_ACL_ENTRY_CHARS = 500
MAX_ACL_ENTRIES = 1000
#: how many ids a ``source_ids`` or ``document_ids`` filter may list
MAX_FILTER_IDS = 1000

#: how deep a document's ``attributes`` may nest (the object itself is depth 1)
MAX_ATTRIBUTES_DEPTH = 32
#: how deep any JSON request body may nest
MAX_JSON_DEPTH = 64
#: documents in one ``ingest_many`` call (and one ``POST /documents`` list)
INGEST_MANY_MAX = 1000
#: a JSON request body, in bytes (uploads are capped by ``ingest.max_file_bytes`` instead)
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024

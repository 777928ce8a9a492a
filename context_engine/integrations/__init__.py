"""Retrievers for the RAG frameworks users already build with: LangChain (``[langchain]`` extra)
and LlamaIndex (``[llama-index]`` extra).

Each module imports its framework, so import the one you use:
``context_engine.integrations.langchain`` or ``context_engine.integrations.llama_index``.
Both search through ``engine.search`` with a caller they are given explicitly (see
:mod:`context_engine.integrations.retrieval`); nothing here defaults to a trusted caller.
"""

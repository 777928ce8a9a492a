"""What each ``ContextEngine`` method does, one module per kind of work.

Every operation takes an :class:`~context_engine.operations.context.EngineContext` (what the engine,
or a redaction view of it, holds) and never the engine itself, so nothing here imports ``engine.py``.
"""

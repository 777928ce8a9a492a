"""db tools: one read-only statement on the tool's own database, with a row cap and a timeout.

The connection is the tool's own (never the engine's pool), the transaction is ``READ ONLY``, the
statement goes over the extended protocol (one statement per call, so no ``COMMIT; ...`` trick),
``statement_timeout`` is set for the transaction, and at most ``max_rows`` rows are fetched. The
transaction stops writes, not a superuser's ``COPY ... TO PROGRAM``: so the role itself must pass
the least-privilege check of ``db_role``, at registration and again before every statement. A failed
statement is reported by its SQLSTATE and a fixed sentence, never by the server's text.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql as pgsql

from context_engine.tools import db_role
from context_engine.tools.errors import ToolConfigInvalid, ToolExecutionFailed, ToolRoleRefused, ToolTimeout
from context_engine.tools.kinds import KindContext, ToolKindSpec
from context_engine.tools.plain import jsonable
from context_engine.tools.schema import checked_schema, validate_arguments

DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_MS = 5000
CONNECT_TIMEOUT = 10
FREE_QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "description": "one read-only SQL statement"}},
    "required": ["query"],
    "additionalProperties": False,
}
_KEYS = {"database_url", "query", "parameters", "max_rows", "statement_timeout_ms", "response_mode"}


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """The argument schema of a valid db config; refuses anything it cannot run."""
    unknown = set(config) - _KEYS
    if unknown:
        raise ToolConfigInvalid(f"db tool config has unknown keys: {sorted(unknown)}")
    url = config.get("database_url")
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        raise ToolConfigInvalid("db tool config needs a database_url (postgresql://...)")
    for key, limit in (("max_rows", 100_000), ("statement_timeout_ms", 600_000)):
        value = config.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise ToolConfigInvalid(f"db tool {key} must be an integer between 1 and {limit}")
    query = config.get("query")
    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise ToolConfigInvalid("db tool query must be a non-empty SQL string")
    if config.get("response_mode", "json") not in ("json", "tsv"):
        raise ToolConfigInvalid("db tool response_mode must be 'json' or 'tsv'")
    return checked_schema(config.get("parameters")) if query is not None else dict(FREE_QUERY_SCHEMA)


def statement_of(config: dict[str, Any], arguments: dict[str, Any]) -> str:
    """The SQL a call runs: the tool's fixed query, or the caller's ``query`` argument."""
    return str(config["query"] if config.get("query") is not None else arguments.get("query", ""))


async def check_role(config: dict[str, Any]) -> None:
    """Refuse (``tool_role_refused``, 400) a config whose role can leave the read-only box."""
    check_config(config)
    conn = await _connect(config)
    try:
        await conn.set_read_only(True)
        async with conn.cursor() as cur:
            await cur.execute("SELECT set_config('statement_timeout', %s, true)", (str(DEFAULT_TIMEOUT_MS),))
            await _refuse_powerful_role(cur, at_call=False)
        await conn.rollback()
    except psycopg.Error as exc:
        raise ToolExecutionFailed(statement_failure(exc), code="tool_unavailable") from None
    finally:
        await conn.close()


async def call(config: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``{"success", "columns", "rows", "row_count", "truncated"}`` for one read-only statement."""
    validate_arguments(check_config(config), arguments)
    fixed = config.get("query") is not None
    statement = statement_of(config, arguments)
    params: dict[str, Any] | None = arguments if fixed else None
    max_rows = int(config.get("max_rows", DEFAULT_MAX_ROWS))
    timeout_ms = int(config.get("statement_timeout_ms", DEFAULT_TIMEOUT_MS))
    conn = await _connect(config)
    try:
        await conn.set_read_only(True)
        async with conn.cursor() as cur:
            await cur.execute(
                pgsql.SQL("SELECT set_config('statement_timeout', {}, true)").format(pgsql.Literal(str(timeout_ms)))
            )
            # checked on every call, in the statement's own transaction: a grant made since
            # registration counts, and nothing runs before the check has passed
            await _refuse_powerful_role(cur, at_call=True)
            # prepare=True forces one parsed statement: a second one after ';' is a syntax error
            await cur.execute(statement, params, prepare=True)
            columns = [c.name for c in cur.description or []]
            fetched = await cur.fetchmany(max_rows + 1) if cur.description else []
        await conn.rollback()
    except psycopg.errors.QueryCanceled:
        raise ToolTimeout(f"the statement ran longer than {timeout_ms} ms and was cancelled") from None
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        raise ToolExecutionFailed(statement_failure(exc), code="write_refused") from None
    except psycopg.Error as exc:
        raise ToolExecutionFailed(statement_failure(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ToolExecutionFailed(f"the query's parameters do not fit it ({type(exc).__name__})") from None
    finally:
        await conn.close()
    truncated = len(fetched) > max_rows
    rows = [{name: jsonable(value) for name, value in zip(columns, row, strict=True)} for row in fetched[:max_rows]]
    return {"success": True, "columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}


async def _connect(config: dict[str, Any]) -> psycopg.AsyncConnection[Any]:
    try:
        return await psycopg.AsyncConnection.connect(config["database_url"], connect_timeout=CONNECT_TIMEOUT)
    except psycopg.Error:
        # the driver's text names the host, user and sometimes the password: none of it is shown
        raise ToolExecutionFailed("could not connect to the tool's database", code="tool_unavailable") from None


async def _refuse_powerful_role(cur: psycopg.AsyncCursor[Any], *, at_call: bool) -> None:
    await cur.execute(db_role.CHECK_SQL, db_role.check_params())
    findings = db_role.RoleFindings.of_row(await cur.fetchone())
    if not findings.least_privilege:
        raise ToolRoleRefused(findings.refusal(), at_call=at_call)


#: fixed sentences for the failures an agent writing SQL meets most; any other is named by its condition
_SENTENCES = {
    "25006": "the statement tried to write; db tools run in a read-only transaction",
    "42501": "the tool's role lacks a privilege the statement needs",
    "42601": "the statement is not valid SQL, or is more than one statement",
    "42P01": "the statement names a table or view that does not exist or is not visible to the tool's role",
    "42703": "the statement names a column that does not exist",
    "42883": "the statement calls a function or operator that does not exist for those argument types",
}


def statement_failure(exc: psycopg.Error) -> str:
    """A fixed sentence and the SQLSTATE: never the server's text, which can quote row values
    (``invalid input syntax for type integer: "<a hidden row's text>"``)."""
    state = getattr(exc, "sqlstate", None)
    if not state:
        return f"the statement failed ({type(exc).__name__})"
    sentence = _SENTENCES.get(state)
    if sentence is None:
        try:
            condition = _CAMEL.sub("_", psycopg.errors.lookup(state).__name__).lower()
        except KeyError:
            condition = "error"
        sentence = f"the statement failed: {condition}"
    # where a parse-time error sits in the statement (the caller's own text, never row data)
    position = getattr(getattr(exc, "diag", None), "statement_position", None)
    if state.startswith("42") and position and str(position).isdigit():
        sentence += f" at character {position}"
    return f"{sentence} (SQLSTATE {state})"


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


async def _call_kind(config: dict[str, Any], arguments: dict[str, Any], context: KindContext) -> dict[str, Any]:
    return await call(config, arguments)


KIND = ToolKindSpec(
    name="db",
    call_prefix="db_",
    summary="one read-only SQL statement per call",
    check_config=check_config,
    call=_call_kind,
    check_registration=check_role,
    statements=lambda config, arguments: [statement_of(config, arguments)],
)

"""The least-privilege check a db tool's role must pass, at registration and before every statement.

A ``READ ONLY`` transaction does not stop a superuser from running ``COPY ... TO PROGRAM``, nor a
member of ``pg_read_server_files`` from reading server files, nor any role from selecting the
engine's own tables past every ACL. So the role itself is checked: it must not be (or be able to
become) a superuser, must belong to none of the roles that reach outside the database, may execute
none of the server-file functions, and must hold no privilege on a ``ce_`` table. Every role the
login role can ``SET ROLE`` to counts, since one statement can switch to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: built-in roles whose members reach the server's files, programs or other sessions
REFUSED_ROLES = ("pg_execute_server_program", "pg_read_server_files", "pg_write_server_files", "pg_signal_backend")
#: functions that read or write server files (or connect without a password) when granted
REFUSED_FUNCTIONS = (
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
    "pg_file_write", "pg_file_rename", "pg_file_unlink", "pg_file_sync", "dblink_connect_u",
)  # fmt: skip
#: the engine's tables (and their sequences and views) all start with this
ENGINE_PREFIX = "ce_"
_SHOWN_TABLES = 5

#: one round trip; ``role`` is the role to judge (NULL: the session's login role)
CHECK_SQL = """
WITH me AS (
    SELECT r.oid, r.rolname FROM pg_roles r
    WHERE r.rolname = COALESCE(CAST(%(role)s AS text), CAST(session_user AS text))
), reach AS (
    SELECT r.oid, r.rolname, r.rolsuper FROM pg_roles r, me WHERE pg_has_role(me.oid, r.oid, 'MEMBER')
)
SELECT
    (SELECT rolname FROM me) AS role,
    ARRAY(SELECT rolname FROM reach WHERE rolsuper ORDER BY 1) AS superusers,
    ARRAY(SELECT rolname FROM reach WHERE rolname = ANY(%(roles)s) ORDER BY 1) AS server_roles,
    ARRAY(
        SELECT DISTINCT CAST(CAST(p.oid AS regprocedure) AS text) FROM pg_proc p
        WHERE p.proname = ANY(%(functions)s)
          AND EXISTS (SELECT 1 FROM reach WHERE has_function_privilege(reach.oid, p.oid, 'EXECUTE'))
        ORDER BY 1
    ) AS functions,
    ARRAY(
        SELECT DISTINCT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relname LIKE %(prefix)s AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
          AND EXISTS (
              SELECT 1 FROM reach WHERE
                  (c.relkind = 'S' AND has_sequence_privilege(reach.oid, c.oid, 'USAGE, SELECT, UPDATE'))
                  OR (c.relkind <> 'S' AND (
                      has_table_privilege(
                          reach.oid, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                      OR has_any_column_privilege(reach.oid, c.oid, 'SELECT, INSERT, UPDATE, REFERENCES')))
          )
        ORDER BY 1
    ) AS engine_tables
"""


def check_params(role: str | None = None) -> dict[str, Any]:
    """The bound parameters of :data:`CHECK_SQL` (``role`` None: the connection's own login role)."""
    prefix = ENGINE_PREFIX.replace("_", r"\_") + "%"
    return {"role": role, "roles": list(REFUSED_ROLES), "functions": list(REFUSED_FUNCTIONS), "prefix": prefix}


@dataclass(frozen=True)
class RoleFindings:
    """What the check found a role able to do beyond reading its own tables."""

    role: str
    superusers: tuple[str, ...] = ()
    server_roles: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    engine_tables: tuple[str, ...] = ()

    @classmethod
    def of_row(cls, row: Any) -> RoleFindings:
        role, superusers, server_roles, functions, tables = row
        return cls(str(role), tuple(superusers), tuple(server_roles), tuple(functions), tuple(tables))

    @property
    def least_privilege(self) -> bool:
        return not (self.superusers or self.server_roles or self.functions or self.engine_tables)

    def reasons(self) -> list[str]:
        """One phrase per finding, naming what was found."""
        out: list[str] = []
        if self.superusers:
            if self.role in self.superusers:
                out.append("it is a superuser")
            else:
                out.append(f"it can become superuser {_names(self.superusers)}")
        if self.server_roles:
            out.append(f"it is a member of {_names(self.server_roles)}")
        if self.functions:
            out.append(f"it may execute {_names(self.functions)}")
        if self.engine_tables:
            shown = _names(self.engine_tables[:_SHOWN_TABLES])
            more = len(self.engine_tables) - _SHOWN_TABLES
            tail = f" and {more} more" if more > 0 else ""
            out.append(f"it holds privileges on the engine's tables {shown}{tail}")
        return out

    def refusal(self) -> str:
        """The operator's sentence: the role, what it can do, and what to grant instead."""
        return (
            f"the db tool's role {self.role!r} can leave the read-only box: {'; '.join(self.reasons())}. "
            "Connect the tool as a role that is no superuser, belongs to none of "
            f"{', '.join(REFUSED_ROLES)}, and holds no privilege on the engine's {ENGINE_PREFIX} tables: "
            "grant it only CONNECT on the database, USAGE on the schema and SELECT on the tables the tool "
            "reads (`context-engine tools reader-role NAME` creates one)"
        )


def _names(values: tuple[str, ...]) -> str:
    return ", ".join(values)

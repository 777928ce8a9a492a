"""PostgreSQL access: the connection pool, the embedded default server and migrations."""

-- Tool kinds are a registry in the library (context_engine/tools/kinds.py): a host may register a
-- kind of its own, so the database no longer fixes the list. Registration checks the kind; a row
-- whose kind no module registers in a process is listed there but refused when called.
ALTER TABLE ce_tools DROP CONSTRAINT IF EXISTS ce_tools_kind_check;

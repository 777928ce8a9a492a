-- Keep a chunk row whole in its heap page up to 8 KB instead of Postgres's default ~2 KB. At the
-- default, a typical chunk (text ~0.7 KB, tsvector ~1 KB, a 384-wide vector 1.5 KB) pushed its
-- tsvector and vector out to the TOAST table, so every full-text candidate and every row of an exact
-- vector scan cost an extra lookup in the TOAST table's index. New and rewritten rows follow the new
-- target; an older database can apply it to existing rows with VACUUM FULL ce_chunks.
ALTER TABLE ce_chunks SET (toast_tuple_target = 8160);

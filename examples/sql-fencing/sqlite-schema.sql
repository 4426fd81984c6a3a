-- SPDX-License-Identifier: Apache-2.0
-- Fencing in SQLite (docs/fencing.md), for a resource on one host: each protected name keeps the
-- highest fencing token it has admitted, in the same database file as the data it guards.
--
--   sqlite3 -bail DATABASE_FILE < examples/sql-fencing/sqlite-schema.sql
--
-- One transaction: the schema is all there or not at all.

BEGIN IMMEDIATE;

CREATE TABLE IF NOT EXISTS fence (
  name  TEXT    PRIMARY KEY NOT NULL,          -- what one lock protects (e.g. its lock path)
  token INTEGER NOT NULL CHECK (token > 0)     -- the highest fencing token admitted for it
) STRICT;

-- The rule, enforced by the database for every writer: a name's token never goes down. Each
-- writer's transaction ends with the upsert of its token into this table (see the write below).
-- An update that would lower the token rolls back the writer's whole transaction there
-- (RAISE(ROLLBACK)), whatever it did before: data rows, deletes, other tables, schema changes. It
-- fails with SQLITE_CONSTRAINT_TRIGGER. Equal tokens pass. An operator who must lower a token on
-- purpose (a ZooKeeper ensemble rebuilt from empty data directories starts its tokens low again)
-- deletes the name's row while no writer runs; the next write starts it again.
CREATE TRIGGER IF NOT EXISTS fence_refuse_lower_token BEFORE UPDATE ON fence
  WHEN NEW.token < OLD.token
BEGIN
  SELECT RAISE(ROLLBACK, 'stale fencing token: a later lock holder has written');
END;

-- The data this example guards: entries appended by whoever holds the lock.
CREATE TABLE IF NOT EXISTS entries (
  id    INTEGER PRIMARY KEY,
  name  TEXT    NOT NULL REFERENCES fence (name),
  token INTEGER NOT NULL,
  value TEXT    NOT NULL
) STRICT;

-- The rule for the data: a row carries its writer's token. One lower than the fence's is refused
-- with RAISE(ABORT): the statement fails alone and the transaction stays open, so a writer that
-- ignores the error cannot escape into autocommit (where each later statement would commit on its
-- own); the stale upsert that ends the transaction rolls all of it back. A row with a higher token
-- raises the fence to it, in the same transaction: no row is written with a token the fence has
-- not admitted. Attach the same two triggers to every table the fence guards (each needs the
-- columns name and token). Running this file again replaces them (a schema from before this rule
-- had data triggers that rolled the transaction back, letting the writer's next statements
-- commit on their own).
DROP TRIGGER IF EXISTS entries_fenced_insert;
DROP TRIGGER IF EXISTS entries_fenced_update;
CREATE TRIGGER entries_fenced_insert BEFORE INSERT ON entries
BEGIN
  SELECT RAISE(ABORT, 'stale fencing token: a later lock holder has written (row refused)')
    WHERE NEW.token < (SELECT token FROM fence WHERE name = NEW.name);
  INSERT INTO fence (name, token) VALUES (NEW.name, NEW.token)
    ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE excluded.token > fence.token;
END;
CREATE TRIGGER entries_fenced_update BEFORE UPDATE ON entries
BEGIN
  SELECT RAISE(ABORT, 'stale fencing token: a later lock holder has written (row refused)')
    WHERE NEW.token < (SELECT token FROM fence WHERE name = NEW.name);
  INSERT INTO fence (name, token) VALUES (NEW.name, NEW.token)
    ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE excluded.token > fence.token;
END;

COMMIT;

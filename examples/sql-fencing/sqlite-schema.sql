-- Fencing in SQLite (docs/fencing.md), for a resource on one host: each protected name keeps the
-- highest fencing token it has admitted, in the same database file as the data it guards.
--
--   sqlite3 -bail DATABASE_FILE < examples/sql-fencing/sqlite-schema.sql

CREATE TABLE IF NOT EXISTS fence (
  name  TEXT    PRIMARY KEY NOT NULL,          -- what one lock protects (e.g. its lock path)
  token INTEGER NOT NULL CHECK (token > 0)     -- the highest fencing token admitted for it
) STRICT;

-- The rule, enforced by the database for every writer: a name's token never goes down. An update
-- that would lower it rolls back the writer's whole transaction (RAISE(ROLLBACK)), data writes
-- included, and fails with SQLITE_CONSTRAINT_TRIGGER. Equal tokens pass.
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

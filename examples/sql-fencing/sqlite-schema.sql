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
-- included, and fails with SQLITE_CONSTRAINT_TRIGGER. Equal tokens pass. An operator who must
-- lower a token on purpose (a ZooKeeper ensemble rebuilt from empty data directories starts its
-- tokens low again) deletes the name's row while no writer runs; the next upsert starts it again.
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

-- The rule for the data: a row is written only with the token the fence holds for its name, so
-- only after the same transaction admitted it. After a refusal the transaction is gone, and a
-- client that ignores the error (sqlite3 without -bail) would run its next statements outside any
-- transaction, each committed on its own: this refuses them. It also refuses rows whose writer
-- never admitted its token. Attach the same triggers to every table the fence guards.
CREATE TRIGGER IF NOT EXISTS entries_fenced_insert BEFORE INSERT ON entries
  WHEN NEW.token IS NOT (SELECT token FROM fence WHERE name = NEW.name)
BEGIN
  SELECT RAISE(ROLLBACK, 'stale fencing token or unfenced write: the row''s token is not the one admitted for its name');
END;
CREATE TRIGGER IF NOT EXISTS entries_fenced_update BEFORE UPDATE ON entries
  WHEN NEW.token IS NOT (SELECT token FROM fence WHERE name = NEW.name)
BEGIN
  SELECT RAISE(ROLLBACK, 'stale fencing token or unfenced write: the row''s token is not the one admitted for its name');
END;

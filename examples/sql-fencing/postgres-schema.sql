-- Fencing in PostgreSQL (docs/fencing.md): each protected name keeps the highest fencing token it
-- has admitted, in the same database as the data it guards, so that the token check and the data
-- write commit or roll back together.
--
--   psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f examples/sql-fencing/postgres-schema.sql

SET client_min_messages = warning;  -- quiet "already exists" on a second run

CREATE TABLE IF NOT EXISTS fence (
  name  text   PRIMARY KEY,              -- what one lock protects (e.g. its lock path)
  token bigint NOT NULL CHECK (token > 0) -- the highest fencing token admitted for it
);

-- The rule, enforced by the database for every writer: a name's token never goes down. An update
-- that would lower it fails with SQLSTATE ZF001, which aborts the writer's whole transaction, so
-- its data writes are rolled back too. Equal tokens pass: one grant may write many times.
CREATE OR REPLACE FUNCTION fence_refuse_lower_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'stale fencing token % for %: token % was admitted before', NEW.token, OLD.name, OLD.token
    USING ERRCODE = 'ZF001',
          HINT = 'A later lock holder has written. Stop; do not retry with this token.';
END $$;

CREATE OR REPLACE TRIGGER fence_refuse_lower_token BEFORE UPDATE ON fence
  FOR EACH ROW WHEN (NEW.token < OLD.token) EXECUTE FUNCTION fence_refuse_lower_token();

-- The data this example guards: entries appended by whoever holds the lock.
CREATE TABLE IF NOT EXISTS entries (
  id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name  text   NOT NULL REFERENCES fence (name),
  token bigint NOT NULL,
  value text   NOT NULL
);

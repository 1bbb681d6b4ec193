-- The audit chain is append-only: no update, delete or truncate, by anyone.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

DROP TRIGGER IF EXISTS events_append_only ON hr.events;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON hr.events
    FOR EACH ROW EXECUTE FUNCTION hr.no_rewrite();

DROP TRIGGER IF EXISTS events_no_truncate ON hr.events;
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON hr.events
    FOR EACH STATEMENT EXECUTE FUNCTION hr.no_rewrite();

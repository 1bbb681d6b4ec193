-- The audit chain is append-only: no update, delete or truncate, by anyone.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

DROP TRIGGER IF EXISTS events_append_only ON hr.events;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON hr.events
    FOR EACH ROW EXECUTE FUNCTION hr.no_rewrite();

-- A write of runs' output, heartbeats or pid moves the change mark (hr.change_mark).
DROP TRIGGER IF EXISTS tool_runs_liveness ON hr.tool_runs;
CREATE TRIGGER tool_runs_liveness AFTER UPDATE OF last_output_at, last_heartbeat_at,
    supervisor_heartbeat_at, pid ON hr.tool_runs
    FOR EACH STATEMENT EXECUTE FUNCTION hr.liveness_written();

DROP TRIGGER IF EXISTS events_no_truncate ON hr.events;
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON hr.events
    FOR EACH STATEMENT EXECUTE FUNCTION hr.no_rewrite();

-- Schema v1 of the PostgreSQL store: the tables (as SQLite's, with json as jsonb), the
-- append-only audit chain, and the functions that are the only way the roles write.
-- Applied by `monitor db init` inside one transaction under an advisory lock.

CREATE TABLE hr.tool_runs (
    tool_run_id             text PRIMARY KEY CHECK (tool_run_id ~ '^TR-[0-9A-HJKMNP-TV-Z]{26}$'),
    tool_name               text NOT NULL,
    execution_id            text,
    status                  text NOT NULL,
    reason                  text,
    exit_code               integer,
    started_at              text NOT NULL,
    completed_at            text,
    last_output_at          text,
    last_heartbeat_at       text,
    supervisor_heartbeat_at text,
    last_error_msg          text,
    pid                     bigint,
    shim_pid                bigint,
    shim_start_time         bigint,
    host                    text,
    argv_json               jsonb NOT NULL DEFAULT '[]',
    cwd                     text,
    resumed_from            text,
    metadata                jsonb,
    updated_at              text NOT NULL,
    -- Who started it (the database login) and what it may touch: only the store sees these.
    runner_login            text NOT NULL,
    request_fingerprint     text NOT NULL,
    capability_hash         text NOT NULL
);
CREATE INDEX tool_runs_status ON hr.tool_runs(status);
CREATE INDEX tool_runs_started ON hr.tool_runs(started_at);
CREATE INDEX tool_runs_open ON hr.tool_runs(status) WHERE completed_at IS NULL;

CREATE TABLE hr.approvals (
    approval_id         text PRIMARY KEY,
    tool_run_id         text NOT NULL,
    tool_name           text NOT NULL,
    execution_id        text,
    question            text NOT NULL,
    context             text,
    options_json        jsonb NOT NULL DEFAULT '[]',
    default_value       text,
    allows_text         boolean NOT NULL DEFAULT false,
    status              text NOT NULL,
    chosen_value        text,
    created_at          text NOT NULL,
    decided_at          text,
    expires_at          text,
    decided_by          text,
    decision_channel    text,
    comment             text,
    request_fingerprint text,
    prompt_fingerprint  text,
    consumed_at         text,
    consumed_by         text,
    prompt_kind         text,
    prompt_line         text,
    rule_name           text,
    expire_action       text NOT NULL DEFAULT 'reject',
    claimed_by          text,
    claimed_at          text,
    resumed_run_id      text,
    screen_digest       text,
    tool_digest         text
);
CREATE INDEX approvals_status ON hr.approvals(status);
CREATE INDEX approvals_run ON hr.approvals(tool_run_id);
CREATE INDEX approvals_resume ON hr.approvals(request_fingerprint, prompt_fingerprint);

-- The audit chain: each row's hash covers the previous hash and every field (the same
-- encoding as the SQLite store's, so one verifier checks both). `db_user` is the
-- authenticated login that caused the row, whatever `actor` the client named.
CREATE TABLE hr.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          text NOT NULL,
    event       text NOT NULL,
    tool_run_id text,
    approval_id text,
    actor       text NOT NULL,
    db_user     text NOT NULL,
    data        text NOT NULL,
    prev_hash   text NOT NULL,
    hash        text NOT NULL,
    -- One successor per row: two writers that read the same head cannot both append (a
    -- fork of the chain), whatever the isolation level.
    CONSTRAINT events_one_successor UNIQUE (prev_hash)
);
CREATE INDEX events_run ON hr.events(tool_run_id);
CREATE INDEX events_approval ON hr.events(approval_id);

-- Remembered decisions (`monitor decide --remember`): later prompts of the tool with this
-- fingerprint, within the scope, are answered with the value.
CREATE TABLE hr.policies (
    policy_id          text PRIMARY KEY,
    name               text NOT NULL,
    tool_name          text,
    prompt_fingerprint text,
    value              text NOT NULL,
    source             text NOT NULL,
    source_approval_id text,
    created_at         text NOT NULL,
    created_by         text NOT NULL,
    enabled            boolean NOT NULL DEFAULT true,
    argv_json          jsonb,
    cwd                text
);
CREATE INDEX policies_lookup ON hr.policies(tool_name, prompt_fingerprint);

CREATE FUNCTION hr.no_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit chain is append-only (% refused for %)', TG_OP, session_user
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON hr.events
    FOR EACH ROW EXECUTE FUNCTION hr.no_rewrite();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON hr.events
    FOR EACH STATEMENT EXECUTE FUNCTION hr.no_rewrite();

-- Times as the Rust side writes them: RFC 3339 UTC with milliseconds.
CREATE FUNCTION hr.now() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Eight bytes, little-endian: a length in the chain's encoding.
CREATE FUNCTION hr.le8(n bigint) RETURNS bytea LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    out bytea := '\x0000000000000000';
BEGIN
    FOR i IN 0..7 LOOP
        out := set_byte(out, i, ((n >> (8 * i)) & 255)::int);
    END LOOP;
    RETURN out;
END $$;

CREATE FUNCTION hr.chain_field(s text) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN s IS NULL THEN '\x00'::bytea
        ELSE '\x01'::bytea || hr.le8(octet_length(s)) || convert_to(s, 'UTF8') END
$$;

CREATE FUNCTION hr.audit(p_event text, p_run text, p_approval text, p_actor text, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    prev text;
    at text := hr.now();
    body text := p_data::text;
    h text;
    new_id bigint;
BEGIN
    -- One writer of the chain at a time.
    PERFORM pg_advisory_xact_lock(hashtext('headless-run audit chain'));
    SELECT hash INTO prev FROM hr.events ORDER BY id DESC LIMIT 1;
    prev := coalesce(prev, repeat('0', 64));
    h := encode(sha256(hr.chain_field(prev) || hr.chain_field(at) || hr.chain_field(p_event)
        || hr.chain_field(p_run) || hr.chain_field(p_approval) || hr.chain_field(p_actor)
        || hr.chain_field(body)), 'hex');
    INSERT INTO hr.events (at, event, tool_run_id, approval_id, actor, db_user, data, prev_hash, hash)
    VALUES (at, p_event, p_run, p_approval, p_actor, session_user, body, prev, h)
    RETURNING id INTO new_id;
    RETURN new_id;
END $$;

-- A decision, expiry or new approval wakes whoever listens. Nothing is said (anyone may
-- LISTEN): the woken read what their role lets them.
CREATE FUNCTION hr.ring(p_approval text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('headless_run', '')
$$;

CREATE FUNCTION hr.is_final(s text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT s IN ('completed', 'failed', 'failed_timeout', 'cancelled')
$$;

CREATE FUNCTION hr.check_status(s text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF s IS NULL OR s NOT IN ('queued', 'running', 'waiting_approval', 'completed', 'failed',
                              'failed_timeout', 'stalled', 'cancelled') THEN
        RAISE EXCEPTION 'not a run status: %', s USING ERRCODE = 'check_violation';
    END IF;
END $$;

CREATE FUNCTION hr.approval_row(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT to_jsonb(a) FROM hr.approvals a WHERE approval_id = p_id
$$;

-- A run as the clients see it (what only the store needs is left out).
CREATE FUNCTION hr.run_doc(r hr.tool_runs) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT to_jsonb(r) - 'runner_login' - 'request_fingerprint' - 'capability_hash'
$$;

CREATE FUNCTION hr.run_row(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT hr.run_doc(r) FROM hr.tool_runs r WHERE tool_run_id = p_id
$$;

-- The chosen value as the audit chain may show it: an option's value as it is, free text
-- only as its digest.
CREATE FUNCTION hr.logged_value(a hr.approvals) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN a.chosen_value IS NULL THEN NULL
        WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(a.options_json) o
                     WHERE o->>'value' = a.chosen_value) THEN a.chosen_value
        ELSE 'sha256:' || encode(sha256(convert_to(a.chosen_value, 'UTF8')), 'hex') END
$$;

CREATE FUNCTION hr.audit_approval(a hr.approvals, p_actor text) RETURNS void
LANGUAGE sql AS $$
    SELECT hr.audit('approval_status_change', a.tool_run_id, a.approval_id, p_actor,
        jsonb_build_object('status', a.status, 'chosen_value', hr.logged_value(a),
            'decided_by', a.decided_by, 'decision_channel', a.decision_channel,
            'comment', a.comment));
$$;

-- A new approval row: `approval_needed`, and its status when it is born decided.
CREATE FUNCTION hr.insert_approval(a hr.approvals, p_actor text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hr.approvals SELECT a.*;
    PERFORM hr.audit('approval_needed', a.tool_run_id, a.approval_id, p_actor,
        jsonb_build_object('question', a.question, 'options', a.options_json,
            'default', a.default_value, 'allows_text', a.allows_text,
            'prompt_kind', a.prompt_kind, 'rule', a.rule_name, 'expires_at', a.expires_at,
            'status', a.status));
    IF a.status <> 'pending' THEN
        PERFORM hr.audit_approval(a, p_actor);
    END IF;
    PERFORM hr.ring(a.approval_id);
END $$;

-- Moves a run's status; returns the previous one, or NULL when the guard refused.
-- p_guard: 'any', 'not_final', 'not_cancelled', or 'from:a,b'.
CREATE FUNCTION hr.set_status(p_run text, p_status text, p_reason text, p_exit integer,
    p_finished boolean, p_error text, p_at text, p_guard text, p_actor text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    cur text;
    now_ text := coalesce(p_at, hr.now());
BEGIN
    PERFORM hr.check_status(p_status);
    SELECT status INTO cur FROM hr.tool_runs WHERE tool_run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN RETURN NULL; END IF;
    IF NOT (p_guard = 'any'
        OR (p_guard = 'not_final' AND NOT hr.is_final(cur))
        OR (p_guard = 'not_cancelled' AND cur <> 'cancelled')
        OR (p_guard LIKE 'from:%' AND cur = ANY(string_to_array(substr(p_guard, 6), ','))))
    THEN
        RETURN NULL;
    END IF;
    UPDATE hr.tool_runs SET status = p_status, reason = p_reason,
        exit_code = coalesce(p_exit, exit_code),
        completed_at = CASE WHEN p_finished THEN now_ ELSE completed_at END,
        last_error_msg = coalesce(p_error, last_error_msg),
        updated_at = now_
    WHERE tool_run_id = p_run;
    IF cur <> p_status OR p_finished THEN
        PERFORM hr.audit('tool_status_change', p_run, NULL, p_actor, jsonb_build_object(
            'status', p_status, 'previous_status', cur, 'reason', p_reason, 'exit_code', p_exit));
    END IF;
    RETURN cur;
END $$;

-- What a status change did, for the caller's event log: NULL when it did nothing.
CREATE FUNCTION hr.moved(p_run text, p_prev text, p_status text, p_reason text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_prev IS NULL THEN NULL ELSE jsonb_build_object(
        'tool_run_id', p_run, 'from', p_prev, 'to', p_status, 'reason', p_reason,
        'tool_name', (SELECT tool_name FROM hr.tool_runs WHERE tool_run_id = p_run),
        'execution_id', (SELECT execution_id FROM hr.tool_runs WHERE tool_run_id = p_run)) END
$$;

-- Expires one overdue pending approval; true when it did.
CREATE FUNCTION hr.expire_one(p_id text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    a hr.approvals;
    now_ text := hr.now();
    chosen text;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_id AND status = 'pending'
        AND expires_at IS NOT NULL AND expires_at <= now_ FOR UPDATE;
    IF NOT FOUND THEN RETURN false; END IF;
    chosen := CASE WHEN a.expire_action = 'default' THEN a.default_value END;
    UPDATE hr.approvals SET status = 'expired', chosen_value = chosen, decided_at = now_,
        decided_by = 'system:expiry', decision_channel = 'system:expiry',
        comment = CASE WHEN chosen IS NOT NULL
            THEN format('expired at %s; answered with the default `%s`', now_, chosen)
            ELSE format('expired at %s without a decision', now_) END
    WHERE approval_id = p_id RETURNING * INTO a;
    PERFORM hr.audit_approval(a, 'system:expiry');
    PERFORM hr.ring(p_id);
    RETURN true;
END $$;

-- Marks a decided approval used by run `p_by` (single use); false when it was already used
-- or is not decided. Free text is kept only until the tool has it.
CREATE FUNCTION hr.consume_one(p_approval text, p_by text, p_actor text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    a hr.approvals;
BEGIN
    UPDATE hr.approvals SET consumed_at = hr.now(), consumed_by = p_by
    WHERE approval_id = p_approval AND consumed_at IS NULL AND status <> 'pending'
    RETURNING * INTO a;
    IF NOT FOUND THEN RETURN false; END IF;
    IF hr.logged_value(a) IS DISTINCT FROM a.chosen_value THEN
        UPDATE hr.approvals SET chosen_value = NULL WHERE approval_id = p_approval;
    END IF;
    PERFORM hr.audit('approval_consumed', p_by, p_approval, p_actor,
        jsonb_build_object('consumed_by', p_by));
    RETURN true;
END $$;

-- The run that asked `a` (and exited 90) is done once run `p_by` takes up its decision.
CREATE FUNCTION hr.close_asker(a hr.approvals, p_by text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    by_ text := coalesce(a.decided_by, 'someone');
    to_ text;
    why text;
    prev text;
BEGIN
    IF a.tool_run_id = p_by THEN RETURN NULL; END IF;
    IF a.status = 'approved' OR (a.status = 'expired' AND a.chosen_value IS NOT NULL) THEN
        to_ := 'completed';
        why := format('approval %s %s by %s; resumed as %s', a.approval_id, a.status, by_, p_by);
    ELSE
        to_ := 'failed';
        why := format('approval %s %s by %s', a.approval_id, a.status, by_);
    END IF;
    prev := hr.set_status(a.tool_run_id, to_, why, NULL, true, NULL, NULL,
        'from:waiting_approval', p_actor);
    RETURN hr.moved(a.tool_run_id, prev, to_, why);
END $$;

-- Closes a run's pending approvals: nobody is left to type a decision into it.
CREATE FUNCTION hr.abandon(p_run text, p_why text) RETURNS SETOF jsonb
LANGUAGE plpgsql AS $$
DECLARE
    a hr.approvals;
BEGIN
    FOR a IN UPDATE hr.approvals SET status = 'expired', decided_at = hr.now(),
            decided_by = 'system:run-ended', decision_channel = 'system:run-ended',
            comment = p_why
        WHERE tool_run_id = p_run AND status = 'pending' RETURNING * LOOP
        PERFORM hr.audit_approval(a, 'system:run-ended');
        PERFORM hr.ring(a.approval_id);
        RETURN NEXT to_jsonb(a);
    END LOOP;
END $$;

-- ---------------------------------------------------------------------------------------
-- Everyone with a role: expiry is a rule of time, not a decision.

CREATE FUNCTION hr.expire_due() RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER
SET search_path = hr, pg_temp AS $$
DECLARE
    id_ text;
BEGIN
    FOR id_ IN SELECT approval_id FROM hr.approvals WHERE status = 'pending'
        AND expires_at IS NOT NULL AND expires_at <= hr.now() ORDER BY approval_id LOOP
        IF hr.expire_one(id_) THEN
            RETURN NEXT hr.approval_row(id_);
        END IF;
    END LOOP;
END $$;

-- A number that changes whenever a run or approval may have changed.
-- Audited changes, and the liveness of the runs that have not ended (output, heartbeats:
-- not audited, but shown).
CREATE FUNCTION hr.change_mark() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = hr, pg_temp AS $$
    SELECT (SELECT coalesce(max(id), 0) FROM hr.events) * 65536
        + ((SELECT coalesce(hashtext(string_agg(tool_run_id || coalesce(last_output_at, '')
                || coalesce(last_heartbeat_at, '') || coalesce(supervisor_heartbeat_at, '')
                || coalesce(pid::text, ''), ',' ORDER BY tool_run_id)), 0)
           FROM hr.tool_runs WHERE completed_at IS NULL)::bigint & 65535)
$$;

-- ---------------------------------------------------------------------------------------
-- The runner: one run, through its capability.

-- The run a runner's capability opens, locked for the transaction; refused otherwise (the
-- refusal is in the server's log with the login).
CREATE FUNCTION hr.own_run(p_run text, p_cap text) RETURNS hr.tool_runs
LANGUAGE plpgsql AS $$
DECLARE
    r hr.tool_runs;
BEGIN
    SELECT * INTO r FROM hr.tool_runs WHERE tool_run_id = p_run FOR UPDATE;
    IF NOT FOUND OR r.runner_login <> session_user
       OR r.capability_hash <> encode(sha256(convert_to(coalesce(p_cap, ''), 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'run %: not yours (no capability for it)', p_run
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN r;
END $$;

-- Whether run `owner` no longer holds its approvals for itself, for a run of this login:
-- parked (exit code recorded), ended, or — the runner's word — its shim is gone. Another
-- login's runs, and runs no longer in the store (whose login is unknown), never hand
-- their decisions over.
CREATE FUNCTION hr.released_by(p_owner text, p_shim_gone boolean) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT o.runner_login = session_user
        AND (o.exit_code IS NOT NULL OR hr.is_final(o.status) OR p_shim_gone)
        FROM hr.tool_runs o WHERE o.tool_run_id = p_owner), false)
$$;

-- Starts a run with the capability its shim made (only its SHA-256 is kept), which every
-- later call of this run must show; returns it. Again with the same capability (a retry
-- whose first commit was not acknowledged), it is the same run. A row delivered from the
-- spool before the shim's own write (same login) is adopted; with `p_may_exist`, a row
-- another session holds is left as it is (NULL: no capability for it).
CREATE FUNCTION hr.run_start(p_run jsonb, p_request_fingerprint text, p_may_exist boolean,
    p_capability text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    cap_hash text;
    r hr.tool_runs := jsonb_populate_record(NULL::hr.tool_runs, p_run);
BEGIN
    IF coalesce(length(p_capability), 0) < 32 THEN
        RAISE EXCEPTION 'a capability of at least 32 characters' USING ERRCODE = 'check_violation';
    END IF;
    cap_hash := encode(sha256(convert_to(p_capability, 'UTF8')), 'hex');
    PERFORM hr.check_status(r.status);
    r.runner_login := session_user;
    r.request_fingerprint := p_request_fingerprint;
    r.capability_hash := cap_hash;
    r.argv_json := coalesce(r.argv_json, '[]');
    INSERT INTO hr.tool_runs SELECT r.* ON CONFLICT (tool_run_id) DO NOTHING;
    IF FOUND THEN
        PERFORM hr.audit('tool_status_change', r.tool_run_id, NULL, session_user,
            jsonb_build_object('status', r.status, 'tool', r.tool_name, 'argv', r.argv_json,
                'cwd', r.cwd, 'resumed_from', r.resumed_from));
        RETURN p_capability;
    END IF;
    -- There already: this shim's own first write, or delivered from the spool by another
    -- process of this host first.
    UPDATE hr.tool_runs SET capability_hash = cap_hash
    WHERE tool_run_id = r.tool_run_id AND runner_login = session_user
      AND capability_hash IN ('delivered', cap_hash);
    IF FOUND THEN
        RETURN p_capability;
    END IF;
    IF p_may_exist THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'run % exists already', r.tool_run_id USING ERRCODE = 'unique_violation';
END $$;

-- Delivers a run's final row that its shim could not write before it exited (kept in its
-- host's spool): inserted when the server never saw the run, else it ends the run if that
-- had not ended by itself (or only seemed to have vanished). Only the login that started
-- a run may deliver it. True when it landed.
CREATE FUNCTION hr.run_deliver(p_run jsonb, p_request_fingerprint text, p_shim_gone boolean)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := jsonb_populate_record(NULL::hr.tool_runs, p_run);
    cur hr.tool_runs;
BEGIN
    PERFORM hr.check_status(r.status);
    SELECT * INTO cur FROM hr.tool_runs WHERE tool_run_id = r.tool_run_id FOR UPDATE;
    IF NOT FOUND THEN
        r.runner_login := session_user;
        r.request_fingerprint := p_request_fingerprint;
        -- Nobody holds a capability for a delivered run (its shim may adopt it).
        r.capability_hash := 'delivered';
        r.argv_json := coalesce(r.argv_json, '[]');
        INSERT INTO hr.tool_runs SELECT r.* ON CONFLICT (tool_run_id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN true; -- its shim wrote it meanwhile
        END IF;
        PERFORM hr.audit('tool_status_change', r.tool_run_id, NULL, session_user,
            jsonb_build_object('status', r.status, 'tool', r.tool_name, 'argv', r.argv_json,
                'cwd', r.cwd, 'resumed_from', r.resumed_from, 'delivered', true));
        RETURN true;
    END IF;
    IF cur.runner_login <> session_user THEN
        RAISE EXCEPTION 'run %: not yours (started by another login)', r.tool_run_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A row kept while its first write was slow, landed since by its shim: nothing to add.
    IF r.completed_at IS NULL THEN
        RETURN true;
    END IF;
    IF hr.is_final(cur.status) AND NOT (cur.status = 'failed'
        AND coalesce(cur.reason, '') LIKE 'supervisor vanished%') THEN
        RETURN false;
    END IF;
    -- Only a run nobody supervises any more: delivered earlier, its shim gone (the
    -- delivering runner's word: it is on the run's host), or silent for 30 s. A run whose
    -- shim still writes is that shim's to end: NULL, try again later.
    IF cur.capability_hash <> 'delivered' AND NOT hr.is_final(cur.status) AND NOT p_shim_gone
       AND coalesce(cur.supervisor_heartbeat_at, cur.started_at)
           > to_char((clock_timestamp() - interval '30 seconds') AT TIME ZONE 'UTC',
                     'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') THEN
        RETURN NULL;
    END IF;
    PERFORM hr.set_status(r.tool_run_id, r.status, r.reason, r.exit_code,
        r.completed_at IS NOT NULL, r.last_error_msg, r.completed_at, 'any', session_user);
    UPDATE hr.tool_runs SET last_output_at = coalesce(r.last_output_at, last_output_at),
        last_heartbeat_at = coalesce(r.last_heartbeat_at, last_heartbeat_at)
    WHERE tool_run_id = r.tool_run_id;
    RETURN true;
END $$;

-- Liveness timestamps; returns the run's status, so that a shim learns of a cancellation
-- made on another host (which cannot signal it) with its next heartbeat.
CREATE FUNCTION hr.run_touch(p_run text, p_cap text, p_output text, p_heartbeat text,
    p_supervisor text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    st text;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET last_output_at = coalesce(p_output, last_output_at),
        last_heartbeat_at = coalesce(p_heartbeat, last_heartbeat_at),
        supervisor_heartbeat_at = coalesce(p_supervisor, supervisor_heartbeat_at)
    WHERE tool_run_id = p_run RETURNING status INTO st;
    RETURN st;
END $$;

CREATE FUNCTION hr.run_pid(p_run text, p_cap text, p_pid bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET pid = p_pid WHERE tool_run_id = p_run;
END $$;

-- A status change of the runner's own run: while live, or anything but a cancellation.
-- Returns what it did ({from, to, …}) or NULL.
CREATE FUNCTION hr.run_status(p_run text, p_cap text, p_status text, p_reason text,
    p_exit integer, p_finished boolean, p_error text, p_at text, p_guard text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    prev text;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    IF p_guard NOT IN ('not_final', 'not_cancelled') THEN
        RAISE EXCEPTION 'a runner moves its run only while live or not cancelled'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    prev := hr.set_status(p_run, p_status, p_reason, p_exit, p_finished, p_error, p_at,
        p_guard, session_user);
    RETURN hr.moved(p_run, prev, p_status, p_reason);
END $$;

-- How a cancelled run really ended: its exit code and end time; status and reason stay.
CREATE FUNCTION hr.run_exit(p_run text, p_cap text, p_exit integer, p_at text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET exit_code = p_exit, completed_at = coalesce(completed_at, p_at),
        updated_at = p_at WHERE tool_run_id = p_run AND status = 'cancelled';
END $$;

CREATE FUNCTION hr.run_environment(p_run text, p_cap text, p_env jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET metadata = coalesce(metadata, '{}'::jsonb)
        || jsonb_build_object('env', p_env, 'parked_at', hr.now())
    WHERE tool_run_id = p_run;
END $$;

-- The approvals a run may see: its own, and those of its command (same request) asked by
-- runs of the same login, each with the run that asked it (`_owner`), for the rules of
-- taking over.
CREATE FUNCTION hr.runner_approvals(p_run text, p_cap text, p_prompt_fingerprint text)
RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
BEGIN
    RETURN QUERY SELECT to_jsonb(a) || jsonb_build_object('_owner', hr.run_row(a.tool_run_id))
        FROM hr.approvals a
        WHERE (a.tool_run_id = p_run OR (a.request_fingerprint = r.request_fingerprint
               AND EXISTS (SELECT 1 FROM hr.tool_runs o WHERE o.tool_run_id = a.tool_run_id
                           AND o.runner_login = session_user)))
          AND (p_prompt_fingerprint IS NULL OR a.prompt_fingerprint = p_prompt_fingerprint)
        ORDER BY a.approval_id DESC;
END $$;

CREATE FUNCTION hr.runner_approval(p_run text, p_cap text, p_approval text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
BEGIN
    -- Another command's approval of this login is said to exist, with nothing of what it
    -- asked (an option's value chosen stays: it names no secret); another login's, not.
    RETURN (SELECT CASE
        WHEN a.request_fingerprint = r.request_fingerprint OR a.tool_run_id = p_run
        THEN to_jsonb(a)
        ELSE to_jsonb(a) || jsonb_build_object('question', '', 'context', NULL,
            'options_json', '[]'::jsonb, 'default_value', NULL, 'comment', NULL,
            'prompt_line', NULL, 'chosen_value',
            CASE WHEN hr.logged_value(a) = a.chosen_value THEN a.chosen_value END)
        END FROM hr.approvals a JOIN hr.tool_runs o USING (tool_run_id)
        WHERE a.approval_id = p_approval
          AND (a.tool_run_id = p_run OR o.runner_login = session_user));
END $$;

-- The newest remembered decision in force for this prompt of the run's command.
CREATE FUNCTION hr.runner_remembered(p_run text, p_cap text, p_prompt_fingerprint text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
BEGIN
    RETURN (SELECT to_jsonb(p) FROM hr.policies p
        WHERE p.enabled AND p.tool_name = r.tool_name
          AND p.prompt_fingerprint = p_prompt_fingerprint
          AND (p.argv_json IS NULL OR p.argv_json = r.argv_json)
          AND (p.cwd IS NULL OR p.cwd = r.cwd)
        ORDER BY p.created_at DESC LIMIT 1);
END $$;

-- A new pending approval of this run. Whatever the client sends, it is pending, of this
-- run and command, and undecided. An id the tool chose that is taken gets `p_fallback_id`.
CREATE FUNCTION hr.approval_ask(p_run text, p_cap text, p_approval jsonb, p_fallback_id text)
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals := jsonb_populate_record(NULL::hr.approvals, p_approval);
BEGIN
    a.tool_run_id := p_run;
    a.tool_name := r.tool_name;
    a.execution_id := r.execution_id;
    a.request_fingerprint := r.request_fingerprint;
    a.status := 'pending';
    a.chosen_value := NULL; a.decided_at := NULL; a.decided_by := NULL;
    a.decision_channel := NULL; a.comment := NULL; a.consumed_at := NULL;
    a.consumed_by := NULL; a.claimed_by := NULL; a.claimed_at := NULL;
    a.resumed_run_id := NULL;
    a.created_at := hr.now();
    a.options_json := coalesce(a.options_json, '[]');
    a.allows_text := coalesce(a.allows_text, false);
    -- Expiry rejects: an answer nobody gave (a runner's on_expire = "default") could be
    -- planted by a tool holding the runner login, with a past deadline, for a later run of
    -- its command. Answers without a person are the operator's, as remembered decisions.
    a.expire_action := 'reject';
    IF a.approval_id IS NULL OR EXISTS (SELECT 1 FROM hr.approvals WHERE approval_id = a.approval_id) THEN
        a.approval_id := p_fallback_id;
    END IF;
    IF a.approval_id IS NULL OR a.approval_id !~ '^AP-[0-9A-HJKMNP-TV-Z]{26}$' THEN
        RAISE EXCEPTION 'not an approval id: %', a.approval_id USING ERRCODE = 'check_violation';
    END IF;
    PERFORM hr.insert_approval(a, session_user);
    RETURN to_jsonb(a);
END $$;

-- A prompt answered by the runner's own config policy (or a remembered decision): recorded
-- as decided by `policy:NAME` and used up at once, so nothing else (a re-run, a worker)
-- ever acts on it.
CREATE FUNCTION hr.approval_by_policy(p_run text, p_cap text, p_approval jsonb,
    p_policy text, p_status text, p_value text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals := jsonb_populate_record(NULL::hr.approvals, p_approval);
    now_ text := hr.now();
BEGIN
    IF p_status NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'a policy approves or rejects' USING ERRCODE = 'check_violation';
    END IF;
    a.tool_run_id := p_run; a.tool_name := r.tool_name; a.execution_id := r.execution_id;
    a.request_fingerprint := r.request_fingerprint;
    a.status := p_status; a.chosen_value := p_value;
    a.created_at := now_;
    a.decided_at := now_; a.decided_by := 'policy:' || p_policy;
    a.decision_channel := 'policy:' || p_policy; a.comment := NULL;
    a.consumed_at := now_; a.consumed_by := p_run;
    a.claimed_by := NULL; a.claimed_at := NULL; a.resumed_run_id := NULL;
    a.options_json := coalesce(a.options_json, '[]');
    a.allows_text := coalesce(a.allows_text, false);
    a.expire_action := CASE WHEN a.expire_action = 'default' THEN 'default' ELSE 'reject' END;
    PERFORM hr.insert_approval(a, 'policy:' || p_policy);
    RETURN to_jsonb(a);
END $$;

-- Uses up a decision of this command for this run: decided and unused, and its own run no
-- longer holding it (`hr.released_by`). The run that asked is closed. Returns the approval
-- as it was decided (`_closed`: what closing did), or NULL when it may not be used.
CREATE FUNCTION hr.approval_consume(p_run text, p_cap text, p_approval text,
    p_owner text, p_owner_gone boolean) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals;
    closed jsonb;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval FOR UPDATE;
    IF NOT FOUND OR (a.request_fingerprint IS DISTINCT FROM r.request_fingerprint
                     AND a.tool_run_id <> p_run)
       OR a.status = 'pending' OR a.consumed_at IS NOT NULL
       OR a.decision_channel = 'system:run-ended' THEN
        RETURN NULL;
    END IF;
    IF a.tool_run_id <> p_run AND (a.tool_run_id IS DISTINCT FROM coalesce(p_owner, a.tool_run_id)
        OR NOT hr.released_by(a.tool_run_id, p_owner_gone)) THEN
        RETURN NULL;
    END IF;
    PERFORM hr.consume_one(p_approval, p_run, session_user);
    UPDATE hr.approvals SET resumed_run_id = p_run WHERE approval_id = p_approval;
    closed := hr.close_asker(a, p_run, session_user);
    -- The answer goes back to the runner once, even when the row no longer keeps it.
    RETURN hr.approval_row(p_approval) || jsonb_build_object('chosen_value', a.chosen_value,
        '_closed', closed);
END $$;

-- A retry of the same command takes over the pending approval of a run that no longer
-- holds it, showing the retry's screen; the old run is cancelled. Returns the approval
-- (`_closed`), or NULL when it may not.
CREATE FUNCTION hr.approval_take_over(p_run text, p_cap text, p_approval text, p_fresh jsonb,
    p_owner text, p_owner_gone boolean) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals;
    prev text;
    why text;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval AND status = 'pending'
        FOR UPDATE;
    -- The owner the runner judged (`p_owner`) must still be the owner: a racing retry may
    -- have taken it over since.
    IF NOT FOUND OR a.request_fingerprint IS DISTINCT FROM r.request_fingerprint
       OR a.tool_run_id = p_run OR a.tool_run_id <> p_owner
       OR NOT hr.released_by(a.tool_run_id, p_owner_gone) THEN
        RETURN NULL;
    END IF;
    UPDATE hr.approvals SET tool_run_id = p_run, question = p_fresh->>'question',
        context = p_fresh->>'context', prompt_line = p_fresh->>'prompt_line',
        screen_digest = p_fresh->>'screen_digest', tool_digest = p_fresh->>'tool_digest'
    WHERE approval_id = p_approval;
    why := format('superseded by a retry, %s, which now waits for %s', p_run, p_approval);
    prev := hr.set_status(a.tool_run_id, 'cancelled', why, NULL, true, NULL, NULL,
        'from:waiting_approval', session_user);
    RETURN hr.approval_row(p_approval)
        || jsonb_build_object('_closed', hr.moved(a.tool_run_id, prev, 'cancelled', why));
END $$;

-- Gives back what this run used (all, or one), for its re-run.
CREATE FUNCTION hr.approval_release(p_run text, p_cap text, p_only text, p_why text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    n integer := 0;
    id_ text;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    FOR id_ IN SELECT approval_id FROM hr.approvals WHERE consumed_by = p_run
        AND (p_only IS NULL OR approval_id = p_only)
        AND coalesce(decision_channel, '') NOT LIKE 'policy:%' FOR UPDATE LOOP
        UPDATE hr.approvals SET consumed_at = NULL, consumed_by = NULL WHERE approval_id = id_;
        PERFORM hr.audit('approval_released', p_run, id_, session_user,
            jsonb_build_object('released_by', p_run, 'why', p_why));
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- The run ended without a decision on its pending approvals: they expire.
CREATE FUNCTION hr.approval_abandon(p_run text, p_cap text, p_why text)
RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    RETURN QUERY SELECT * FROM hr.abandon(p_run, p_why);
END $$;

-- ---------------------------------------------------------------------------------------
-- Resuming: an operator, or the host's worker with the runner login of the runs it
-- resumes (it claims and closes them, never decides them).

CREATE FUNCTION hr.is_operator() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(session_user, 'headless_operator', 'MEMBER')
        AND NOT pg_has_role(session_user, 'headless_runner', 'MEMBER')
$$;

-- Refuses a login that runs tools (a runner's, however it also got the operator role):
-- deciding is never theirs.
CREATE FUNCTION hr.check_not_runner() RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF pg_has_role(session_user, 'headless_runner', 'MEMBER') THEN
        RAISE EXCEPTION '%: a runner login does not decide, cancel or clean up', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

-- Refuses unless the caller is an operator or started run `p_run` (its login).
CREATE FUNCTION hr.check_resumer(p_run text) RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT (hr.is_operator()
            OR EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = p_run
                       AND runner_login = session_user)) THEN
        RAISE EXCEPTION 'run %: not yours to resume or close', p_run
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

CREATE FUNCTION hr.run_of(p_approval text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT tool_run_id FROM hr.approvals WHERE approval_id = p_approval
$$;

-- A worker's reads with a runner login: its own login's runs only.
-- p_kind: 'one' (run p_arg), 'supervised' (live, unended), 'resumes' (resumed from p_arg,
-- oldest first), 'parked' (parked with decided, unused approvals).
CREATE FUNCTION hr.worker_runs(p_kind text, p_arg text) RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.run_doc(r) FROM hr.tool_runs r
    WHERE r.runner_login = session_user AND CASE p_kind
        WHEN 'one' THEN r.tool_run_id = p_arg
        WHEN 'supervised' THEN r.status IN ('running', 'stalled', 'waiting_approval')
            AND r.exit_code IS NULL
        WHEN 'resumes' THEN r.resumed_from = p_arg
        WHEN 'parked' THEN r.status = 'waiting_approval' AND r.exit_code = 90
            AND EXISTS (SELECT 1 FROM hr.approvals a WHERE a.tool_run_id = r.tool_run_id
                        AND a.status <> 'pending' AND a.consumed_at IS NULL)
        ELSE false END
    ORDER BY CASE WHEN p_kind IN ('resumes', 'parked') THEN r.tool_run_id END,
             r.tool_run_id DESC
$$;

-- The approvals of a run of this login (`p_run`), or one approval of such a run.
CREATE FUNCTION hr.worker_approvals(p_run text, p_approval text) RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT to_jsonb(a) FROM hr.approvals a JOIN hr.tool_runs r USING (tool_run_id)
    WHERE r.runner_login = session_user
      AND (p_run IS NULL OR a.tool_run_id = p_run)
      AND (p_approval IS NULL OR a.approval_id = p_approval)
    ORDER BY a.approval_id DESC
$$;

-- ---------------------------------------------------------------------------------------
-- The operator: decisions, cancels, resumes and clean-up, recorded with the login.

-- Decides a pending approval (first writer wins). The caller has checked the value against
-- the options; `decided_by` is the login, whatever the client says. Returns
-- {"outcome": "decided"|"conflict"|"expired"|"missing", "approval": …}.
CREATE FUNCTION hr.decide(p_approval text, p_status text, p_value text, p_comment text,
    p_channel text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    a hr.approvals;
BEGIN
    PERFORM hr.check_not_runner();
    IF p_status NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'a decision approves or rejects' USING ERRCODE = 'check_violation';
    END IF;
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('outcome', 'missing');
    END IF;
    IF hr.expire_one(p_approval) THEN
        RETURN jsonb_build_object('outcome', 'expired', 'approval', hr.approval_row(p_approval));
    END IF;
    IF a.status <> 'pending' THEN
        RETURN jsonb_build_object('outcome', 'conflict', 'approval', to_jsonb(a));
    END IF;
    UPDATE hr.approvals SET status = p_status, chosen_value = p_value, decided_at = hr.now(),
        decided_by = session_user, decision_channel = coalesce(p_channel, 'cli'),
        comment = p_comment
    WHERE approval_id = p_approval RETURNING * INTO a;
    PERFORM hr.audit_approval(a, session_user);
    PERFORM hr.ring(p_approval);
    RETURN jsonb_build_object('outcome', 'decided', 'approval', to_jsonb(a));
END $$;

-- Cancels a live run: its pending approvals are rejected (or expire, when overdue) and stay
-- with it. Returns {"outcome": "cancelled"|"finished"|"missing", "run", "previous",
-- "approvals": [the ones this changed]}.
CREATE FUNCTION hr.cancel(p_run text, p_reason text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    prev text;
    why text := CASE WHEN nullif(trim(coalesce(p_reason, '')), '') IS NULL
        THEN format('cancelled by %s', session_user)
        ELSE format('cancelled by %s: %s', session_user, trim(p_reason)) END;
    id_ text;
    a hr.approvals;
    changed jsonb := '[]';
BEGIN
    PERFORM hr.check_not_runner();
    IF hr.run_row(p_run) IS NULL THEN
        RETURN jsonb_build_object('outcome', 'missing');
    END IF;
    prev := hr.set_status(p_run, 'cancelled', why, NULL, true, NULL, NULL, 'not_final',
        session_user);
    IF prev IS NULL THEN
        RETURN jsonb_build_object('outcome', 'finished', 'run', hr.run_row(p_run));
    END IF;
    FOR id_ IN SELECT approval_id FROM hr.approvals WHERE tool_run_id = p_run
        AND status = 'pending' ORDER BY approval_id LOOP
        IF NOT hr.expire_one(id_) THEN
            UPDATE hr.approvals SET status = 'rejected', decided_at = hr.now(),
                decided_by = session_user, decision_channel = 'cli',
                comment = 'the run was cancelled'
            WHERE approval_id = id_ RETURNING * INTO a;
            PERFORM hr.audit_approval(a, session_user);
            PERFORM hr.ring(id_);
        END IF;
        -- The outcome stays with the cancelled run: a later run of the same command is
        -- asked again rather than answered by this cancellation.
        PERFORM hr.consume_one(id_, p_run, session_user);
        changed := changed || jsonb_build_array(hr.approval_row(id_));
    END LOOP;
    RETURN jsonb_build_object('outcome', 'cancelled', 'previous', prev, 'run', hr.run_row(p_run),
        'approvals', changed);
END $$;

-- Fails a live run whose shim is gone (the caller's host facts said so), unless it has
-- moved on since it was seen (`p_seen_status`) or ended on purpose; its pending approvals
-- are abandoned. Returns {"previous", "approvals"} or NULL.
CREATE FUNCTION hr.fail_vanished(p_run text, p_seen_status text, p_why text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs;
    prev text;
    gone jsonb;
BEGIN
    PERFORM hr.check_resumer(p_run);
    SELECT * INTO r FROM hr.tool_runs WHERE tool_run_id = p_run FOR UPDATE;
    IF NOT FOUND OR r.status <> p_seen_status OR r.exit_code IS NOT NULL
       OR r.status NOT IN ('running', 'stalled', 'waiting_approval') THEN
        RETURN NULL;
    END IF;
    prev := hr.set_status(p_run, 'failed', p_why, NULL, true, p_why, NULL,
        'from:' || p_seen_status, session_user);
    IF prev IS NULL THEN RETURN NULL; END IF;
    SELECT coalesce(jsonb_agg(x), '[]') INTO gone
        FROM hr.abandon(p_run, format('the run ended before a decision (%s)', p_why)) x;
    RETURN jsonb_build_object('previous', prev, 'approvals', gone);
END $$;

-- Claims a decided, unused approval for resuming: exactly one worker wins.
CREATE FUNCTION hr.claim(p_approval text, p_worker text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_worker, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_at IS NULL AND consumed_at IS NULL
          AND status <> 'pending' RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

CREATE FUNCTION hr.take_over_claim(p_approval text, p_from text, p_to text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_to, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_by = p_from AND consumed_at IS NULL
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

CREATE FUNCTION hr.set_resumed_run(p_approval text, p_run text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    UPDATE hr.approvals SET resumed_run_id = p_run WHERE approval_id = p_approval
$$;

-- Closes a waiting run (a worker's verdict) if it is still in one of `p_from`.
-- A worker of the run's login closes only a parked run (exit 90), as completed or failed.
CREATE FUNCTION hr.close_run(p_run text, p_status text, p_reason text, p_exit integer,
    p_finished boolean, p_error text, p_at text, p_from text[]) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.check_resumer(p_run);
    IF NOT hr.is_operator() AND (p_status NOT IN ('completed', 'failed')
        OR p_from <> ARRAY['waiting_approval']
        OR NOT EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = p_run
                       AND status = 'waiting_approval' AND exit_code = 90)) THEN
        RAISE EXCEPTION 'run %: a worker closes only a parked run, as completed or failed', p_run
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN hr.set_status(p_run, p_status, p_reason, p_exit, p_finished, p_error, p_at,
        'from:' || array_to_string(p_from, ','), session_user);
END $$;

CREATE FUNCTION hr.consume(p_approval text, p_by text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    SELECT hr.check_resumer(p_by);
    SELECT hr.consume_one(p_approval, p_by, session_user)
$$;

-- Deletes the finished runs that ended before `p_cutoff` with their decided approvals
-- (pending ones stay); the audit chain keeps everything. Returns the run ids and how many
-- approvals went.
CREATE FUNCTION hr.gc(p_cutoff text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    ids text[];
    n integer;
BEGIN
    PERFORM hr.check_not_runner();
    SELECT coalesce(array_agg(tool_run_id ORDER BY tool_run_id), '{}') INTO ids
        FROM hr.tool_runs WHERE hr.is_final(status)
          AND coalesce(completed_at, updated_at) < p_cutoff;
    DELETE FROM hr.approvals WHERE status <> 'pending' AND tool_run_id = ANY(ids);
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM hr.tool_runs WHERE tool_run_id = ANY(ids);
    IF cardinality(ids) > 0 THEN
        PERFORM hr.audit('gc', NULL, NULL, session_user, jsonb_build_object(
            'ended_before', p_cutoff, 'runs', cardinality(ids), 'approvals', n));
    END IF;
    RETURN jsonb_build_object('runs', to_jsonb(ids), 'approvals', n);
END $$;

-- Stores a remembered decision (the newest for a prompt in the same scope replaces older
-- ones); `created_by` is the login.
CREATE FUNCTION hr.remember(p_policy_id text, p_tool text, p_prompt_fingerprint text,
    p_argv jsonb, p_cwd text, p_value text, p_approval text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    p hr.policies;
BEGIN
    PERFORM hr.check_not_runner();
    UPDATE hr.policies SET enabled = false
    WHERE source = 'remembered' AND tool_name = p_tool AND prompt_fingerprint = p_prompt_fingerprint
      AND argv_json IS NOT DISTINCT FROM p_argv AND cwd IS NOT DISTINCT FROM p_cwd;
    INSERT INTO hr.policies (policy_id, name, tool_name, prompt_fingerprint, value, source,
        source_approval_id, created_at, created_by, enabled, argv_json, cwd)
    VALUES (p_policy_id, 'remembered:' || p_approval, p_tool, p_prompt_fingerprint, p_value,
        'remembered', p_approval, hr.now(), session_user, true, p_argv, p_cwd)
    RETURNING * INTO p;
    PERFORM hr.audit('policy_remembered', NULL, p_approval, session_user, jsonb_build_object(
        'policy_id', p_policy_id, 'tool', p_tool, 'prompt_fingerprint', p_prompt_fingerprint,
        'value', p_value, 'argv', p_argv, 'cwd', p_cwd));
    RETURN to_jsonb(p);
END $$;

CREATE FUNCTION hr.forget(p_policy_id text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    p hr.policies;
BEGIN
    PERFORM hr.check_not_runner();
    UPDATE hr.policies SET enabled = false
    WHERE policy_id = p_policy_id AND enabled AND source = 'remembered' RETURNING * INTO p;
    IF NOT FOUND THEN RETURN NULL; END IF;
    PERFORM hr.audit('policy_removed', NULL, p.source_approval_id, session_user,
        jsonb_build_object('policy_id', p_policy_id));
    RETURN to_jsonb(p);
END $$;

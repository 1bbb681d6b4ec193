-- Helpers every other function uses: times, the run and approval documents, status moves, the
-- append-only audit chain and its doorbell (NOTIFY), who may see what.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

CREATE OR REPLACE FUNCTION hr.no_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit chain is append-only (% refused for %)', TG_OP, session_user
        USING ERRCODE = 'insufficient_privilege';
END $$;

-- Times as the Rust side writes them: RFC 3339 UTC with milliseconds.
CREATE OR REPLACE FUNCTION hr.now() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Eight bytes, little-endian: a length in the chain's encoding.
CREATE OR REPLACE FUNCTION hr.le8(n bigint) RETURNS bytea LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    out bytea := '\x0000000000000000';
BEGIN
    FOR i IN 0..7 LOOP
        out := set_byte(out, i, ((n >> (8 * i)) & 255)::int);
    END LOOP;
    RETURN out;
END $$;

CREATE OR REPLACE FUNCTION hr.audit(p_event text, p_run text, p_approval text, p_actor text, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    prev text;
    at text := hr.now();
    body text := p_data::text;
    h text;
    new_id bigint;
    -- The chain of the login that causes the row: logins append side by side.
    c text := session_user;
BEGIN
    -- One writer of a chain at a time (two logins whose names hash alike share a lock,
    -- which only makes them wait).
    PERFORM pg_advisory_xact_lock(hashtext('headless-run audit chain'), hashtext(c));
    SELECT hash INTO prev FROM hr.events WHERE chain = c ORDER BY id DESC LIMIT 1;
    prev := coalesce(prev, repeat('0', 64));
    h := encode(sha256(hr.chain_field(prev) || hr.chain_field(at) || hr.chain_field(p_event)
        || hr.chain_field(p_run) || hr.chain_field(p_approval) || hr.chain_field(p_actor)
        || hr.chain_field(body)), 'hex');
    INSERT INTO hr.events (at, event, tool_run_id, approval_id, actor, db_user, data, prev_hash, hash, chain)
    VALUES (at, p_event, p_run, p_approval, p_actor, session_user, body, prev, h, c)
    RETURNING id INTO new_id;
    RETURN new_id;
END $$;

-- A decision, expiry or new approval wakes whoever listens. Nothing is said (anyone may
-- LISTEN): the woken read what their role lets them.
CREATE OR REPLACE FUNCTION hr.ring(p_approval text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('headless_run', '')
$$;

CREATE OR REPLACE FUNCTION hr.is_final(s text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT s IN ('completed', 'failed', 'failed_timeout', 'cancelled')
$$;

CREATE OR REPLACE FUNCTION hr.check_status(s text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF s IS NULL OR s NOT IN ('queued', 'running', 'waiting_approval', 'completed', 'failed',
                              'failed_timeout', 'stalled', 'cancelled') THEN
        RAISE EXCEPTION 'not a run status: %', s USING ERRCODE = 'check_violation';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION hr.approval_row(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT to_jsonb(a) FROM hr.approvals a WHERE approval_id = p_id
$$;

CREATE OR REPLACE FUNCTION hr.run_row(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT hr.run_doc(r) FROM hr.tool_runs r WHERE tool_run_id = p_id
$$;

-- The chosen value as the audit chain may show it: an option's value as it is, free text
-- only as its digest.
CREATE OR REPLACE FUNCTION hr.logged_value(a hr.approvals) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN a.chosen_value IS NULL THEN NULL
        WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(a.options_json) o
                     WHERE o->>'value' = a.chosen_value) THEN a.chosen_value
        ELSE 'sha256:' || encode(sha256(convert_to(a.chosen_value, 'UTF8')), 'hex') END
$$;

CREATE OR REPLACE FUNCTION hr.audit_approval(a hr.approvals, p_actor text) RETURNS void
LANGUAGE sql AS $$
    SELECT hr.audit('approval_status_change', a.tool_run_id, a.approval_id, p_actor,
        jsonb_build_object('status', a.status, 'chosen_value', hr.logged_value(a),
            'decided_by', a.decided_by, 'decision_channel', a.decision_channel,
            'comment', a.comment));
$$;

-- What a status change did, for the caller's event log: NULL when it did nothing.
CREATE OR REPLACE FUNCTION hr.moved(p_run text, p_prev text, p_status text, p_reason text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_prev IS NULL THEN NULL ELSE jsonb_build_object(
        'tool_run_id', p_run, 'from', p_prev, 'to', p_status, 'reason', p_reason,
        'tool_name', (SELECT tool_name FROM hr.tool_runs WHERE tool_run_id = p_run),
        'execution_id', (SELECT execution_id FROM hr.tool_runs WHERE tool_run_id = p_run)) END
$$;

-- Expires one overdue pending approval, or uses the decision of one its wait timer held
-- until now (`crate::reviews::release`); true when it did.
CREATE OR REPLACE FUNCTION hr.expire_one(p_id text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    a hr.approvals;
    now_ text := hr.now();
    chosen text;
    last_ jsonb;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_id AND status = 'pending'
        AND usable_at IS NOT NULL AND usable_at <= now_
        AND jsonb_array_length(reviews) > 0 FOR UPDATE;
    IF FOUND THEN
        last_ := a.reviews -> (jsonb_array_length(a.reviews) - 1);
        -- Decided when the people decided (the last approval), not when the timer let it go.
        UPDATE hr.approvals SET status = 'approved', chosen_value = last_->>'value',
            decided_at = coalesce(last_->>'at', now_),
            decided_by = (SELECT string_agg(r->>'by', ', ' ORDER BY n)
                          FROM jsonb_array_elements(a.reviews) WITH ORDINALITY x(r, n)),
            decision_channel = last_->>'channel',
            comment = format('held %ss by its wait timer', a.wait_seconds)
                || coalesce('; ' || (last_->>'comment'), ''),
            usable_at = NULL
        WHERE approval_id = p_id RETURNING * INTO a;
        PERFORM hr.audit_approval(a, a.decided_by);
        PERFORM hr.ring(p_id);
        RETURN true;
    END IF;
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_id AND status = 'pending'
        AND usable_at IS NULL AND expires_at IS NOT NULL AND expires_at <= now_ FOR UPDATE;
    IF NOT FOUND THEN RETURN false; END IF;
    -- An approval that needs reviewers is never answered by nobody.
    chosen := CASE WHEN a.expire_action = 'default'
        AND NOT (a.reviews_required > 1 OR a.reviewer_group IS NOT NULL)
        THEN a.default_value END;
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

CREATE OR REPLACE FUNCTION hr.expire_due() RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER
SET search_path = hr, pg_temp AS $$
DECLARE
    id_ text;
BEGIN
    FOR id_ IN SELECT approval_id FROM hr.approvals WHERE status = 'pending'
        AND ((expires_at IS NOT NULL AND expires_at <= hr.now())
             OR (usable_at IS NOT NULL AND usable_at <= hr.now()))
        ORDER BY approval_id LOOP
        IF hr.expire_one(id_) THEN
            RETURN NEXT hr.approval_row(id_);
        END IF;
    END LOOP;
END $$;

-- A number that changes whenever a run or approval may have changed.
-- Audited changes, and the liveness of runs (output, heartbeats, pids: not audited, but
-- shown), counted by hr.change_seq. Two index or sequence reads, whatever the number of
-- runs. (A liveness write counts as it happens, before its commit: a look in between
-- reads the old row once more, and the next write moves the mark again.)
CREATE OR REPLACE FUNCTION hr.change_mark() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = hr, pg_temp AS $$
    SELECT (SELECT coalesce(max(id), 0) FROM hr.events) * 65536
        + ((SELECT last_value + is_called::int FROM hr.change_seq) & 65535)
$$;

-- Counts a write of runs' liveness for hr.change_mark.
CREATE OR REPLACE FUNCTION hr.liveness_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('hr.change_seq');
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION hr.run_of(p_approval text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT tool_run_id FROM hr.approvals WHERE approval_id = p_approval
$$;

-- Whether this login reads every execution (an operator's or a viewer's that runs no tools).
CREATE OR REPLACE FUNCTION hr.reads_all() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT pg_has_role(session_user, 'headless_runner', 'MEMBER')
        AND (pg_has_role(session_user, 'headless_operator', 'MEMBER')
             OR pg_has_role(session_user, 'headless_viewer', 'MEMBER'))
$$;

-- A run as the clients see it: its owner is the login that wrote it.
CREATE OR REPLACE FUNCTION hr.run_doc(r hr.tool_runs) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT (to_jsonb(r) - 'runner_login' - 'request_fingerprint' - 'capability_hash')
        || jsonb_build_object('owner', r.runner_login)
$$;

-- `p_from` + the interval between two times a client gave (its TTL), as hr.now() writes
-- times; a TTL that is not one (negative, unreadable) is none: due at once.
CREATE OR REPLACE FUNCTION hr.later(p_from text, p_client_from text, p_client_to text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    ttl interval;
BEGIN
    BEGIN
        ttl := greatest(interval '0', p_client_to::timestamptz - p_client_from::timestamptz);
    EXCEPTION WHEN others THEN
        ttl := interval '0';
    END;
    RETURN to_char((p_from::timestamptz + coalesce(ttl, interval '0')) AT TIME ZONE 'UTC',
        'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
END $$;

-- Whether run `r` (of execution `r.execution_id`) is one this login sees as a worker of
-- that execution: the execution's owner and its named label workers see each other's runs
-- of it.
CREATE OR REPLACE FUNCTION hr.sees_run(r hr.tool_runs) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT r.runner_login = session_user OR hr.reads_all()
        OR EXISTS (SELECT 1 FROM hr.pipelines p
                   WHERE p.execution_id = r.execution_id AND hr.works_on(p)
                     AND (r.runner_login = p.owner OR p.workers ? r.runner_login)
                     -- a step's own run of this execution, not any run its id was given to
                     AND left(r.metadata->>'pipeline', length(p.execution_id) + 1)
                         = p.execution_id || '/')
$$;

-- How many OS users (the uids runs of a login say they ran as) each runner login has on
-- each host: more than one means two users share a login, and each can have a worker run
-- the other's commands as itself. Every run the store keeps counts (a run's own times are
-- its runner's word). For `monitor db grant`, `monitor doctor` and the worker.
CREATE OR REPLACE FUNCTION hr.shared_logins() RETURNS TABLE (login text, host text, uids bigint[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT r.runner_login, coalesce(r.host, ''),
        array_agg(DISTINCT CASE WHEN r.metadata->>'uid' ~ '^[0-9]{1,12}$'
                                THEN (r.metadata->>'uid')::bigint ELSE -1 END)
    FROM hr.tool_runs r
    WHERE (hr.reads_all() OR r.runner_login = session_user
           OR pg_has_role(session_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'hr'),
                          'MEMBER'))
    GROUP BY r.runner_login, coalesce(r.host, '')
    -- A run that says no uid, or not a number, counts as a user of its own (-1).
    HAVING count(DISTINCT coalesce(r.metadata->>'uid', '?')) > 1
$$;

-- Moves a run's status, and a run that ends here ends its chain of decisions.
CREATE OR REPLACE FUNCTION hr.set_status(p_run text, p_status text, p_reason text,
    p_exit integer, p_finished boolean, p_error text, p_at text, p_guard text, p_actor text)
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
    IF hr.is_final(p_status) AND NOT hr.is_final(cur) THEN
        PERFORM hr.chain_ended(p_run, p_actor);
    END IF;
    RETURN cur;
END $$;

-- A new approval row: never born kept for a chain or spent, whatever the client's
-- row said.
CREATE OR REPLACE FUNCTION hr.insert_approval(a hr.approvals, p_actor text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    a.kept_for := NULL;
    a.consumed_reason := NULL;
    -- What it needs comes with the question; what it has so far, only from decisions.
    -- Within `Requirement::bounded`'s bounds, whoever sent it.
    a.reviews_required := least(greatest(coalesce(a.reviews_required, 1), 1), 20);
    a.wait_seconds := least(greatest(coalesce(a.wait_seconds, 0), 0), 2592000);
    IF a.reviewer_group !~ '^[A-Za-z0-9._@-]{1,64}$' THEN
        a.reviewer_group := NULL;
    END IF;
    a.reviews := '[]';
    a.usable_at := NULL;
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

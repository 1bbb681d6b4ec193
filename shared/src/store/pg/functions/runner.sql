-- The runner (`store/postgres/runner.rs`): one run, through its capability — its rows, its
-- questions and how they are answered (`answering::plan` decides; these check what an
-- untrusted runner login could forge).
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

-- The run that asked `a` (and exited 90) is done once run `p_by` takes up its decision.
CREATE OR REPLACE FUNCTION hr.close_asker(a hr.approvals, p_by text, p_actor text) RETURNS jsonb
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
CREATE OR REPLACE FUNCTION hr.abandon(p_run text, p_why text) RETURNS SETOF jsonb
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

-- The run a runner's capability opens, locked for the transaction; refused otherwise (the
-- refusal is in the server's log with the login).
CREATE OR REPLACE FUNCTION hr.own_run(p_run text, p_cap text) RETURNS hr.tool_runs
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
CREATE OR REPLACE FUNCTION hr.released_by(p_owner text, p_shim_gone boolean) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT o.runner_login = session_user
        AND (o.exit_code IS NOT NULL OR hr.is_final(o.status) OR p_shim_gone)
        FROM hr.tool_runs o WHERE o.tool_run_id = p_owner), false)
$$;

-- Delivers a run's final row that its shim could not write before it exited (kept in its
-- host's spool): inserted when the server never saw the run, else it ends the run if that
-- had not ended by itself (or only seemed to have vanished). Only the login that started
-- a run may deliver it. True when it landed.
CREATE OR REPLACE FUNCTION hr.run_deliver(p_run jsonb, p_request_fingerprint text, p_shim_gone boolean)
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
CREATE OR REPLACE FUNCTION hr.run_touch(p_run text, p_cap text, p_output text, p_heartbeat text,
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

-- The same, with what the tool's last `{"event":"error"}` said (schema v6).
CREATE OR REPLACE FUNCTION hr.run_touch(p_run text, p_cap text, p_output text, p_heartbeat text,
    p_supervisor text, p_error text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    st text;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET last_output_at = coalesce(p_output, last_output_at),
        last_heartbeat_at = coalesce(p_heartbeat, last_heartbeat_at),
        supervisor_heartbeat_at = coalesce(p_supervisor, supervisor_heartbeat_at),
        last_error_msg = coalesce(left(p_error, 1024), last_error_msg)
    WHERE tool_run_id = p_run RETURNING status INTO st;
    RETURN st;
END $$;

CREATE OR REPLACE FUNCTION hr.run_pid(p_run text, p_cap text, p_pid bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET pid = p_pid WHERE tool_run_id = p_run;
END $$;

-- A status change of the runner's own run: while live, or anything but a cancellation.
-- Returns what it did ({from, to, …}) or NULL.
CREATE OR REPLACE FUNCTION hr.run_status(p_run text, p_cap text, p_status text, p_reason text,
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
CREATE OR REPLACE FUNCTION hr.run_exit(p_run text, p_cap text, p_exit integer, p_at text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET exit_code = p_exit, completed_at = coalesce(completed_at, p_at),
        updated_at = p_at WHERE tool_run_id = p_run AND status = 'cancelled';
END $$;

CREATE OR REPLACE FUNCTION hr.run_environment(p_run text, p_cap text, p_env jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    UPDATE hr.tool_runs SET metadata = coalesce(metadata, '{}'::jsonb)
        || jsonb_build_object('env', p_env, 'parked_at', hr.now())
    WHERE tool_run_id = p_run;
END $$;

CREATE OR REPLACE FUNCTION hr.runner_approval(p_run text, p_cap text, p_approval text) RETURNS jsonb
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
CREATE OR REPLACE FUNCTION hr.runner_remembered(p_run text, p_cap text, p_prompt_fingerprint text)
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

-- A prompt answered by the runner's own config policy (or a remembered decision): recorded
-- as decided by `policy:NAME` and used up at once, so nothing else (a re-run, a worker)
-- ever acts on it.
CREATE OR REPLACE FUNCTION hr.approval_by_policy(p_run text, p_cap text, p_approval jsonb,
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

-- The run ended without a decision on its pending approvals: they expire.
CREATE OR REPLACE FUNCTION hr.approval_abandon(p_run text, p_cap text, p_why text)
RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    RETURN QUERY SELECT * FROM hr.abandon(p_run, p_why);
END $$;

-- A runner's question, with the server's clock for both its times.
CREATE OR REPLACE FUNCTION hr.approval_ask(p_run text, p_cap text, p_approval jsonb,
    p_fallback_id text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
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
    a.resumed_run_id := NULL; a.superseded_by := NULL; a.supersedes := NULL;
    a.created_at := hr.now();
    IF a.expires_at IS NOT NULL THEN
        a.expires_at := hr.later(a.created_at, coalesce(p_approval->>'created_at',
            p_approval->>'expires_at'), p_approval->>'expires_at');
    END IF;
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

-- Whether pending approval `a` may be taken over by run `r` (the retry) from run `p_owner`
-- the runner judged: the same command — by what the two rows the server keeps say (tool,
-- command line, directory, host, user), not only by the fingerprints the runner sent —,
-- still that owner's, and released by it.
CREATE OR REPLACE FUNCTION hr.may_take_over(a hr.approvals, r hr.tool_runs, p_owner text,
    p_owner_gone boolean) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT a.request_fingerprint IS NOT DISTINCT FROM r.request_fingerprint
        AND a.tool_run_id <> r.tool_run_id AND a.tool_run_id = p_owner
        AND hr.released_by(a.tool_run_id, p_owner_gone)
        AND EXISTS (SELECT 1 FROM hr.tool_runs o WHERE o.tool_run_id = a.tool_run_id
                    AND o.tool_name = r.tool_name AND o.argv_json = r.argv_json
                    AND o.cwd IS NOT DISTINCT FROM r.cwd AND o.host IS NOT DISTINCT FROM r.host
                    AND o.metadata->'uid' IS NOT DISTINCT FROM r.metadata->'uid')
$$;

-- A retry of the same command on the same screen (and tool) waits for the pending
-- approval of a run that no longer holds it: the approval moves to the retry's run, its
-- text untouched; the old run is cancelled. A retry on another screen may not (it asks
-- hr.approval_supersede). Returns the approval (`_closed`), or NULL when it may not.
CREATE OR REPLACE FUNCTION hr.approval_take_over(p_run text, p_cap text, p_approval text,
    p_fresh jsonb, p_owner text, p_owner_gone boolean) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals;
    prev text;
    why text;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval AND status = 'pending'
        FOR UPDATE;
    IF NOT FOUND OR NOT hr.may_take_over(a, r, p_owner, p_owner_gone)
       OR a.screen_digest IS DISTINCT FROM p_fresh->>'screen_digest'
       OR (a.tool_digest IS NOT NULL AND a.tool_digest IS DISTINCT FROM p_fresh->>'tool_digest')
       -- Asked under a weaker requirement (`Requirement::covers`): asked again.
       OR a.reviews_required < coalesce((p_fresh->>'reviews_required')::bigint, 1)
       OR a.wait_seconds < coalesce((p_fresh->>'wait_seconds')::bigint, 0)
       OR (p_fresh->>'reviewer_group' IS NOT NULL
           AND a.reviewer_group IS DISTINCT FROM p_fresh->>'reviewer_group')
    THEN
        RETURN NULL;
    END IF;
    UPDATE hr.approvals SET tool_run_id = p_run WHERE approval_id = p_approval;
    why := format('superseded by a retry, %s, which now waits for %s', p_run, p_approval);
    prev := hr.set_status(a.tool_run_id, 'cancelled', why, NULL, true, NULL, NULL,
        'from:waiting_approval', session_user);
    RETURN hr.approval_row(p_approval)
        || jsonb_build_object('_closed', hr.moved(a.tool_run_id, prev, 'cancelled', why));
END $$;

-- A retry on another screen than the pending approval's: a new pending approval
-- (`p_fresh`, saying what changed) for the retry, and the old one ended `expired` by
-- `system:superseded`, pointing to the new one, its text as the operator read it; the old
-- run is cancelled. Returns the new approval (`_closed`, `_superseded`: the old one), or
-- NULL when the old one may not be taken over by this run.
CREATE OR REPLACE FUNCTION hr.approval_supersede(p_run text, p_cap text, p_approval text,
    p_fresh jsonb, p_fallback_id text, p_owner text, p_owner_gone boolean) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals;
    fresh jsonb;
    new_id text;
    prev text;
    why text;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval AND status = 'pending'
        FOR UPDATE;
    IF NOT FOUND OR NOT hr.may_take_over(a, r, p_owner, p_owner_gone) THEN
        RETURN NULL;
    END IF;
    fresh := hr.approval_ask(p_run, p_cap, p_fresh, p_fallback_id);
    new_id := fresh->>'approval_id';
    UPDATE hr.approvals SET supersedes = p_approval WHERE approval_id = new_id;
    fresh := fresh || jsonb_build_object('supersedes', p_approval);
    UPDATE hr.approvals SET status = 'expired', decided_at = hr.now(),
        decided_by = 'system:superseded', decision_channel = 'system:superseded',
        comment = format('the screen changed: asked again as %s', new_id),
        superseded_by = new_id
    WHERE approval_id = p_approval RETURNING * INTO a;
    PERFORM hr.audit_approval(a, session_user);
    PERFORM hr.ring(p_approval);
    why := format('superseded by a retry, %s, whose screen changed: it waits for %s instead of %s',
        p_run, new_id, p_approval);
    prev := hr.set_status(a.tool_run_id, 'cancelled', why, NULL, true, NULL, NULL,
        'from:waiting_approval', session_user);
    RETURN fresh || jsonb_build_object('_closed', hr.moved(a.tool_run_id, prev, 'cancelled', why),
        '_superseded', to_jsonb(a));
END $$;

-- The first use of a decided approval, by run `p_by`: consumed, and kept for its resume.
-- False when it was used before or is not decided. Free text stays until the chain ends.
CREATE OR REPLACE FUNCTION hr.consume_one(p_approval text, p_by text, p_actor text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE hr.approvals SET consumed_at = hr.now(), consumed_by = p_by, kept_for = p_by
    WHERE approval_id = p_approval AND consumed_at IS NULL AND status <> 'pending';
    IF NOT FOUND THEN RETURN false; END IF;
    PERFORM hr.audit('approval_consumed', p_by, p_approval, p_actor,
        jsonb_build_object('consumed_by', p_by));
    RETURN true;
END $$;

-- Starts a run, bound as the resume of a parked run when it is one.
CREATE OR REPLACE FUNCTION hr.run_start(p_run jsonb, p_request_fingerprint text,
    p_may_exist boolean, p_capability text) RETURNS text
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
    IF NOT EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = r.tool_run_id) THEN
        r.resumed_from := coalesce(hr.bind_resume(r), r.resumed_from);
    END IF;
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

-- The approvals a run may see, each with whether it is offered to the run.
CREATE OR REPLACE FUNCTION hr.runner_approvals(p_run text, p_cap text, p_prompt_fingerprint text)
RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
BEGIN
    RETURN QUERY SELECT to_jsonb(a) || jsonb_build_object('_owner', hr.run_row(a.tool_run_id),
            '_offered', hr.offered(a, p_run))
        FROM hr.approvals a
        WHERE (a.tool_run_id = p_run OR (a.request_fingerprint = r.request_fingerprint
               AND EXISTS (SELECT 1 FROM hr.tool_runs o WHERE o.tool_run_id = a.tool_run_id
                           AND o.runner_login = session_user)))
          AND (p_prompt_fingerprint IS NULL OR a.prompt_fingerprint = p_prompt_fingerprint)
        ORDER BY a.approval_id DESC;
END $$;

-- Uses a decision offered to this run (its own unused, or one the run it resumes holds for
-- it): kept for its resume now. The run it resumed, still waiting, is closed by the
-- decision it was resumed on. Returns the approval as decided (`_closed`), or NULL when
-- it is not this run's to use. (`p_owner` and `p_owner_gone` are no longer looked at: who
-- may use a decision was settled when the run started.)
CREATE OR REPLACE FUNCTION hr.approval_consume(p_run text, p_cap text, p_approval text,
    p_owner text, p_owner_gone boolean) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs := hr.own_run(p_run, p_cap);
    a hr.approvals;
    h text := hr.bound_to(p_run);
    o hr.approvals;
    closed jsonb;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval FOR UPDATE;
    IF NOT FOUND OR (a.request_fingerprint IS DISTINCT FROM r.request_fingerprint
                     AND a.tool_run_id <> p_run)
       OR NOT hr.offered(a, p_run) THEN
        RETURN NULL;
    END IF;
    IF a.consumed_at IS NULL THEN
        PERFORM hr.consume_one(p_approval, p_run, session_user);
    ELSE
        PERFORM hr.take_kept(p_approval, p_run, session_user);
    END IF;
    IF a.tool_run_id <> p_run THEN
        UPDATE hr.approvals SET resumed_run_id = coalesce(resumed_run_id, p_run)
        WHERE approval_id = p_approval;
    END IF;
    -- The first answer from the chain it resumes: that run's part is done.
    IF h IS NOT NULL AND hr.holder(a) = h THEN
        SELECT * INTO o FROM hr.approvals WHERE tool_run_id = h AND resumed_run_id = p_run
            AND status <> 'pending' ORDER BY decided_at DESC, approval_id DESC LIMIT 1;
        IF FOUND THEN
            closed := hr.close_asker(o, p_run, session_user);
        END IF;
    END IF;
    -- The answer goes back to the runner as decided.
    RETURN hr.approval_row(p_approval) || jsonb_build_object('chosen_value', a.chosen_value,
        '_closed', closed);
END $$;

-- `p_only` NULL: the run parks at a prompt (hr.chain_parked). Else the prompt went away
-- before decision `p_only` could be typed: given back to this run (unused again if it was
-- its first user, else kept for the run it resumes, as before it took it).
CREATE OR REPLACE FUNCTION hr.approval_release(p_run text, p_cap text, p_only text, p_why text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    a hr.approvals;
    h text;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    IF p_only IS NULL THEN
        PERFORM hr.chain_parked(p_run, session_user);
        RETURN 0;
    END IF;
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_only AND kept_for = p_run
        AND coalesce(decision_channel, '') NOT LIKE 'policy:%' FOR UPDATE;
    IF NOT FOUND THEN RETURN 0; END IF;
    IF a.consumed_by = p_run THEN
        UPDATE hr.approvals SET consumed_at = NULL, consumed_by = NULL, kept_for = NULL
        WHERE approval_id = p_only;
    ELSE
        h := hr.bound_to(p_run);
        IF h IS NULL THEN RETURN 0; END IF;
        UPDATE hr.approvals SET kept_for = h WHERE approval_id = p_only;
    END IF;
    PERFORM hr.audit('approval_released', p_run, p_only, session_user,
        jsonb_build_object('released_by', p_run, 'why', p_why));
    RETURN 1;
END $$;

CREATE OR REPLACE FUNCTION hr.approval_withdraw(p_run text, p_cap text, p_approval text, p_why text)
RETURNS SETOF jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    a hr.approvals;
BEGIN
    PERFORM hr.own_run(p_run, p_cap);
    FOR a IN UPDATE hr.approvals SET status = 'expired', decided_at = hr.now(),
            decided_by = 'system:withdrawn', decision_channel = 'system:run-ended',
            comment = p_why
        WHERE approval_id = p_approval AND tool_run_id = p_run AND status = 'pending'
        RETURNING * LOOP
        PERFORM hr.audit_approval(a, 'system:withdrawn');
        PERFORM hr.ring(a.approval_id);
        RETURN NEXT to_jsonb(a);
    END LOOP;
END $$;

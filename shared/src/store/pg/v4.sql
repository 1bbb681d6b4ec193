-- Schema v4 of the PostgreSQL store: a decision stays with its run (issue 26), as the
-- embedded store does it (`shared/src/chain.rs`, which says the rule in full):
--
-- * a decision is offered only to the run that asked it (unused), or to the resume of the
--   run that holds it (hr.holder: the asker until someone uses it, then the run of its
--   chain that used it last) — never to a separate run of the command;
-- * which run is a parked run's resume is settled when the run starts (hr.run_start,
--   hr.bind_resume): the run its login's worker started for it (`resumed_from`), or else
--   the first run of the same command started after its decision while no worker claimed
--   it; recorded in the new run's `resumed_from` and the parked run's `resumed_run_id`;
-- * what a resume uses is kept for its own resume (`kept_for`: answers, free text too)
--   while the chain is live, and spent with a reason (`consumed_reason`) when the chain
--   ends or a resume parks or ends without using what it was offered (hr.set_status,
--   hr.chain_ended, hr.approval_release).

ALTER TABLE hr.approvals ADD COLUMN kept_for text;
ALTER TABLE hr.approvals ADD COLUMN consumed_reason text;
CREATE INDEX approvals_kept ON hr.approvals(kept_for) WHERE kept_for IS NOT NULL;
CREATE INDEX approvals_fresh ON hr.approvals(request_fingerprint)
    WHERE consumed_at IS NULL AND status <> 'pending';
CREATE INDEX tool_runs_resumed ON hr.tool_runs(resumed_from) WHERE resumed_from IS NOT NULL;

-- Whether decision `a` can still answer: decided, not closed with its run, and unused or
-- kept for a live chain.
CREATE FUNCTION hr.live(a hr.approvals) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT a.status <> 'pending' AND a.decision_channel IS DISTINCT FROM 'system:run-ended'
        AND (a.consumed_at IS NULL OR a.kept_for IS NOT NULL)
$$;

-- The run whose resume a live decision is offered to.
CREATE FUNCTION hr.holder(a hr.approvals) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN a.consumed_at IS NULL THEN a.tool_run_id ELSE a.kept_for END
$$;

-- The run `p_run` was bound to resume: its `resumed_from`, once that run's decisions name it.
CREATE FUNCTION hr.bound_to(p_run text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT r.resumed_from FROM hr.tool_runs r
    WHERE r.tool_run_id = p_run AND r.resumed_from IS NOT NULL
      AND EXISTS (SELECT 1 FROM hr.approvals o WHERE o.tool_run_id = r.resumed_from
                  AND o.resumed_run_id = p_run)
$$;

-- Whether decision `a` is offered to run `p_run`: its own while unused, or one the run it
-- resumes holds for it.
CREATE FUNCTION hr.offered(a hr.approvals, p_run text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT hr.live(a) AND coalesce(CASE
        WHEN hr.holder(a) = p_run THEN a.consumed_at IS NULL
        ELSE hr.holder(a) = hr.bound_to(p_run) END, false)
$$;

-- New run `r` (its first row, not stored yet) as the resume of a parked run of this login
-- and command whose decision is made, if one may be resumed by it and nobody resumes it
-- yet: that run's decisions name `r`. Returns the run it resumes, or NULL.
CREATE FUNCTION hr.bind_resume(r hr.tool_runs) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    h text;
BEGIN
    IF r.status <> 'running' OR coalesce(r.metadata->>'mode', '') = 'interactive'
       OR coalesce(r.metadata ? 'pipeline', false) THEN
        RETURN NULL;
    END IF;
    -- An approval of this command past its time is expired first: its run's resume meets
    -- the expiry.
    FOR h IN SELECT approval_id FROM hr.approvals WHERE status = 'pending'
        AND request_fingerprint = r.request_fingerprint
        AND expires_at IS NOT NULL AND expires_at <= hr.now() ORDER BY approval_id LOOP
        PERFORM hr.expire_one(h);
    END LOOP;
    FOR h IN SELECT p.tool_run_id FROM hr.approvals o JOIN hr.tool_runs p USING (tool_run_id)
        WHERE o.request_fingerprint = r.request_fingerprint AND o.status <> 'pending'
          AND o.consumed_at IS NULL AND o.decision_channel IS DISTINCT FROM 'system:run-ended'
          AND p.runner_login = session_user AND p.tool_run_id <> r.tool_run_id
          AND p.status = 'waiting_approval' AND p.exit_code = 90
          AND p.tool_name = r.tool_name AND p.argv_json = r.argv_json
          AND p.cwd IS NOT DISTINCT FROM r.cwd
          AND (p.metadata->>'runner') IS NOT DISTINCT FROM (r.metadata->>'runner')
          AND (p.metadata->'uid' IS NULL OR p.metadata->'uid' = r.metadata->'uid')
          AND (r.resumed_from = p.tool_run_id
               OR (r.resumed_from IS NULL AND o.claimed_by IS NULL
                   AND o.prompt_kind IS DISTINCT FROM 'cooperative'))
        ORDER BY o.decided_at DESC, o.approval_id DESC
    LOOP
        -- Looked at again under the parked run's lock: of two runs, one is its resume.
        PERFORM 1 FROM hr.tool_runs WHERE tool_run_id = h FOR UPDATE;
        IF EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = h
                   AND status = 'waiting_approval' AND exit_code = 90)
           AND NOT EXISTS (SELECT 1 FROM hr.approvals b WHERE b.tool_run_id = h
                           AND b.status <> 'pending' AND b.consumed_at IS NULL
                           AND b.resumed_run_id IS NOT NULL) THEN
            UPDATE hr.approvals SET resumed_run_id = r.tool_run_id
            WHERE tool_run_id = h AND status <> 'pending' AND consumed_at IS NULL
              AND decision_channel IS DISTINCT FROM 'system:run-ended';
            RETURN h;
        END IF;
    END LOOP;
    RETURN NULL;
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

-- A kept decision used again by `p_by`, the resume it was kept for: kept for its resume now.
CREATE FUNCTION hr.take_kept(p_approval text, p_by text, p_actor text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE hr.approvals SET kept_for = p_by
    WHERE approval_id = p_approval AND kept_for IS NOT NULL AND kept_for <> p_by;
    IF NOT FOUND THEN RETURN false; END IF;
    PERFORM hr.audit('approval_consumed', p_by, p_approval, p_actor,
        jsonb_build_object('consumed_by', p_by));
    RETURN true;
END $$;

-- Spends a live decision for good, saying why: it answers nothing any more, and free text
-- is dropped from the row.
CREATE FUNCTION hr.spend(p_approval text, p_reason text, p_actor text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    a hr.approvals;
BEGIN
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval FOR UPDATE;
    IF NOT FOUND OR NOT hr.live(a) THEN RETURN false; END IF;
    UPDATE hr.approvals SET consumed_at = coalesce(consumed_at, hr.now()), kept_for = NULL,
        consumed_reason = p_reason,
        chosen_value = CASE WHEN hr.logged_value(a) IS DISTINCT FROM a.chosen_value
            THEN NULL ELSE chosen_value END
    WHERE approval_id = p_approval;
    PERFORM hr.audit('approval_spent', coalesce(a.kept_for, a.tool_run_id), p_approval,
        p_actor, jsonb_build_object('reason', p_reason));
    RETURN true;
END $$;

-- Spends every live decision held for run `p_run`'s resume: those it keeps, and its own
-- decided ones nobody used.
CREATE FUNCTION hr.spend_held(p_run text, p_reason text, p_actor text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    id_ text;
    n integer := 0;
BEGIN
    FOR id_ IN SELECT approval_id FROM hr.approvals
        WHERE kept_for = p_run
           OR (tool_run_id = p_run AND status <> 'pending' AND consumed_at IS NULL
               AND decision_channel IS DISTINCT FROM 'system:run-ended')
        ORDER BY approval_id LOOP
        IF hr.spend(id_, p_reason, p_actor) THEN n := n + 1; END IF;
    END LOOP;
    RETURN n;
END $$;

-- Fails run `p_h`, still waiting, whose resume `p_by` ended without using its decision
-- (`p_exit` 90: it stopped at another prompt), naming it as `monitor worker` does.
-- (`p_exit` NULL: it ended `p_status` with no exit code of its own, as a cancelled run.)
CREATE FUNCTION hr.close_unused(p_h text, p_by text, p_exit integer, p_status text,
    p_actor text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    o hr.approvals;
    why text;
BEGIN
    SELECT * INTO o FROM hr.approvals WHERE tool_run_id = p_h AND resumed_run_id = p_by
        AND status <> 'pending' ORDER BY decided_at DESC, approval_id DESC LIMIT 1;
    IF NOT FOUND THEN RETURN; END IF;
    why := format('approval %s %s; resumed as %s, which %s', o.approval_id, o.status, p_by,
        CASE WHEN p_exit IS NULL THEN format('ended (%s) before reaching the prompt', p_status)
             WHEN p_exit = 90 THEN 'stopped at another prompt (exit 90)'
             WHEN p_exit = 0 THEN 'exited 0 without the prompt appearing again: the decision answered nothing'
             ELSE format('exited %s before reaching the prompt', p_exit) END);
    PERFORM hr.set_status(p_h, 'failed', why, p_exit, true, NULL, NULL,
        'from:waiting_approval', p_actor);
END $$;

-- Run `p_run` has just ended: its chain ends with it unless a resume of it runs; what the
-- run it resumed held for it and it did not use is spent, and that run, if still waiting,
-- fails naming it — except after a failure to start (exit 125-127, nothing used), which
-- gives the binding back for the next attempt.
CREATE FUNCTION hr.chain_ended(p_run text, p_actor text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r hr.tool_runs;
    h text := hr.bound_to(p_run);
    waiting boolean;
BEGIN
    SELECT * INTO r FROM hr.tool_runs WHERE tool_run_id = p_run;
    IF NOT FOUND THEN RETURN; END IF;
    IF NOT EXISTS (SELECT 1 FROM hr.tool_runs x WHERE x.resumed_from = p_run
                   AND NOT hr.is_final(x.status) AND hr.bound_to(x.tool_run_id) = p_run) THEN
        PERFORM hr.spend_held(p_run, format('the chain ended: %s %s%s', p_run, r.status,
            CASE WHEN r.exit_code IS NULL THEN '' ELSE format(', exit %s', r.exit_code) END),
            p_actor);
    END IF;
    IF h IS NULL THEN RETURN; END IF;
    waiting := EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = h
                       AND status = 'waiting_approval');
    IF waiting AND r.exit_code IN (125, 126, 127) THEN
        UPDATE hr.approvals SET resumed_run_id = NULL
        WHERE tool_run_id = h AND resumed_run_id = p_run;
        RETURN;
    END IF;
    PERFORM hr.spend_held(h, format('%s, which resumed %s, ended (%s) without using it',
        p_run, h, r.status), p_actor);
    IF waiting THEN
        PERFORM hr.close_unused(h, p_run, r.exit_code, r.status, p_actor);
    END IF;
END $$;

-- Run `p_run` parked at a prompt (exit 90): what it used stays kept for its resume; what
-- the run it resumes held for it and it did not use is spent, and that run, if still
-- waiting, fails naming it.
CREATE FUNCTION hr.chain_parked(p_run text, p_actor text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    h text := hr.bound_to(p_run);
BEGIN
    IF h IS NULL THEN RETURN; END IF;
    PERFORM hr.spend_held(h, format('%s, which resumed %s, stopped at another prompt without using it',
        p_run, h), p_actor);
    PERFORM hr.close_unused(h, p_run, 90, 'waiting_approval', p_actor);
END $$;

-- Moves a run's status (as v1), and a run that ends here ends its chain of decisions.
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

-- Starts a run (as v1), bound as the resume of a parked run when it is one.
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

-- The approvals a run may see (as v1), each with whether it is offered to the run.
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

-- Cancels a live run (as v1); the rejections it gives its pending approvals are spent
-- with it.
CREATE OR REPLACE FUNCTION hr.cancel(p_run text, p_reason text) RETURNS jsonb
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
        PERFORM hr.spend(id_, 'the run was cancelled', session_user);
        changed := changed || jsonb_build_array(hr.approval_row(id_));
    END LOOP;
    RETURN jsonb_build_object('outcome', 'cancelled', 'previous', prev, 'run', hr.run_row(p_run),
        'approvals', changed);
END $$;

-- Deletes finished runs (as v1), but not one whose decisions a live chain still keeps.
CREATE OR REPLACE FUNCTION hr.gc(p_cutoff text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    ids text[];
    n integer;
BEGIN
    PERFORM hr.check_not_runner();
    SELECT coalesce(array_agg(tool_run_id ORDER BY tool_run_id), '{}') INTO ids
        FROM hr.tool_runs r WHERE hr.is_final(status)
          AND coalesce(completed_at, updated_at) < p_cutoff
          AND NOT EXISTS (SELECT 1 FROM hr.approvals k WHERE k.tool_run_id = r.tool_run_id
                          AND k.kept_for IS NOT NULL);
    DELETE FROM hr.approvals WHERE status <> 'pending' AND tool_run_id = ANY(ids);
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM hr.tool_runs WHERE tool_run_id = ANY(ids);
    IF cardinality(ids) > 0 THEN
        PERFORM hr.audit('gc', NULL, NULL, session_user, jsonb_build_object(
            'ended_before', p_cutoff, 'runs', cardinality(ids), 'approvals', n));
    END IF;
    RETURN jsonb_build_object('runs', to_jsonb(ids), 'approvals', n);
END $$;

-- A new approval row (as v1): never born kept for a chain or spent, whatever the client's
-- row said.
CREATE OR REPLACE FUNCTION hr.insert_approval(a hr.approvals, p_actor text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    a.kept_for := NULL;
    a.consumed_reason := NULL;
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

-- Claims a decided, unused approval for resuming (as v3), unless a run already resumes its
-- run (a re-run by hand that started first).
CREATE OR REPLACE FUNCTION hr.claim(p_approval text, p_worker text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_executor(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_worker, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_at IS NULL AND consumed_at IS NULL
          AND status <> 'pending' AND resumed_run_id IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

-- A decision stays with its run (issue 26): who a decision is offered to, which run resumes a
-- parked one, what a chain keeps and spends. `shared/src/store/sqlite/chain.rs` says the rule in full.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

CREATE OR REPLACE FUNCTION hr.chain_field(s text) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN s IS NULL THEN '\x00'::bytea
        ELSE '\x01'::bytea || hr.le8(octet_length(s)) || convert_to(s, 'UTF8') END
$$;

-- Whether decision `a` can still answer: decided, not closed with its run, and unused or
-- kept for a live chain.
CREATE OR REPLACE FUNCTION hr.live(a hr.approvals) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT a.status <> 'pending' AND a.decision_channel IS DISTINCT FROM 'system:run-ended'
        AND (a.consumed_at IS NULL OR a.kept_for IS NOT NULL)
$$;

-- The run whose resume a live decision is offered to.
CREATE OR REPLACE FUNCTION hr.holder(a hr.approvals) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN a.consumed_at IS NULL THEN a.tool_run_id ELSE a.kept_for END
$$;

-- The run `p_run` was bound to resume: its `resumed_from`, once that run's decisions name it.
CREATE OR REPLACE FUNCTION hr.bound_to(p_run text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT r.resumed_from FROM hr.tool_runs r
    WHERE r.tool_run_id = p_run AND r.resumed_from IS NOT NULL
      AND EXISTS (SELECT 1 FROM hr.approvals o WHERE o.tool_run_id = r.resumed_from
                  AND o.resumed_run_id = p_run)
$$;

-- Whether decision `a` is offered to run `p_run`: its own while unused, or one the run it
-- resumes holds for it.
CREATE OR REPLACE FUNCTION hr.offered(a hr.approvals, p_run text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT hr.live(a) AND coalesce(CASE
        WHEN hr.holder(a) = p_run THEN a.consumed_at IS NULL
        ELSE hr.holder(a) = hr.bound_to(p_run) END, false)
$$;

-- New run `r` (its first row, not stored yet) as the resume of a parked run of this login
-- and command whose decision is made, if one may be resumed by it and nobody resumes it
-- yet: that run's decisions name `r`. Returns the run it resumes, or NULL.
CREATE OR REPLACE FUNCTION hr.bind_resume(r hr.tool_runs) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    h text;
BEGIN
    IF r.status <> 'running' OR coalesce(r.metadata->>'mode', '') = 'interactive'
       OR coalesce(r.metadata ? 'pipeline', false) THEN
        RETURN NULL;
    END IF;
    -- An approval of this command past its time is expired first, and one its wait timer
    -- let go is used: its run's resume meets the expiry, or the decision.
    FOR h IN SELECT approval_id FROM hr.approvals WHERE status = 'pending'
        AND request_fingerprint = r.request_fingerprint
        AND ((expires_at IS NOT NULL AND expires_at <= hr.now())
             OR (usable_at IS NOT NULL AND usable_at <= hr.now()))
        ORDER BY approval_id LOOP
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

-- A kept decision used again by `p_by`, the resume it was kept for: kept for its resume now.
CREATE OR REPLACE FUNCTION hr.take_kept(p_approval text, p_by text, p_actor text) RETURNS boolean
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
CREATE OR REPLACE FUNCTION hr.spend(p_approval text, p_reason text, p_actor text) RETURNS boolean
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
CREATE OR REPLACE FUNCTION hr.spend_held(p_run text, p_reason text, p_actor text) RETURNS integer
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
CREATE OR REPLACE FUNCTION hr.close_unused(p_h text, p_by text, p_exit integer, p_status text,
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
CREATE OR REPLACE FUNCTION hr.chain_ended(p_run text, p_actor text) RETURNS void LANGUAGE plpgsql AS $$
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
CREATE OR REPLACE FUNCTION hr.chain_parked(p_run text, p_actor text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    h text := hr.bound_to(p_run);
BEGIN
    IF h IS NULL THEN RETURN; END IF;
    PERFORM hr.spend_held(h, format('%s, which resumed %s, stopped at another prompt without using it',
        p_run, h), p_actor);
    PERFORM hr.close_unused(h, p_run, 90, 'waiting_approval', p_actor);
END $$;

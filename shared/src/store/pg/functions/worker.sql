-- Resuming (`monitor worker`): an operator, or a host's worker with the runner login of the
-- runs it resumes (it claims and closes them, never decides them).
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

-- Refuses unless the caller is an operator or started run `p_run` (its login).
CREATE OR REPLACE FUNCTION hr.check_resumer(p_run text) RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT (hr.is_operator()
            OR EXISTS (SELECT 1 FROM hr.tool_runs WHERE tool_run_id = p_run
                       AND runner_login = session_user)) THEN
        RAISE EXCEPTION 'run %: not yours to resume or close', p_run
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

-- A worker's reads with a runner login: its own login's runs only.
-- p_kind: 'one' (run p_arg), 'supervised' (live, unended), 'resumes' (resumed from p_arg,
-- oldest first), 'parked' (parked with decided, unused approvals).
CREATE OR REPLACE FUNCTION hr.worker_runs(p_kind text, p_arg text) RETURNS SETOF jsonb
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
CREATE OR REPLACE FUNCTION hr.worker_approvals(p_run text, p_approval text) RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT to_jsonb(a) FROM hr.approvals a JOIN hr.tool_runs r USING (tool_run_id)
    WHERE r.runner_login = session_user
      AND (p_run IS NULL OR a.tool_run_id = p_run)
      AND (p_approval IS NULL OR a.approval_id = p_approval)
    ORDER BY a.approval_id DESC
$$;

-- Fails a live run whose shim is gone (the caller's host facts said so), unless it has
-- moved on since it was seen (`p_seen_status`) or ended on purpose; its pending approvals
-- are abandoned. Returns {"previous", "approvals"} or NULL.
CREATE OR REPLACE FUNCTION hr.fail_vanished(p_run text, p_seen_status text, p_why text) RETURNS jsonb
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

CREATE OR REPLACE FUNCTION hr.set_resumed_run(p_approval text, p_run text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    UPDATE hr.approvals SET resumed_run_id = p_run WHERE approval_id = p_approval
$$;

-- Closes a waiting run (a worker's verdict) if it is still in one of `p_from`.
-- A worker of the run's login closes only a parked run (exit 90), as completed or failed.
CREATE OR REPLACE FUNCTION hr.close_run(p_run text, p_status text, p_reason text, p_exit integer,
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

CREATE OR REPLACE FUNCTION hr.consume(p_approval text, p_by text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_resumer(hr.run_of(p_approval));
    SELECT hr.check_resumer(p_by);
    SELECT hr.consume_one(p_approval, p_by, session_user)
$$;

-- Refuses unless run `p_run` was started by this very login: what only the identity that
-- started a run may do (claim it to run its command again). An operator's login runs
-- nothing, so it claims nothing either.
CREATE OR REPLACE FUNCTION hr.check_executor(p_run text) RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    owner_ text;
    token text;
BEGIN
    SELECT runner_login, metadata->>'runner' INTO owner_, token FROM hr.tool_runs
    WHERE tool_run_id = p_run;
    -- A run a server recorded for a runner token is run again on that runner only.
    IF token IS NOT NULL THEN
        RAISE EXCEPTION 'run %: not resumed: it was recorded by runner token %: run it again on that runner',
            p_run, token USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF owner_ IS DISTINCT FROM session_user::text THEN
        RAISE EXCEPTION 'run %: not resumed: it was started by %, not by %: only a worker of % runs it again',
            p_run, coalesce(owner_, 'nobody known'), session_user, coalesce(owner_, 'its login')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION hr.take_over_claim(p_approval text, p_from text, p_to text)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_executor(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_to, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_by = p_from AND consumed_at IS NULL
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

-- Pipelines: whether this login is one of execution `p`'s: its owner, or a label worker
-- its owner named.
CREATE OR REPLACE FUNCTION hr.works_on(p hr.pipelines) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT p.owner = session_user OR p.workers ? session_user::text
$$;

-- Whether `p_new` moves only what a label worker (this login, named by the execution's
-- starter) may move of `cur`: the same steps, each as it was but for labelled tasks and
-- gates it claims — ready → running as itself, or its own running step's run (pid, beat,
-- the report of how it ended). Everything else (other steps, results, the flow) is the
-- starter's runner's to move.
CREATE OR REPLACE FUNCTION hr.label_work_only(cur hr.pipelines, p_new jsonb) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    x jsonb;
    o jsonb;
BEGIN
    IF jsonb_typeof(p_new) <> 'array'
       OR jsonb_array_length(p_new) <> jsonb_array_length(cur.steps) THEN
        RETURN false;
    END IF;
    FOR x IN SELECT v FROM jsonb_array_elements(p_new) v LOOP
        SELECT v INTO o FROM jsonb_array_elements(cur.steps) v
        WHERE v->>'node' = x->>'node' AND v->>'iteration' = x->>'iteration';
        IF o IS NULL THEN
            RETURN false;
        END IF;
        CONTINUE WHEN x = o;
        IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(cur.definition->'nodes') n
                       WHERE n->>'id' = x->>'node' AND n->>'kind' IN ('task', 'gate')
                         AND n->>'host' IS NOT NULL)
           OR (x - 'status' - 'run') IS DISTINCT FROM (o - 'status' - 'run')
           OR x->>'status' IS DISTINCT FROM 'running'
           OR x->'run'->>'login' IS DISTINCT FROM session_user::text
           OR NOT (o->>'status' = 'ready'
                   OR (o->>'status' = 'running' AND o->'run'->>'login' = session_user::text
                       AND NOT (o->'run' ? 'report')))
        THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END $$;

-- Claims a decided, unused approval for resuming, unless a run already resumes its
-- run (a re-run by hand that started first).
CREATE OR REPLACE FUNCTION hr.claim(p_approval text, p_worker text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_executor(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_worker, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_at IS NULL AND consumed_at IS NULL
          AND status <> 'pending' AND resumed_run_id IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

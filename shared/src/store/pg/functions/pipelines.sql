-- Pipelines (`store/postgres/pipelines.rs`): executions started and moved by their runner
-- login, a human step completed only with a person's approval, cancelled by operators.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

-- Refuses steps `p_new` (of execution `p_ex`, pipeline `p_name`, started by `p_owner`)
-- where one (node, iteration) is listed twice, or a human step is completed (newly, or
-- changed since `p_old`) unless by an approval of its own question, asked in the step's
-- own run (a run of the owner's, `pipeline NAME NODE`), that an operator's login approved.
CREATE OR REPLACE FUNCTION hr.check_human_steps(p_ex text, p_name text, p_owner text, p_def jsonb,
    p_old jsonb, p_new jsonb) RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    s jsonb;
BEGIN
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_new) x
               GROUP BY x->>'node', x->>'iteration' HAVING count(*) > 1) THEN
        RAISE EXCEPTION 'pipeline %: a step listed twice', p_ex
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR s IN SELECT x FROM jsonb_array_elements(p_new) x
        WHERE x->>'status' = 'completed'
          AND EXISTS (SELECT 1 FROM jsonb_array_elements(p_def->'nodes') n
                      WHERE n->>'id' = x->>'node' AND n->>'kind' = 'human')
          AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_old) o
                          WHERE o->>'node' = x->>'node' AND o->>'iteration' = x->>'iteration'
                            AND o->>'status' = 'completed' AND o = x)
    LOOP
        IF NOT EXISTS (
            SELECT 1 FROM hr.approvals a JOIN hr.tool_runs r USING (tool_run_id),
                jsonb_array_elements(p_def->'nodes') n
            WHERE a.approval_id = s->'run'->>'approval_id'
              AND a.tool_run_id = s->'run'->>'tool_run_id'
              AND a.status = 'approved'
              AND coalesce(a.chosen_value, '') <> 'reject'
              AND a.decision_channel NOT LIKE 'policy:%'
              AND a.decision_channel NOT LIKE 'system:%'
              AND EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = a.decided_by
                          AND pg_has_role(g.rolname, 'headless_operator', 'MEMBER')
                          AND NOT pg_has_role(g.rolname, 'headless_runner', 'MEMBER'))
              AND n->>'id' = s->>'node' AND a.question = n->>'question'
              AND r.tool_name = 'pipeline' AND r.execution_id = p_ex
              AND r.runner_login = p_owner
              AND r.argv_json = jsonb_build_array('pipeline', p_name, s->>'node')
              AND r.metadata->>'pipeline'
                  = format('%s/%s#%s', p_ex, s->>'node', s->>'iteration'))
        THEN
            RAISE EXCEPTION 'pipeline %: human step % completed without an operator''s approval',
                p_ex, s->>'node' USING ERRCODE = 'insufficient_privilege';
        END IF;
    END LOOP;
END $$;

-- In a decision's own transaction (an operator's, right after hr.decide): execution `p`
-- moved by decision `p_approval` on its human step, as the engine computed it. Written only
-- when the step waited for that approval's run and now says what the decision said (and
-- no human step is completed without an operator's approval); false when there is nothing
-- to move this way (the runner then moves it).
CREATE OR REPLACE FUNCTION hr.pipeline_decided(p_approval text, p jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    a hr.approvals;
    r hr.tool_runs;
    cur hr.pipelines;
    step text;
    ex text;
    node text;
    it text;
    want text;
BEGIN
    IF NOT hr.is_operator() THEN
        RAISE EXCEPTION '%: only an operator''s decision moves a pipeline this way', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO a FROM hr.approvals WHERE approval_id = p_approval;
    IF NOT FOUND OR a.status = 'pending' OR a.consumed_at IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT * INTO r FROM hr.tool_runs WHERE tool_run_id = a.tool_run_id;
    IF NOT FOUND OR r.tool_name <> 'pipeline' OR r.metadata->>'pipeline' IS NULL THEN
        RETURN false;
    END IF;
    step := r.metadata->>'pipeline';
    ex := split_part(step, '/', 1);
    node := regexp_replace(substr(step, length(ex) + 2), '#[0-9]+$', '');
    it := substring(step from '#([0-9]+)$');
    SELECT * INTO cur FROM hr.pipelines WHERE execution_id = ex FOR UPDATE;
    IF NOT FOUND OR cur.execution_id IS DISTINCT FROM p->>'execution_id'
       OR cur.version IS DISTINCT FROM (p->>'version')::bigint OR hr.is_final(cur.status) THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(cur.steps) s
                   WHERE s->>'node' = node AND s->>'iteration' = it
                     AND s->>'status' = 'waiting_approval'
                     AND s->'run'->>'tool_run_id' = r.tool_run_id) THEN
        RETURN false;
    END IF;
    want := CASE WHEN a.status = 'approved' AND coalesce(a.chosen_value, '') <> 'reject'
        THEN 'completed' ELSE 'failed' END;
    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p->'steps') s
                   WHERE s->>'node' = node AND s->>'iteration' = it AND s->>'status' = want) THEN
        RETURN false;
    END IF;
    -- What the decision may not touch: every other step that has run, runs or waits stays
    -- as it was, and no task or gate settles or starts by it.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(cur.steps) o
               WHERE o->>'status' IN ('completed', 'failed', 'skipped', 'running',
                                      'waiting_approval', 'cancelled')
                 AND NOT (o->>'node' = node AND o->>'iteration' = it)
                 AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p->'steps') x WHERE x = o))
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p->'steps') x,
                      jsonb_array_elements(cur.definition->'nodes') n
                  WHERE n->>'id' = x->>'node' AND n->>'kind' IN ('task', 'gate')
                    AND x->>'status' IN ('completed', 'failed', 'running')
                    AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(cur.steps) o
                                    WHERE o = x)) THEN
        RETURN false;
    END IF;
    PERFORM hr.check_human_steps(cur.execution_id, cur.name, cur.owner, cur.definition,
        cur.steps, p->'steps');
    UPDATE hr.pipelines SET steps = p->'steps', status = p->>'status', reason = p->>'reason',
        updated_at = hr.now(), version = version + 1
    WHERE execution_id = cur.execution_id;
    PERFORM pg_notify('headless_run', '');
    RETURN true;
END $$;

-- Withdraws the question a human step of an ended (failed, cancelled) execution still asks,
-- or that of a step cancelled while the execution goes on (a `wait_for: first` merge's
-- loser): its run fails and its pending approval expires (`system:run-ended`), so nobody
-- is left to decide what no longer waits. Only the execution's owner, for its own
-- question runs. The approvals it closed.
CREATE OR REPLACE FUNCTION hr.pipeline_withdraw(p_run text, p_why text) RETURNS SETOF jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.tool_runs;
BEGIN
    SELECT * INTO r FROM hr.tool_runs WHERE tool_run_id = p_run FOR UPDATE;
    IF NOT FOUND OR r.runner_login <> session_user OR r.tool_name <> 'pipeline'
       OR r.status <> 'waiting_approval'
       OR NOT EXISTS (SELECT 1 FROM hr.pipelines p WHERE p.execution_id = r.execution_id
                      AND p.owner = session_user
                      AND (p.status IN ('failed', 'cancelled')
                           OR EXISTS (SELECT 1 FROM jsonb_array_elements(p.steps) s
                                      WHERE s->>'status' = 'cancelled'
                                        AND s->'run'->>'tool_run_id' = p_run))) THEN
        RETURN;
    END IF;
    PERFORM hr.set_status(p_run, 'failed', p_why, 1, true, NULL, NULL,
        'from:waiting_approval', session_user);
    RETURN QUERY SELECT x FROM hr.abandon(p_run, p_why) x;
END $$;

CREATE OR REPLACE FUNCTION hr.pipeline_docs(p_id text, p_open boolean, p_limit integer)
RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT to_jsonb(p) FROM hr.pipelines p
    WHERE (p_id IS NULL OR p.execution_id = p_id)
      AND (NOT p_open OR p.status IN ('running', 'waiting_approval'))
      AND (hr.works_on(p) OR hr.reads_all())
    ORDER BY CASE WHEN p_open THEN p.created_at END ASC,
             CASE WHEN NOT p_open THEN p.created_at END DESC,
             p.execution_id
    LIMIT greatest(p_limit, 0)
$$;

-- Starts an execution with this (runner) login as its owner, its definition's digest and
-- the label workers it lets in as the starter gave them; false when its id is taken.
CREATE OR REPLACE FUNCTION hr.pipeline_insert(p jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    r hr.pipelines := jsonb_populate_record(NULL::hr.pipelines, p);
    n integer;
BEGIN
    IF NOT pg_has_role(session_user, 'headless_runner', 'MEMBER') THEN
        RAISE EXCEPTION '%: only a runner login runs pipelines (their steps are its runs)',
            session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    r.owner := session_user;
    r.version := coalesce(r.version, 0);
    r.created_at := hr.now();
    r.updated_at := r.created_at;
    r.workers := coalesce(r.workers, '[]');
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(r.workers) w WHERE jsonb_typeof(w) <> 'string') THEN
        RAISE EXCEPTION 'workers: login names' USING ERRCODE = 'check_violation';
    END IF;
    PERFORM hr.check_human_steps(r.execution_id, r.name, r.owner, r.definition, '[]', r.steps);
    INSERT INTO hr.pipelines SELECT r.* ON CONFLICT (execution_id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('headless_run', '');
    END IF;
    RETURN n > 0;
END $$;

-- Writes an execution if it is still at `version`. A label worker its owner named
-- moves only its labelled steps' claims and reports (hr.label_work_only), never the rest of
-- the row: the starter's runner applies what it reports.
-- The steps of an execution cancelled with `p_why` (`Execution::cancel`, the same rule):
-- one that ran or waited is cancelled, one not started is skipped, the others stay.
CREATE OR REPLACE FUNCTION hr.settle_steps(p_steps jsonb, p_why text) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(CASE
        WHEN s->>'status' IN ('running', 'waiting_approval')
            THEN s || jsonb_build_object('status', 'cancelled', 'reason', p_why)
        WHEN s->>'status' IN ('pending', 'ready')
            THEN s || jsonb_build_object('status', 'skipped', 'reason', p_why)
        ELSE s END ORDER BY n), '[]'::jsonb)
    FROM jsonb_array_elements(p_steps) WITH ORDINALITY x(s, n)
$$;

CREATE OR REPLACE FUNCTION hr.pipeline_swap(p jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    cur hr.pipelines;
    status_ text := p->>'status';
BEGIN
    SELECT * INTO cur FROM hr.pipelines WHERE execution_id = p->>'execution_id' FOR UPDATE;
    IF NOT FOUND OR cur.version IS DISTINCT FROM (p->>'version')::bigint THEN
        RETURN false;
    END IF;
    IF cur.owner = session_user THEN
        IF hr.is_final(cur.status) AND (status_ IS DISTINCT FROM cur.status
                                        OR cur.steps IS DISTINCT FROM p->'steps') THEN
            RAISE EXCEPTION 'pipeline %: it has ended (%)', cur.execution_id, cur.status
                USING ERRCODE = 'check_violation';
        END IF;
        PERFORM hr.check_human_steps(cur.execution_id, cur.name, cur.owner, cur.definition,
            cur.steps, p->'steps');
        UPDATE hr.pipelines SET steps = p->'steps', status = status_, reason = p->>'reason',
            runner = p->>'runner', heartbeat_at = p->>'heartbeat_at', updated_at = hr.now(),
            version = version + 1
        WHERE execution_id = cur.execution_id;
    ELSIF hr.works_on(cur) THEN
        IF hr.is_final(cur.status) OR NOT hr.label_work_only(cur, p->'steps') THEN
            RAISE EXCEPTION 'pipeline %: a label worker moves only the labelled steps it claims',
                cur.execution_id USING ERRCODE = 'insufficient_privilege';
        END IF;
        UPDATE hr.pipelines SET steps = p->'steps', updated_at = hr.now(), version = version + 1
        WHERE execution_id = cur.execution_id;
    ELSIF hr.is_operator() THEN
        IF status_ IS DISTINCT FROM 'cancelled' OR hr.is_final(cur.status) THEN
            RAISE EXCEPTION 'pipeline %: an operator only cancels an execution that has not ended',
                cur.execution_id USING ERRCODE = 'insufficient_privilege';
        END IF;
        UPDATE hr.pipelines SET status = 'cancelled', reason = p->>'reason',
            steps = hr.settle_steps(cur.steps, p->>'reason'),
            updated_at = hr.now(), version = version + 1
        WHERE execution_id = cur.execution_id;
    ELSE
        RAISE EXCEPTION 'pipeline %: not yours to move (it was started by another login)',
            cur.execution_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF cur.steps IS DISTINCT FROM p->'steps' OR cur.status IS DISTINCT FROM status_ THEN
        PERFORM pg_notify('headless_run', '');
    END IF;
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION hr.execution_runs(p_ex text) RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.run_doc(r) FROM hr.tool_runs r
    WHERE r.execution_id = p_ex AND hr.sees_run(r)
    ORDER BY r.started_at, r.tool_run_id
$$;

CREATE OR REPLACE FUNCTION hr.step_approvals(p_run text, p_approval text) RETURNS SETOF jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT to_jsonb(a) FROM hr.approvals a JOIN hr.tool_runs r USING (tool_run_id)
    WHERE hr.sees_run(r)
      AND (p_run IS NULL OR a.tool_run_id = p_run)
      AND (p_approval IS NULL OR a.approval_id = p_approval)
    ORDER BY a.approval_id
$$;

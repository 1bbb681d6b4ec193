-- Schema v3 of the PostgreSQL store: identity from authentication (DESIGN §14).
--
-- * A run's `owner` is the login that wrote it (`runner_login`, set by hr.run_start from
--   `session_user`), shown in every run document; only that login's worker claims it.
-- * An approval never changes under the operator: a retry on another screen supersedes it
--   with a new approval (hr.approval_supersede) instead of rewriting it, a takeover only
--   moves it to the retry's run, and hr.decide refuses a decision made on another version
--   (its `screen_digest`) or on a superseded approval.
-- * Times are the server's: an approval's `created_at` and `expires_at` (its TTL as the
--   runner asked, counted from the server's clock).
-- * A pipeline keeps its definition's digest and its starter's uid, and the logins of the
--   label workers its starter lets run its labelled steps (`workers`): they read the
--   execution and move its steps as the owner would, never its runner or heartbeat.

ALTER TABLE hr.approvals ADD COLUMN superseded_by text;
ALTER TABLE hr.approvals ADD COLUMN supersedes text;
ALTER TABLE hr.pipelines ADD COLUMN uid bigint;
ALTER TABLE hr.pipelines ADD COLUMN definition_digest text;
ALTER TABLE hr.pipelines ADD COLUMN workers jsonb NOT NULL DEFAULT '[]'
    CHECK (jsonb_typeof(workers) = 'array');

-- A run as the clients see it: its owner is the login that wrote it.
CREATE OR REPLACE FUNCTION hr.run_doc(r hr.tool_runs) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT (to_jsonb(r) - 'runner_login' - 'request_fingerprint' - 'capability_hash')
        || jsonb_build_object('owner', r.runner_login)
$$;

-- `p_from` + the interval between two times a client gave (its TTL), as hr.now() writes
-- times; a TTL that is not one (negative, unreadable) is none: due at once.
CREATE FUNCTION hr.later(p_from text, p_client_from text, p_client_to text) RETURNS text
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

-- A runner's question: as v1's, with the server's clock for both its times.
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
CREATE FUNCTION hr.may_take_over(a hr.approvals, r hr.tool_runs, p_owner text,
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
CREATE FUNCTION hr.approval_supersede(p_run text, p_cap text, p_approval text,
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

-- Refuses a decision on a pipeline's human step that names its deciders by a login not
-- among them, and (`p_also`: the token a server decides for) by a token not among them.
-- A channel is the client's word, so it never counts here.
DROP FUNCTION hr.decide(text, text, text, text, text);
DROP FUNCTION hr.check_decider(hr.approvals);
CREATE FUNCTION hr.check_decider(a hr.approvals, p_also text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    step text;
    ex text;
    node text;
    found_ boolean;
    allowed jsonb;
    who text;
BEGIN
    SELECT r.metadata->>'pipeline' INTO step FROM hr.tool_runs r
    WHERE r.tool_run_id = a.tool_run_id AND r.tool_name = 'pipeline';
    IF step IS NULL THEN
        RETURN;
    END IF;
    ex := split_part(step, '/', 1);
    node := regexp_replace(substr(step, length(ex) + 2), '#[0-9]+$', '');
    SELECT true, n->'deciders' INTO found_, allowed
    FROM hr.pipelines p, jsonb_array_elements(p.definition->'nodes') n
    WHERE p.execution_id = ex AND n->>'id' = node;
    IF found_ IS NULL THEN
        RAISE EXCEPTION 'cannot read the pipeline of %: no step % in %', a.approval_id, node, ex
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF jsonb_typeof(allowed) <> 'array' OR jsonb_array_length(allowed) = 0 THEN
        RETURN;
    END IF;
    FOREACH who IN ARRAY ARRAY[session_user::text, p_also] LOOP
        IF who IS NOT NULL AND NOT allowed ? who THEN
            RAISE EXCEPTION 'only % may decide this pipeline step (%), not %',
                (SELECT string_agg(x, ', ') FROM jsonb_array_elements_text(allowed) x), node, who
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END LOOP;
END $$;

-- Decides a pending approval (first writer wins), as v2's, and only on the version the
-- decider was shown (`p_version`: its screen digest; NULL: as its id names it). A
-- superseded approval is never decided: `conflict`, with `superseded_by`. Returns
-- {"outcome": "decided"|"conflict"|"changed"|"expired"|"missing", "approval": …}.
CREATE FUNCTION hr.decide(p_approval text, p_status text, p_value text, p_comment text,
    p_channel text, p_version text, p_also text) RETURNS jsonb
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
    PERFORM hr.check_decider(a, p_also);
    IF hr.expire_one(p_approval) THEN
        RETURN jsonb_build_object('outcome', 'expired', 'approval', hr.approval_row(p_approval));
    END IF;
    IF a.superseded_by IS NOT NULL THEN
        RETURN jsonb_build_object('outcome', 'conflict', 'approval', to_jsonb(a));
    END IF;
    IF p_version IS NOT NULL AND a.screen_digest IS DISTINCT FROM p_version THEN
        RETURN jsonb_build_object('outcome', 'changed', 'approval', to_jsonb(a));
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

-- v2's decision, for a monitor of an earlier build: a decision by id, on the approval as
-- it is (one never changes once asked), with every other check of the one above.
CREATE FUNCTION hr.decide(p_approval text, p_status text, p_value text, p_comment text,
    p_channel text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.decide(p_approval, p_status, p_value, p_comment, p_channel, NULL, NULL)
$$;

-- Refuses unless run `p_run` was started by this very login: what only the identity that
-- started a run may do (claim it to run its command again). An operator's login runs
-- nothing, so it claims nothing either.
CREATE FUNCTION hr.check_executor(p_run text) RETURNS void LANGUAGE plpgsql STABLE AS $$
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

CREATE OR REPLACE FUNCTION hr.claim(p_approval text, p_worker text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.check_executor(hr.run_of(p_approval));
    WITH c AS (UPDATE hr.approvals SET claimed_by = p_worker, claimed_at = hr.now()
        WHERE approval_id = p_approval AND claimed_at IS NULL AND consumed_at IS NULL
          AND status <> 'pending' RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM c)
$$;

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
CREATE FUNCTION hr.works_on(p hr.pipelines) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT p.owner = session_user OR p.workers ? session_user::text
$$;

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

-- Whether `p_new` moves only what a label worker (this login, named by the execution's
-- starter) may move of `cur`: the same steps, each as it was but for labelled tasks and
-- gates it claims — ready → running as itself, or its own running step's run (pid, beat,
-- the report of how it ended). Everything else (other steps, results, the flow) is the
-- starter's runner's to move.
CREATE FUNCTION hr.label_work_only(cur hr.pipelines, p_new jsonb) RETURNS boolean
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

-- Writes an execution if it is still at `version`, as v2's. A label worker its owner named
-- moves only its labelled steps' claims and reports (hr.label_work_only), never the rest of
-- the row: the starter's runner applies what it reports.
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

-- Whether run `r` (of execution `r.execution_id`) is one this login sees as a worker of
-- that execution: the execution's owner and its named label workers see each other's runs
-- of it.
CREATE FUNCTION hr.sees_run(r hr.tool_runs) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT r.runner_login = session_user OR hr.reads_all()
        OR EXISTS (SELECT 1 FROM hr.pipelines p
                   WHERE p.execution_id = r.execution_id AND hr.works_on(p)
                     AND (r.runner_login = p.owner OR p.workers ? r.runner_login)
                     -- a step's own run of this execution, not any run its id was given to
                     AND left(r.metadata->>'pipeline', length(p.execution_id) + 1)
                         = p.execution_id || '/')
$$;

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

-- How many OS users (the uids runs of a login say they ran as) each runner login has on
-- each host: more than one means two users share a login, and each can have a worker run
-- the other's commands as itself. Every run the store keeps counts (a run's own times are
-- its runner's word). For `monitor db grant`, `monitor doctor` and the worker.
CREATE FUNCTION hr.shared_logins() RETURNS TABLE (login text, host text, uids bigint[])
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

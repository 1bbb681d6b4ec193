-- The operator (`store/postgres/operator.rs`): decisions, cancels, remembered decisions and
-- clean-up, recorded with the login.
--
-- The one live definition of each function here; `db init` applies this file after the
-- migrations (store/postgres/mod.rs, FUNCTIONS).

CREATE OR REPLACE FUNCTION hr.is_operator() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(session_user, 'headless_operator', 'MEMBER')
        AND NOT pg_has_role(session_user, 'headless_runner', 'MEMBER')
$$;

-- Refuses a login that runs tools (a runner's, however it also got the operator role):
-- deciding is never theirs.
CREATE OR REPLACE FUNCTION hr.check_not_runner() RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF pg_has_role(session_user, 'headless_runner', 'MEMBER') THEN
        RAISE EXCEPTION '%: a runner login does not decide, cancel or clean up', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

-- Stores a remembered decision (the newest for a prompt in the same scope replaces older
-- ones); `created_by` is the login.
CREATE OR REPLACE FUNCTION hr.remember(p_policy_id text, p_tool text, p_prompt_fingerprint text,
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

CREATE OR REPLACE FUNCTION hr.forget(p_policy_id text) RETURNS jsonb
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

-- Refuses a decision on a pipeline's human step that names its deciders by a login not
-- among them, and (`p_also`: the token a server decides for) by a token not among them.
-- A channel is the client's word, so it never counts here.
CREATE OR REPLACE FUNCTION hr.check_decider(a hr.approvals, p_also text) RETURNS void
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

-- Decides a pending approval (first writer wins), and only on the version the
-- decider was shown (`p_version`: its screen digest; NULL: as its id names it). A
-- superseded approval is never decided: `conflict`, with `superseded_by`. Returns
-- {"outcome": "decided"|"conflict"|"changed"|"expired"|"missing", "approval": …}.
CREATE OR REPLACE FUNCTION hr.decide(p_approval text, p_status text, p_value text, p_comment text,
    p_channel text, p_version text, p_also text) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
DECLARE
    a hr.approvals;
    reviewed boolean;
    needed text;
    revs jsonb;
    by_ text := session_user;
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
    -- Required reviewers and wait timers (`crate::reviews::judge`, the same rule): each
    -- reviewer is a login, never the run's own, of the named role when there is one.
    revs := a.reviews;
    reviewed := a.reviews_required > 1 OR a.reviewer_group IS NOT NULL;
    needed := CASE WHEN a.reviews_required > 1
        THEN a.reviews_required || ' approvals from different people' ELSE 'one approval' END
        || coalesce(format(' from group `%s`', a.reviewer_group), '');
    IF reviewed THEN
        IF p_also IS NOT NULL THEN
            RETURN jsonb_build_object('outcome', 'refused', 'why', format(
                '%s needs %s: on PostgreSQL each reviewer decides with their own login (monitor decide), not through a server''s token',
                p_approval, needed));
        END IF;
        IF by_ = (SELECT runner_login FROM hr.tool_runs WHERE tool_run_id = a.tool_run_id) THEN
            RETURN jsonb_build_object('outcome', 'refused', 'why', format(
                '%s needs %s, and %s started its run: someone else must approve it',
                p_approval, needed, by_));
        END IF;
        IF a.reviewer_group IS NOT NULL AND NOT (
            EXISTS (SELECT 1 FROM pg_roles WHERE rolname = a.reviewer_group)
            AND pg_has_role(session_user, a.reviewer_group, 'MEMBER')) THEN
            RETURN jsonb_build_object('outcome', 'refused', 'why', format(
                '%s needs %s, and %s is not a member of `%s`',
                p_approval, needed, by_, a.reviewer_group));
        END IF;
    END IF;
    IF p_status = 'approved' AND (reviewed OR a.wait_seconds > 0 OR jsonb_array_length(revs) > 0)
    THEN
        IF jsonb_array_length(revs) > 0 AND (revs->0->>'value') IS DISTINCT FROM p_value THEN
            RETURN jsonb_build_object('outcome', 'refused', 'why', format(
                '%s approved `%s`: every approval of %s must choose the same answer (reject it to start over)',
                revs->0->>'by', revs->0->>'value', p_approval));
        END IF;
        IF a.usable_at IS NOT NULL
            OR EXISTS (SELECT 1 FROM jsonb_array_elements(revs) r WHERE r->>'by' = by_) THEN
            RETURN jsonb_build_object('outcome', 'reviewed', 'approval', to_jsonb(a));
        END IF;
        revs := revs || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object('by', by_,
            'value', p_value, 'at', hr.now(), 'channel', coalesce(p_channel, 'cli'),
            'comment', p_comment)));
        IF jsonb_array_length(revs) < greatest(a.reviews_required, 1) OR a.wait_seconds > 0 THEN
            UPDATE hr.approvals SET reviews = revs,
                usable_at = CASE WHEN jsonb_array_length(revs) >= greatest(a.reviews_required, 1)
                    THEN to_char(clock_timestamp() AT TIME ZONE 'UTC'
                        + make_interval(secs => a.wait_seconds), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                    END
            WHERE approval_id = p_approval RETURNING * INTO a;
            PERFORM hr.audit('approval_reviewed', a.tool_run_id, a.approval_id, by_,
                jsonb_build_object('reviews', (SELECT jsonb_agg(r->'by') FROM jsonb_array_elements(revs) r),
                    'required', a.reviews_required, 'usable_at', a.usable_at));
            PERFORM hr.ring(p_approval);
            RETURN jsonb_build_object('outcome', 'reviewed', 'approval', to_jsonb(a));
        END IF;
        by_ := (SELECT string_agg(r->>'by', ', ' ORDER BY n)
                FROM jsonb_array_elements(revs) WITH ORDINALITY x(r, n));
    END IF;
    UPDATE hr.approvals SET status = p_status, chosen_value = p_value, decided_at = hr.now(),
        decided_by = by_, decision_channel = coalesce(p_channel, 'cli'),
        comment = p_comment, reviews = revs, usable_at = NULL
    WHERE approval_id = p_approval RETURNING * INTO a;
    PERFORM hr.audit_approval(a, session_user);
    PERFORM hr.ring(p_approval);
    RETURN jsonb_build_object('outcome', 'decided', 'approval', to_jsonb(a));
END $$;

-- The decision of schema v2's signature, for a monitor of an earlier build: by id, on the approval as
-- it is (one never changes once asked), with every other check of the one above.
CREATE OR REPLACE FUNCTION hr.decide(p_approval text, p_status text, p_value text, p_comment text,
    p_channel text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = hr, pg_temp AS $$
    SELECT hr.decide(p_approval, p_status, p_value, p_comment, p_channel, NULL, NULL)
$$;

-- Cancels a live run; the rejections it gives its pending approvals are spent
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
        -- A decision its wait timer holds is not used: the run it was for is cancelled.
        UPDATE hr.approvals SET usable_at = NULL WHERE approval_id = id_;
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

-- Deletes finished runs, but not one whose decisions a live chain still keeps.
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

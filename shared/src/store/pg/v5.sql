-- Schema v5 of the PostgreSQL store: a run withdraws one of its pending approvals whose
-- question nothing waits for any more (issue 27: the prompt left the tool's screen, or the
-- agent's hook that asked it is gone), as `approvals::withdraw_pending` does on the
-- embedded store. It closes as an abandoned one does (the closing channel
-- `system:run-ended`: it answers nothing, ever), decided by `system:withdrawn`; a decision
-- made first stands.

CREATE FUNCTION hr.approval_withdraw(p_run text, p_cap text, p_approval text, p_why text)
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

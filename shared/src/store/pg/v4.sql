-- Schema v4 of the PostgreSQL store: a decision stays with its run (issue 26), as the
-- embedded store does it (`shared/src/store/sqlite/chain.rs`, which says the rule in full):
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

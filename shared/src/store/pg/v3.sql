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

-- Signatures this version replaced or removed (the live definitions are in
-- functions/, applied after the migrations).
DROP FUNCTION IF EXISTS hr.decide(text, text, text, text, text);
DROP FUNCTION IF EXISTS hr.check_decider(hr.approvals);

-- Schema v6 of the PostgreSQL store: required reviewers and wait timers (`crate::reviews`):
-- how many distinct logins must approve, of which role, how long an approved decision is
-- held, the approvals given so far, and when a held decision will be used.
ALTER TABLE hr.approvals ADD COLUMN reviews_required integer NOT NULL DEFAULT 1;
ALTER TABLE hr.approvals ADD COLUMN reviewer_group text;
ALTER TABLE hr.approvals ADD COLUMN wait_seconds bigint NOT NULL DEFAULT 0;
ALTER TABLE hr.approvals ADD COLUMN reviews jsonb NOT NULL DEFAULT '[]';
ALTER TABLE hr.approvals ADD COLUMN usable_at text;
CREATE INDEX approvals_held ON hr.approvals(usable_at) WHERE usable_at IS NOT NULL

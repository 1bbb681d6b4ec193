-- Schema v8 of the PostgreSQL store: the audit chain is one chain per login. Each row
-- names its chain (`chain`: the login that appended it, `session_user`); a row's
-- `prev_hash` is the hash of the row before it in its own chain, and hr.audit locks only
-- its login's chain. One lock for every audited write serialised every runner behind one
-- commit at a time (about 90 run starts a second through PgBouncer on a 2-core server:
-- `scripts/bench scale`); logins now append side by side. The rows written before v8 keep
-- chain '' and stay one chain, verified as before.
ALTER TABLE hr.events ADD COLUMN chain text NOT NULL DEFAULT '';
ALTER TABLE hr.events DROP CONSTRAINT events_one_successor;
-- One successor per row within a chain: two writers of a chain that read the same head
-- cannot both append.
ALTER TABLE hr.events ADD CONSTRAINT events_one_successor UNIQUE (chain, prev_hash);
-- A chain's head: its newest row.
CREATE INDEX events_chain_head ON hr.events(chain, id);
-- The change mark's liveness part: moved by every write of a run's output, heartbeats or
-- pid (a trigger), instead of a hash over every live run at each look (hr.change_mark read
-- all of them: at 10 000 live runs, waiters' looks took most of the server's CPU).
CREATE SEQUENCE hr.change_seq;

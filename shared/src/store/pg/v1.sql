-- Schema v1 of the PostgreSQL store: the tables (as SQLite's, with json as jsonb) and the
-- append-only audit chain. The functions that are the only way the roles write are in
-- functions/, applied after the migrations.
-- Applied by `monitor db init` inside one transaction under an advisory lock.

CREATE TABLE hr.tool_runs (
    tool_run_id             text PRIMARY KEY CHECK (tool_run_id ~ '^TR-[0-9A-HJKMNP-TV-Z]{26}$'),
    tool_name               text NOT NULL,
    execution_id            text,
    status                  text NOT NULL,
    reason                  text,
    exit_code               integer,
    started_at              text NOT NULL,
    completed_at            text,
    last_output_at          text,
    last_heartbeat_at       text,
    supervisor_heartbeat_at text,
    last_error_msg          text,
    pid                     bigint,
    shim_pid                bigint,
    shim_start_time         bigint,
    host                    text,
    argv_json               jsonb NOT NULL DEFAULT '[]',
    cwd                     text,
    resumed_from            text,
    metadata                jsonb,
    updated_at              text NOT NULL,
    -- Who started it (the database login) and what it may touch: only the store sees these.
    runner_login            text NOT NULL,
    request_fingerprint     text NOT NULL,
    capability_hash         text NOT NULL
);
CREATE INDEX tool_runs_status ON hr.tool_runs(status);
CREATE INDEX tool_runs_started ON hr.tool_runs(started_at);
CREATE INDEX tool_runs_open ON hr.tool_runs(status) WHERE completed_at IS NULL;

CREATE TABLE hr.approvals (
    approval_id         text PRIMARY KEY,
    tool_run_id         text NOT NULL,
    tool_name           text NOT NULL,
    execution_id        text,
    question            text NOT NULL,
    context             text,
    options_json        jsonb NOT NULL DEFAULT '[]',
    default_value       text,
    allows_text         boolean NOT NULL DEFAULT false,
    status              text NOT NULL,
    chosen_value        text,
    created_at          text NOT NULL,
    decided_at          text,
    expires_at          text,
    decided_by          text,
    decision_channel    text,
    comment             text,
    request_fingerprint text,
    prompt_fingerprint  text,
    consumed_at         text,
    consumed_by         text,
    prompt_kind         text,
    prompt_line         text,
    rule_name           text,
    expire_action       text NOT NULL DEFAULT 'reject',
    claimed_by          text,
    claimed_at          text,
    resumed_run_id      text,
    screen_digest       text,
    tool_digest         text
);
CREATE INDEX approvals_status ON hr.approvals(status);
CREATE INDEX approvals_run ON hr.approvals(tool_run_id);
CREATE INDEX approvals_resume ON hr.approvals(request_fingerprint, prompt_fingerprint);

-- The audit chain: each row's hash covers the previous hash and every field (the same
-- encoding as the SQLite store's, so one verifier checks both). `db_user` is the
-- authenticated login that caused the row, whatever `actor` the client named.
CREATE TABLE hr.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          text NOT NULL,
    event       text NOT NULL,
    tool_run_id text,
    approval_id text,
    actor       text NOT NULL,
    db_user     text NOT NULL,
    data        text NOT NULL,
    prev_hash   text NOT NULL,
    hash        text NOT NULL,
    -- One successor per row: two writers that read the same head cannot both append (a
    -- fork of the chain), whatever the isolation level.
    CONSTRAINT events_one_successor UNIQUE (prev_hash)
);
CREATE INDEX events_run ON hr.events(tool_run_id);
CREATE INDEX events_approval ON hr.events(approval_id);

-- Remembered decisions (`monitor decide --remember`): later prompts of the tool with this
-- fingerprint, within the scope, are answered with the value.
CREATE TABLE hr.policies (
    policy_id          text PRIMARY KEY,
    name               text NOT NULL,
    tool_name          text,
    prompt_fingerprint text,
    value              text NOT NULL,
    source             text NOT NULL,
    source_approval_id text,
    created_at         text NOT NULL,
    created_by         text NOT NULL,
    enabled            boolean NOT NULL DEFAULT true,
    argv_json          jsonb,
    cwd                text
);
CREATE INDEX policies_lookup ON hr.policies(tool_name, prompt_fingerprint);

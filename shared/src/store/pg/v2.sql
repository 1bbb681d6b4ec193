-- Schema v2 of the PostgreSQL store: pipelines (`monitor pipeline`). One row per execution,
-- as the embedded store keeps it (definition, vars and steps as jsonb), moved only by a
-- compare-and-swap on `version`, and written only through the functions below:
--
-- * a runner login starts an execution (it becomes its `owner`) and moves it: its steps
--   are its runs;
-- * the definition, the variables and the directory never change after the start;
-- * a human step becomes `completed` only with an approval of its own question that an
--   operator's login approved (a supervised tool holding the runner's login cannot decide
--   its pipeline's human step by rewriting the row);
-- * an operator's login only cancels;
-- * a runner login reads its own executions; operators and viewers read all of them.

CREATE TABLE hr.pipelines (
    execution_id text PRIMARY KEY CHECK (execution_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    name         text NOT NULL,
    file         text,
    dir          text NOT NULL,
    definition   jsonb NOT NULL,
    vars         jsonb NOT NULL,
    steps        jsonb NOT NULL CHECK (jsonb_typeof(steps) = 'array'),
    status       text NOT NULL
        CHECK (status IN ('running', 'waiting_approval', 'completed', 'failed', 'cancelled')),
    reason       text,
    runner       text,
    heartbeat_at text,
    created_at   text NOT NULL,
    updated_at   text NOT NULL,
    version      bigint NOT NULL,
    -- The runner login that started it: only it moves the steps.
    owner        text NOT NULL
);
CREATE INDEX pipelines_created ON hr.pipelines(created_at);
CREATE INDEX pipelines_open ON hr.pipelines(created_at)
    WHERE status IN ('running', 'waiting_approval');

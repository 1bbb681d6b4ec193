-- Schema v7 of the PostgreSQL store: no table changes. A pipeline step can be `cancelled`
-- (a `wait_for: first` merge's losers, and what an execution's cancel stops), and
-- hr.settle_steps cancels a running or waiting step instead of failing it, a decision keeps a
-- cancelled step as it is, and a cancelled step's question is withdrawn: body changes, so
-- a new version, which a client of the older build refuses.
SELECT 1;

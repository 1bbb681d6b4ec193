//! The store contract suite: the same cases (`contract/`) against every store
//! implementation. Today the embedded SQLite store; a PostgreSQL store and an HTTP runner
//! store plug in with a factory of their own (see `contract::StoreUnderTest`) and one
//! `contract_tests!` line, and must pass unchanged.
//!
//! ```sh
//! cargo test -p headless-run-shared --test store_contract
//! ```

#[macro_use]
mod contract;

use contract::StoreUnderTest;
use hr_shared::paths::StatePaths;
use hr_shared::store::sqlite::SqliteStore;
use hr_shared::store::{self, AdminStore, RunnerStore};

/// The embedded SQLite store: a state dir in a temp dir, sessions made the way the shim
/// (`store::runner`) and `monitor` (`store::operator`) make theirs.
struct Sqlite {
    dir: tempfile::TempDir,
    paths: StatePaths,
}

impl StoreUnderTest for Sqlite {
    fn fresh() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = StatePaths::at(dir.path().join("state"));
        // The first shim creates the database; `monitor` needs it to exist.
        store::runner(&paths).connect().expect("create the store");
        Sqlite { dir, paths }
    }

    fn runner(&self) -> Box<dyn RunnerStore> {
        store::runner(&self.paths)
    }

    fn pipelines(&self) -> Option<Box<dyn hr_shared::store::pipelines::PipelineStore>> {
        Some(hr_shared::store::pipelines::for_store(&self.paths).expect("pipelines"))
    }

    fn operator(&self) -> Box<dyn AdminStore> {
        own_store(&self.paths)
    }

    /// A session writing for another identity (as a server writes for a runner token).
    fn stranger(&self) -> Box<dyn RunnerStore> {
        Box::new(SqliteStore::create(self.paths.clone()).on_behalf_of("mallory"))
    }

    fn absent_operator(&self) -> Box<dyn AdminStore> {
        own_store(&StatePaths::at(self.dir.path().join("never-created")))
    }

    fn runner_identity(&self) -> String {
        hr_shared::proc::user_name(hr_shared::proc::effective_uid())
    }

    fn stamps_uid(&self) -> bool {
        true
    }

    fn replace_with_empty(&self) -> bool {
        // Deleted under the open sessions (they keep the old file open), then created anew.
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.paths.db.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
        store::runner(&self.paths)
            .connect()
            .expect("create the new store");
        true
    }
}

contract_tests!(sqlite, Sqlite);
pipeline_contract_tests!(sqlite_pipelines, Sqlite);

/// The PostgreSQL store: a database of its own on the test process's throw-away cluster
/// (`hr_shared::testing::pg`), set up by `db init`, with a runner login for the shims'
/// sessions and an operator login for the monitor's — the server's roles, as deployed.
struct Postgres {
    /// The database, in the shared test cluster.
    db: String,
    operator_login: String,
    runner_login: String,
    runner: StatePaths,
    operator: StatePaths,
    /// Another runner login.
    stranger: StatePaths,
    _dir: tempfile::TempDir,
}

fn pg_cluster() -> &'static hr_shared::testing::pg::Cluster {
    static CLUSTER: std::sync::OnceLock<hr_shared::testing::pg::Cluster> =
        std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| hr_shared::testing::pg::Cluster::start("contract", 100))
}

impl StoreUnderTest for Postgres {
    fn fresh() -> Self {
        use hr_shared::store::postgres;
        let cluster = pg_cluster();
        let db = cluster.database();
        postgres::init(&cluster.admin_url(&db)).expect("db init");
        let mut paths = Vec::new();
        let operator_login = format!("operator_{db}");
        for (name, role) in [
            ("runner", "runner"),
            ("operator", "operator"),
            ("stranger", "runner"),
        ] {
            let login = format!("{name}_{db}");
            cluster.admin_sql(&db, &format!("CREATE ROLE {login} LOGIN PASSWORD 'pw'"));
            postgres::grant(&cluster.admin_url(&db), &login, role).expect("db grant");
            paths.push(cluster.url(&login, "pw", &db));
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let at = |url: &str| StatePaths {
            store_url: Some(url.to_owned()),
            ..StatePaths::at(dir.path().join("state"))
        };
        Postgres {
            runner_login: format!("runner_{db}"),
            db,
            operator_login,
            runner: at(&paths[0]),
            operator: at(&paths[1]),
            stranger: at(&paths[2]),
            _dir: dir,
        }
    }

    fn runner(&self) -> Box<dyn RunnerStore> {
        store::runner(&self.runner)
    }

    fn pipelines(&self) -> Option<Box<dyn hr_shared::store::pipelines::PipelineStore>> {
        Some(hr_shared::store::pipelines::for_store(&self.runner).expect("pipelines"))
    }

    fn operator(&self) -> Box<dyn AdminStore> {
        own_store(&self.operator)
    }

    /// `monitor worker` with the runner's own login.
    fn worker(&self) -> Box<dyn AdminStore> {
        own_store(&self.runner)
    }

    fn stranger(&self) -> Box<dyn RunnerStore> {
        store::runner(&self.stranger)
    }

    fn absent_operator(&self) -> Box<dyn AdminStore> {
        let port = hr_shared::testing::pg::free_port();
        own_store(&StatePaths {
            store_url: Some(format!("postgres://nobody:pw@127.0.0.1:{port}/none")),
            ..self.operator.clone()
        })
    }

    fn replace_with_empty(&self) -> bool {
        // A server's database is not a file to swap under a session.
        false
    }

    fn recorded_as(&self, _claimed: &str) -> String {
        self.operator_login.clone()
    }

    /// A login of its own, an operator, a member of each group's role.
    fn reviewer(&self, name: &str, groups: &[&str]) -> contract::Reviewer {
        use hr_shared::store::postgres;
        let cluster = pg_cluster();
        let login = format!("{name}_{}", self.db);
        cluster.admin_sql(
            &self.db,
            &format!("CREATE ROLE {login} LOGIN PASSWORD 'pw'"),
        );
        postgres::grant(&cluster.admin_url(&self.db), &login, "operator").expect("db grant");
        for g in groups {
            let role = self.group(g);
            cluster.admin_sql(
                &self.db,
                &format!(
                    "DO $$ BEGIN CREATE ROLE {role} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$; GRANT {role} TO {login}"
                ),
            );
        }
        contract::Reviewer {
            op: own_store(&StatePaths {
                store_url: Some(cluster.url(&login, "pw", &self.db)),
                ..self.operator.clone()
            }),
            by: name.to_owned(),
            groups: Vec::new(),
            recorded: login,
        }
    }

    fn group(&self, name: &str) -> String {
        format!("{name}_{}", self.db)
    }

    fn runner_identity(&self) -> String {
        self.runner_login.clone()
    }

    fn keeps_rows_for_later(&self) -> bool {
        false
    }

    fn honours_expiry_defaults(&self) -> bool {
        false
    }
}

contract_tests!(postgres, Postgres);
pipeline_contract_tests!(postgres_pipelines, Postgres);

/// The seam's error keeps PostgreSQL's SQLSTATE: another login's run started again under
/// the same id is a unique violation (23505), told by its code, not its text.
#[test]
fn a_database_servers_error_keeps_its_sqlstate() {
    contract::run_case::<Postgres>(|s| {
        use hr_shared::status::RunStatus;
        use hr_shared::store::RunWrite;
        let row = contract::Cmd::new("make", &["all"]).row(RunStatus::Running);
        let id = row.tool_run_id.clone();
        let start = || [RunWrite::Start(Box::new(row.clone()))];
        s.runner().record(&id, &start(), "shim", false).unwrap();
        let e = s
            .stranger()
            .record(&id, &start(), "shim", false)
            .expect_err("another login's run id");
        assert_eq!(e.sqlstate(), Some("23505"), "{e}");
        assert!(
            e.to_string().contains("exists already") && e.to_string().contains("SQLSTATE 23505"),
            "{e}"
        );
    });
}

/// The audit chain is one per login (schema v8): a runner login appends while another
/// login's audited transaction is still open (before v8 they shared one lock, so it waited
/// for that commit), each login's chain verifies alone, and a row changed in one chain is
/// found.
#[test]
fn each_login_appends_to_its_own_audit_chain_without_waiting_for_another() {
    use hr_shared::status::RunStatus;
    use hr_shared::store::RunWrite;
    // Not `run_case`: the case ends with a forged row, which its closing check would refuse.
    let s = &Postgres::fresh();
    {
        let cluster = pg_cluster();
        let stranger = s.stranger.store_url.clone().expect("a server store");
        let mut held = ::postgres::Client::connect(&stranger, ::postgres::NoTls).expect("connect");
        let mut tx = held.transaction().expect("begin");
        let first = contract::Cmd::new("make", &["all"]).row(RunStatus::Running);
        let doc = serde_json::to_string(&first).unwrap();
        let cap = "c".repeat(40);
        tx.query_one(
            "SELECT hr.run_start($1::text::jsonb, 'fp', false, $2)",
            &[&doc, &cap],
        )
        .expect("the stranger's audited start");
        // Its chain's lock is held until it commits; the runner's start does not wait for it.
        let row = contract::Cmd::new("make", &["test"]).row(RunStatus::Running);
        let id = row.tool_run_id.clone();
        let mut runner = s.runner();
        let (done_tx, done) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let out = runner.record(&id, &[RunWrite::Start(Box::new(row))], "shim", false);
            let _ = done_tx.send(out.map(|_| ()).map_err(|e| e.to_string()));
        });
        let landed = done.recv_timeout(std::time::Duration::from_secs(60));
        tx.commit().expect("commit");
        writer.join().unwrap();
        assert_eq!(
            landed.expect("the runner's start waited for another login's open transaction"),
            Ok(())
        );
        let chains = |sql: &str| {
            let mut admin =
                ::postgres::Client::connect(&cluster.admin_url(&s.db), ::postgres::NoTls)
                    .expect("admin");
            admin.batch_execute(sql).expect(sql);
            admin
                .query_one(
                    "SELECT string_agg(DISTINCT chain, ',' ORDER BY chain) FROM hr.events",
                    &[],
                )
                .expect("chains")
                .get::<_, Option<String>>(0)
                .unwrap_or_default()
        };
        let runner_login = s.runner_login.clone();
        let stranger_login = format!("stranger_{}", s.db);
        let mut want = [runner_login.clone(), stranger_login.clone()];
        want.sort();
        assert_eq!(chains("SELECT 1"), want.join(","));
        contract::audit_intact(s);
        // Each chain starts at the genesis hash and links only its own rows.
        let mut op = s.operator();
        let report = op.verify_audit().expect("verify");
        assert_eq!(report.rows, 2, "{report:?}");
        // Each chain's head, for doctor to find again.
        assert_eq!(report.heads.len(), 2, "{report:?}");
        // A row rewritten in one chain (the append-only trigger off, as only the table's
        // owner could) is found, and only that row.
        chains(&format!(
            "ALTER TABLE hr.events DISABLE TRIGGER events_append_only;
             UPDATE hr.events SET data = '{{}}' WHERE chain = '{stranger_login}';
             ALTER TABLE hr.events ENABLE TRIGGER events_append_only"
        ));
        let report = op.verify_audit().expect("verify");
        let forged: i64 = {
            let mut admin =
                ::postgres::Client::connect(&cluster.admin_url(&s.db), ::postgres::NoTls)
                    .expect("admin");
            admin
                .query_one(
                    "SELECT id FROM hr.events WHERE chain = $1",
                    &[&stranger_login],
                )
                .expect("the forged row")
                .get(0)
        };
        assert_eq!(
            report.problems,
            vec![(forged, "its hash does not match its fields".to_owned())]
        );
    }
}

/// hr.audit and hr.change_mark as schema v1 to v7 had them: one chain, one lock; a mark
/// over every live run (v8's sequence and trigger taken away).
const FUNCTIONS_BEFORE_V8: &str = r#"
CREATE OR REPLACE FUNCTION hr.audit(p_event text, p_run text, p_approval text, p_actor text, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    prev text;
    at text := hr.now();
    body text := p_data::text;
    h text;
    new_id bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('headless-run audit chain'));
    SELECT hash INTO prev FROM hr.events ORDER BY id DESC LIMIT 1;
    prev := coalesce(prev, repeat('0', 64));
    h := encode(sha256(hr.chain_field(prev) || hr.chain_field(at) || hr.chain_field(p_event)
        || hr.chain_field(p_run) || hr.chain_field(p_approval) || hr.chain_field(p_actor)
        || hr.chain_field(body)), 'hex');
    INSERT INTO hr.events (at, event, tool_run_id, approval_id, actor, db_user, data, prev_hash, hash)
    VALUES (at, p_event, p_run, p_approval, p_actor, session_user, body, prev, h)
    RETURNING id INTO new_id;
    RETURN new_id;
END $$;
DROP TRIGGER tool_runs_liveness ON hr.tool_runs;
DROP FUNCTION hr.liveness_written();
CREATE OR REPLACE FUNCTION hr.change_mark() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = hr, pg_temp AS $$
    SELECT (SELECT coalesce(max(id), 0) FROM hr.events) * 65536
        + ((SELECT coalesce(hashtext(string_agg(tool_run_id || coalesce(last_output_at, '')
                || coalesce(last_heartbeat_at, '') || coalesce(supervisor_heartbeat_at, '')
                || coalesce(pid::text, ''), ',' ORDER BY tool_run_id)), 0)
           FROM hr.tool_runs WHERE completed_at IS NULL)::bigint & 65535)
$$;
DROP SEQUENCE hr.change_seq;
"#;

/// An upgrade, not only a fresh schema: a store at schema v4 (this build's v5 to v8 taken
/// back off it: v8's chain per login before any row is written, then v5's one function and
/// v6's columns once its rows are) holding a parked run's decision and a live run's pending
/// question is brought up to date by `db init`, which says so; the rows read back the same, the decision still answers the parked run's
/// resume, and v5's withdrawal works on the old question.
#[test]
fn db_init_upgrades_a_v4_store_and_keeps_what_it_holds() {
    use contract::*;
    use hr_shared::status::ApprovalStatus;
    use hr_shared::store::{PromptResolution, RunWrite, postgres};
    contract::run_case::<Postgres>(|s| {
        let cluster = pg_cluster();
        // v8 taken back off first, before any row is written: one audit chain for all.
        cluster.admin_sql(
            &s.db,
            &format!(
                "ALTER TABLE hr.events DROP CONSTRAINT events_one_successor;
                 DROP INDEX hr.events_chain_head;
                 ALTER TABLE hr.events DROP COLUMN chain;
                 ALTER TABLE hr.events ADD CONSTRAINT events_one_successor UNIQUE (prev_hash);
                 {}",
                FUNCTIONS_BEFORE_V8
            ),
        );
        let cmd = Cmd::new("rm", &["-i", "a.txt"]);
        let req = yes_no("rm");
        let mut op = s.operator();
        let mut parked = Shim::start(s, &cmd);
        let decided = parked.ask_pending(&req);
        parked.park();
        decide(op.as_mut(), &decided.approval_id, "y", "alice");
        let mut live = Shim::start(s, &Cmd::new("make", &["deploy"]));
        let pending = live.ask_pending(&yes_no("make"));
        cluster.admin_sql(
            &s.db,
            "DROP FUNCTION hr.approval_withdraw(text, text, text, text);
             DROP INDEX hr.approvals_held;
             ALTER TABLE hr.approvals DROP COLUMN reviews_required, DROP COLUMN reviewer_group,
                 DROP COLUMN wait_seconds, DROP COLUMN reviews, DROP COLUMN usable_at;
             UPDATE hr.schema_version SET version = 4;",
        );
        let before = (
            run_now(op.as_mut(), parked.id()),
            approval_now(op.as_mut(), &decided.approval_id),
            approval_now(op.as_mut(), &pending.approval_id),
        );

        let report = postgres::init(&cluster.admin_url(&s.db)).expect("db init upgrades");
        assert_eq!(
            (report.from_version, report.to_version),
            (4, postgres::SCHEMA_VERSION)
        );
        let mut op = s.operator();
        let after = (
            run_now(op.as_mut(), parked.id()),
            approval_now(op.as_mut(), &decided.approval_id),
            approval_now(op.as_mut(), &pending.approval_id),
        );
        assert_eq!(after, before, "the rows read back the same");
        let mut resume = Shim::start(s, &cmd);
        let PromptResolution::Answer { approval, value } = resume.ask(&req).value else {
            panic!("the decision no longer answers its resume")
        };
        assert_eq!(
            (approval.approval_id, value),
            (decided.approval_id, "y".into())
        );
        let gone = live.write(vec![RunWrite::Withdraw {
            approval_id: pending.approval_id.clone(),
            why: "after the upgrade".into(),
        }]);
        assert_eq!(gone.effects.events.len(), 1);
        assert_eq!(
            approval_now(op.as_mut(), &pending.approval_id).status,
            ApprovalStatus::Expired
        );
        audit_intact(s);
    });
}

/// An upgrade from the first release: a store that schema v1's `db init` made — the
/// released `pg/v1.sql` as it shipped (`tests/fixtures/old_state/pg/v1.sql`) applied as
/// that `db init` applied it (schema `hr`, its version table, the migration, version 1,
/// then that build's grants) — holding rows its runner and operator logins wrote through
/// v1's functions as that build's client called them: a run parked (exit 90) on an
/// approval an operator decided, and a live run asking a pending one. `db init` brings it
/// to this build's version and says so; the runs and approvals read back through the store
/// as v1 showed them (but for the owner, which v3 shows as the login that wrote the run);
/// the decision answers the parked run's resume; the pending approval takes a decision;
/// and the audit chain, v1's rows and this build's, verifies.
#[test]
fn db_init_upgrades_a_v1_store_and_keeps_what_it_holds() {
    use contract::*;
    use hr_shared::approvals::{Approval, PromptKind};
    use hr_shared::runs::ToolRun;
    use hr_shared::status::{ApprovalStatus, RunStatus};
    use hr_shared::store::{PromptResolution, postgres};
    use hr_shared::{fingerprint, id, time};
    /// `GRANTS` of the v1 build, which its `db init` applied after the migrations.
    const V1_GRANTS: &str = include_str!("fixtures/old_state/pg/v1-grants.sql");
    /// What the v1 client sent of a row: serde's JSON of its struct, which had none of the
    /// fields named here yet.
    fn as_v1(row: impl serde::Serialize, later: &[&str]) -> String {
        let mut doc = serde_json::to_value(row).unwrap();
        for key in later {
            doc.as_object_mut().unwrap().remove(*key);
        }
        doc.to_string()
    }
    /// A runner of the v1 build: its session, its run and the capability the run was
    /// started with (`hr.run_start`), which each later call shows.
    struct V1Shim {
        client: ::postgres::Client,
        run: ToolRun,
        cap: String,
    }
    impl V1Shim {
        fn start(url: &str, cmd: &Cmd) -> V1Shim {
            let mut client = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
            let run = cmd.row(RunStatus::Running);
            let cap = format!("v1-capability-{}", run.tool_run_id);
            let row = client
                .query_one(
                    "SELECT hr.run_start($1::text::jsonb, $2, false, $3)",
                    &[&as_v1(&run, &["owner"]), &cmd.fingerprint(), &cap],
                )
                .unwrap();
            assert_eq!(row.get::<_, Option<String>>(0).as_ref(), Some(&cap));
            V1Shim { client, run, cap }
        }

        /// `hr.run_status`, as the v1 client's `status` called it.
        fn status(&mut self, change: &hr_shared::runs::StatusChange, guard: &str) {
            self.client
                .query_one(
                    "SELECT hr.run_status($1, $2, $3, $4, $5, $6, $7, $8, $9)::text",
                    &[
                        &self.run.tool_run_id,
                        &self.cap,
                        &change.status.as_str(),
                        &change.reason,
                        &change.exit_code,
                        &change.finished,
                        &change.error,
                        &change.at,
                        &guard,
                    ],
                )
                .unwrap();
        }

        /// Step 4 of a prompt: a new question (`hr.approval_ask`), then the run waits.
        fn ask_pending(&mut self, cmd: &Cmd, req: &hr_shared::store::PromptRequest) -> String {
            let p = &req.prompt;
            let now = std::time::SystemTime::now();
            let fresh = Approval {
                approval_id: id::new_approval_id(),
                tool_run_id: self.run.tool_run_id.clone(),
                tool_name: cmd.tool.clone(),
                execution_id: self.run.execution_id.clone(),
                question: p.question.clone(),
                context: Some(p.context.clone()),
                options_json: p
                    .options
                    .iter()
                    .map(|o| hr_shared::event::ApprovalOption {
                        keys: None,
                        ..o.clone()
                    })
                    .collect(),
                default_value: p.default.clone(),
                allows_text: p.allows_text,
                created_at: time::to_rfc3339(now),
                expires_at: req.ttl.map(|ttl| time::to_rfc3339(now + ttl)),
                request_fingerprint: Some(cmd.fingerprint()),
                prompt_fingerprint: Some(req.prompt_fingerprint.clone()),
                prompt_kind: Some(p.kind),
                prompt_line: Some(p.prompt_line.clone()),
                rule_name: Some(p.rule.clone()),
                screen_digest: Some(fingerprint::seen(p)),
                ..hr_shared::testing::approval("", PromptKind::Choice)
            };
            let later = ["superseded_by", "supersedes", "kept_for", "consumed_reason"];
            let doc: String = self
                .client
                .query_one(
                    "SELECT hr.approval_ask($1, $2, $3::text::jsonb, $4)::text",
                    &[
                        &self.run.tool_run_id,
                        &self.cap,
                        &as_v1(&fresh, &later),
                        &fresh.approval_id,
                    ],
                )
                .unwrap()
                .get(0);
            let asked: Approval = serde_json::from_str(&doc).unwrap();
            assert_eq!(asked.approval_id, fresh.approval_id);
            let waiting = hr_shared::runs::StatusChange::to(
                RunStatus::WaitingApproval,
                Some(format!("waiting for approval {}", asked.approval_id)),
            );
            self.status(&waiting, "not_final");
            asked.approval_id
        }

        /// Exit mode: what it used is given back, and the run parks (exit 90).
        fn park(&mut self) {
            self.client
                .query_one(
                    "SELECT hr.approval_release($1, $2, NULL, $3)",
                    &[
                        &self.run.tool_run_id,
                        &self.cap,
                        &"the run stopped at a later prompt",
                    ],
                )
                .unwrap();
            self.status(&parked(), "not_cancelled");
        }
    }

    let cluster = pg_cluster();
    let db = cluster.database();
    cluster.admin_sql(
        &db,
        &format!(
            "SELECT pg_advisory_xact_lock(hashtext('headless-run schema'));
             CREATE SCHEMA IF NOT EXISTS hr;
             CREATE TABLE IF NOT EXISTS hr.schema_version (version bigint NOT NULL);
             {}
             ;
             DELETE FROM hr.schema_version;
             INSERT INTO hr.schema_version VALUES (1);
             {V1_GRANTS}",
            include_str!("fixtures/old_state/pg/v1.sql")
        ),
    );
    // Its logins, as v1's `db grant` made them members of the roles.
    let login = |name: &str| format!("{name}_{db}");
    for (name, role) in [
        ("runner", "headless_runner"),
        ("operator", "headless_operator"),
        ("stranger", "headless_runner"),
    ] {
        cluster.admin_sql(
            &db,
            &format!(
                "CREATE ROLE {l} LOGIN PASSWORD 'pw'; GRANT {role} TO {l};",
                l = login(name)
            ),
        );
    }
    let runner_url = cluster.url(&login("runner"), "pw", &db);
    let operator_url = cluster.url(&login("operator"), "pw", &db);

    // What v1 wrote: a run parked on a decided approval, a live run asking.
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let req = yes_no("rm");
    let mut parked_run = V1Shim::start(&runner_url, &cmd);
    let decided = parked_run.ask_pending(&cmd, &req);
    parked_run.park();
    let mut operator = ::postgres::Client::connect(&operator_url, ::postgres::NoTls).unwrap();
    let outcome: String = operator
        .query_one(
            "SELECT hr.decide($1, $2, $3, $4, $5)::text",
            &[&decided, &"approved", &Some("y"), &None::<&str>, &"cli"],
        )
        .unwrap()
        .get(0);
    assert!(outcome.contains(r#""outcome": "decided""#), "{outcome}");
    let live_cmd = Cmd::new("make", &["deploy"]);
    let mut live = V1Shim::start(&runner_url, &live_cmd);
    let pending = live.ask_pending(&live_cmd, &yes_no("make"));

    // As v1 showed them to its clients (`hr.run_doc`, the approvals' rows).
    let mut admin = ::postgres::Client::connect(&cluster.admin_url(&db), ::postgres::NoTls)
        .expect("connect as admin");
    let mut v1_run = |id: &str| -> ToolRun {
        let doc: String = admin
            .query_one(
                "SELECT hr.run_doc(r)::text FROM hr.tool_runs r WHERE tool_run_id = $1",
                &[&id],
            )
            .unwrap()
            .get(0);
        serde_json::from_str(&doc).unwrap()
    };
    let runs_before = [
        v1_run(&parked_run.run.tool_run_id),
        v1_run(&live.run.tool_run_id),
    ];
    let mut v1_approval = |id: &str| -> Approval {
        let doc: String = admin
            .query_one(
                "SELECT to_jsonb(a)::text FROM hr.approvals a WHERE approval_id = $1",
                &[&id],
            )
            .unwrap()
            .get(0);
        serde_json::from_str(&doc).unwrap()
    };
    let approvals_before = [v1_approval(&decided), v1_approval(&pending)];
    assert_eq!(
        (
            runs_before[0].status,
            runs_before[0].exit_code,
            runs_before[1].status,
            runs_before[1].exit_code,
        ),
        (
            RunStatus::WaitingApproval,
            Some(90),
            RunStatus::WaitingApproval,
            None
        )
    );
    assert_eq!(
        (
            approvals_before[0].status,
            approvals_before[0].decided_by.clone(),
            approvals_before[1].status,
        ),
        (
            ApprovalStatus::Approved,
            Some(login("operator")),
            ApprovalStatus::Pending
        )
    );

    let report = postgres::init(&cluster.admin_url(&db)).expect("db init upgrades");
    assert_eq!(
        (report.from_version, report.to_version),
        (1, postgres::SCHEMA_VERSION)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let at = |url: String| StatePaths {
        store_url: Some(url),
        ..StatePaths::at(dir.path().join("state"))
    };
    let (runner, operator, stranger) = (
        at(runner_url.clone()),
        at(operator_url.clone()),
        at(cluster.url(&login("stranger"), "pw", &db)),
    );
    let s = Postgres {
        operator_login: login("operator"),
        runner_login: login("runner"),
        runner,
        operator,
        stranger,
        db: db.clone(),
        _dir: dir,
    };
    let mut op = s.operator();
    for before in &runs_before {
        // From v3 a run shows its owner: the login that wrote it.
        let want = ToolRun {
            owner: Some(login("runner")),
            ..before.clone()
        };
        assert_eq!(run_now(op.as_mut(), &before.tool_run_id), want);
    }
    for before in &approvals_before {
        assert_eq!(&approval_now(op.as_mut(), &before.approval_id), before);
    }

    // The decision answers the parked run's resume (the same command, started after it).
    let mut resume = Shim::start(&s, &cmd);
    let PromptResolution::Answer { approval, value } = resume.ask(&req).value else {
        panic!("the v1 decision no longer answers its resume")
    };
    assert_eq!((approval.approval_id, value), (decided.clone(), "y".into()));
    // The question v1 asked takes a decision.
    let now = decide(op.as_mut(), &pending, "n", "carol");
    assert_eq!(
        (now.status, now.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("n"))
    );
    audit_intact(&s);
}

/// The store itself (the contract's operator and worker sessions; never a server's API).
fn own_store(paths: &StatePaths) -> Box<dyn AdminStore> {
    match store::local(paths, "the store contract") {
        Ok(store) => store,
        Err(e) => panic!("{e}"),
    }
}

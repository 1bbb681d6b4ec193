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

/// An upgrade, not only a fresh schema: a store at schema v4 (this build's v5 taken back off
/// it: its one function) holding a parked run's decision and a live run's pending question
/// is brought to v5 by `db init`, which says so; the rows read back the same, the decision
/// still answers the parked run's resume, and v5's withdrawal works on the old question.
#[test]
fn db_init_upgrades_a_v4_store_and_keeps_what_it_holds() {
    use contract::*;
    use hr_shared::status::ApprovalStatus;
    use hr_shared::store::{PromptResolution, RunWrite, postgres};
    contract::run_case::<Postgres>(|s| {
        let cluster = pg_cluster();
        cluster.admin_sql(
            &s.db,
            "DROP FUNCTION hr.approval_withdraw(text, text, text, text);
             UPDATE hr.schema_version SET version = 4;",
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
        let before = (
            run_now(op.as_mut(), parked.id()),
            approval_now(op.as_mut(), &decided.approval_id),
            approval_now(op.as_mut(), &pending.approval_id),
        );

        let report = postgres::init(&cluster.admin_url(&s.db)).expect("db init upgrades");
        assert_eq!((report.from_version, report.to_version), (4, 5));
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

/// The store itself (the contract's operator and worker sessions; never a server's API).
fn own_store(paths: &StatePaths) -> Box<dyn AdminStore> {
    match store::local(paths, "the store contract") {
        Ok(store) => store,
        Err(e) => panic!("{e}"),
    }
}

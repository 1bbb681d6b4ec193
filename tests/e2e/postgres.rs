//! The PostgreSQL store on a real server: a throw-away cluster (Debian's `postgresql`,
//! `initdb` + `pg_ctl` as the unprivileged `nobody`, SCRAM logins over loopback TCP),
//! started once per test process and stopped when it exits. Each test gets its own
//! database and logins. What is checked: `monitor db init` and `db grant`; a shim with a
//! runner login asks, an operator login decides, the re-run is answered, and the decision
//! is recorded with the operator's login; and a supervised tool holding the runner's
//! credentials cannot approve, touch another run or rewrite history — the server refuses,
//! and its log shows the attempt.

use headless_run_e2e::*;
use hr_shared::testing::pg::{Cluster, free_port};
use std::sync::OnceLock;
use std::time::Duration;

/// The cluster of this test process, shared by its tests (each has its own database).
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        need("runuser", "util-linux");
        need("psql", "postgresql-client");
        Cluster::start("shared", 100)
    })
}

/// A fresh database of `cluster`.
fn database(cluster: &Cluster) -> Db {
    let name = cluster.database();
    Db {
        admin_url: cluster.admin_url(&name),
        host: cluster.host.clone(),
        port: cluster.port,
        name,
    }
}

/// One test's database on a cluster, with its own logins.
struct Db {
    name: String,
    host: String,
    port: u16,
    /// The superuser's URL (over the cluster's socket).
    admin_url: String,
}

/// A login of a test database: its name and password.
struct Login {
    user: String,
    password: String,
}

impl Db {
    fn url_as(&self, login: &Login) -> String {
        format!(
            "postgres://{}:{}@{}:{}/{}",
            login.user, login.password, self.host, self.port, self.name
        )
    }

    fn admin_url(&self) -> String {
        self.admin_url.clone()
    }

    /// A new login (cluster-wide, so named after this database), not yet in any role.
    fn login(&self, what: &str) -> Login {
        let login = Login {
            user: format!("{what}_{}", self.name),
            password: format!("pw-{what}"),
        };
        self.admin_sql(&format!(
            "CREATE ROLE {} LOGIN PASSWORD '{}'",
            login.user, login.password
        ));
        login
    }

    /// A login granted `role` with `monitor db grant`.
    fn member(&self, env: &TestEnv, what: &str, role: &str) -> Login {
        let login = self.login(what);
        env.monitor()
            .args(["db", "grant", &login.user, role, "--url", &self.admin_url()])
            .run()
            .expect_code(0);
        login
    }

    fn admin_sql(&self, sql: &str) -> String {
        let out = psql(&self.admin_url()).args(["-c", sql]).run();
        out.expect_code(0);
        out.out()
    }

    /// `sql` as `login`, the way a supervised tool holding those credentials would send it:
    /// the outcome (stdout, stderr) without failing the test.
    fn sql_as(&self, login: &Login, sql: &str) -> Outcome {
        psql(&self.url_as(login))
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .run()
    }

    /// One value, read as the superuser.
    fn value(&self, sql: &str) -> String {
        self.admin_sql(sql).trim().to_owned()
    }
}

fn psql(url: &str) -> Cmd {
    let mut c = Cmd::plain("psql");
    c.env_remove("PGPASSWORD")
        .args(["-X", "-q", "-t", "-A", url])
        .timeout(Duration::from_secs(30));
    c
}

/// A database on the shared cluster with the schema, an operator and a runner login.
fn initialised(env: &TestEnv) -> (Db, Login, Login) {
    initialised_on(cluster(), env)
}

fn initialised_on(cluster: &Cluster, env: &TestEnv) -> (Db, Login, Login) {
    let db = database(cluster);
    env.monitor()
        .args(["db", "init", &db.admin_url()])
        .run()
        .expect_code(0);
    let runner = db.member(env, "runner", "runner");
    let operator = db.member(env, "operator", "operator");
    (db, runner, operator)
}

#[test]
fn db_init_twice_and_from_two_hosts_at_once_and_grant_refuses_what_it_must() {
    let env = TestEnv::new();
    let db = database(cluster());
    // Two at once on a fresh database: both succeed, one migrates.
    let a = env.monitor().args(["db", "init", &db.admin_url()]).spawn();
    let b = env.monitor().args(["db", "init", &db.admin_url()]).spawn();
    let (a, b) = (a.wait(), b.wait());
    a.expect_code(0);
    b.expect_code(0);
    let said = format!("{}{}", a.out(), b.out());
    assert!(said.contains("v0 → v8"), "{said}");
    assert!(said.contains("up to date"), "{said}");
    assert_eq!(db.value("SELECT version FROM hr.schema_version"), "8");
    for role in ["headless_runner", "headless_operator", "headless_viewer"] {
        assert_eq!(
            db.value(&format!(
                "SELECT rolcanlogin FROM pg_roles WHERE rolname = '{role}'"
            )),
            "f",
            "{role} exists and is no login"
        );
    }
    // Again: nothing to do.
    let again = env.monitor().args(["db", "init", &db.admin_url()]).run();
    again.expect_code(0);
    assert!(again.out().contains("v8 is up to date"), "{}", again.out());

    // One login may not both run tools and decide for them.
    let both = db.member(&env, "both", "runner");
    let refused = env
        .monitor()
        .args([
            "db",
            "grant",
            &both.user,
            "operator",
            "--url",
            &db.admin_url(),
        ])
        .run();
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("must not also decide"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        db.value(&format!(
            "SELECT pg_has_role('{}', 'headless_operator', 'MEMBER')",
            both.user
        )),
        "f"
    );
    // An unknown login, an unknown role, no URL, not a postgres URL.
    let missing = env
        .monitor()
        .args([
            "db",
            "grant",
            "nobody_here",
            "viewer",
            "--url",
            &db.admin_url(),
        ])
        .run();
    missing.expect_code(1);
    assert!(
        missing.stderr.contains("create it first"),
        "{}",
        missing.stderr
    );
    env.monitor()
        .args(["db", "grant", &both.user, "admin", "--url", &db.admin_url()])
        .run()
        .expect_code(2);
    let no_url = env.monitor().args(["db", "init"]).run();
    no_url.expect_code(2);
    assert!(
        no_url.stderr.contains("HEADLESS_RUN_DB"),
        "{}",
        no_url.stderr
    );
    env.monitor()
        .args(["db", "init", "/tmp/state.db"])
        .run()
        .expect_code(2);
    // A wrong password: the server's refusal, without the password.
    let bad = env
        .monitor()
        .args(["db", "init", &cluster().url("admin", "wrong-pw", &db.name)])
        .run();
    bad.expect_code(1);
    assert!(!bad.stderr.contains("wrong-pw"), "{}", bad.stderr);
    // No password in the URL: ~/.pgpass (here PGPASSFILE) gives it, as libpq would — only
    // from a file nobody else may read.
    let pgpass = env.path().join("pgpass");
    std::fs::write(
        &pgpass,
        format!(
            "127.0.0.1:{}:{}:admin:{}\n",
            cluster().port,
            db.name,
            hr_shared::testing::pg::ADMIN_PASSWORD
        ),
    )
    .unwrap();
    let bare_url = format!("postgres://admin@127.0.0.1:{}/{}", cluster().port, db.name);
    let with_file = |mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(mode)).unwrap();
        env.monitor()
            .env("PGPASSFILE", &pgpass)
            .env_remove("PGPASSWORD")
            .args(["db", "init", &bare_url])
            .run()
    };
    with_file(0o600).expect_code(0);
    with_file(0o644).expect_code(1);
}

/// Two grants of one login at once, as a runner from one host and as an operator from
/// another: each waits for the schema's lock (held here by another session), then one
/// passes and the other is refused. (Checked and granted outside one transaction, both
/// passed the check: a login that both runs tools and decides.)
#[test]
fn two_grants_of_one_login_at_once_cannot_make_it_runner_and_operator() {
    let env = TestEnv::new();
    let db = database(cluster());
    env.monitor()
        .args(["db", "init", &db.admin_url()])
        .run()
        .expect_code(0);
    let login = db.login("twice");
    let holder = psql(&db.admin_url())
        .args([
            "-c",
            "SELECT pg_advisory_lock(hashtext('headless-run schema'))",
            "-c",
            "SELECT pg_sleep(3)",
        ])
        .spawn();
    // The holder has the lock once it sleeps.
    assert!(
        wait_until(Duration::from_secs(20), || {
            db.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == "1"
        }),
        "the test's session holds the schema's lock"
    );
    let mut grants: Vec<Running> = ["runner", "operator"]
        .into_iter()
        .map(|role| {
            env.monitor()
                .args(["db", "grant", &login.user, role, "--url", &db.admin_url()])
                .spawn()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    for g in &mut grants {
        assert!(
            g.child.try_wait().unwrap().is_none(),
            "a grant went on while the schema's lock was held"
        );
    }
    holder.wait().expect_code(0);
    let outs: Vec<Outcome> = grants.into_iter().map(|g| g.wait()).collect();
    let codes: Vec<Option<i32>> = outs.iter().map(|o| o.code).collect();
    assert!(
        codes == [Some(0), Some(1)] || codes == [Some(1), Some(0)],
        "{codes:?}: {outs:#?}"
    );
    let refused = outs.iter().find(|o| o.code == Some(1)).unwrap();
    assert!(
        refused.stderr.contains("must not also decide"),
        "{}",
        refused.stderr
    );
    let member = |role: &str| {
        db.value(&format!(
            "SELECT pg_has_role('{}', '{role}', 'MEMBER')",
            login.user
        ))
    };
    assert_ne!(
        (member("headless_runner"), member("headless_operator")),
        ("t".to_owned(), "t".to_owned()),
        "the login is runner and operator"
    );
}

#[test]
fn a_runner_asks_an_operator_decides_with_their_own_login_and_the_rerun_is_answered() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let victim = env.work().join("victim");
    std::fs::write(&victim, "x").unwrap();
    let shim = |env: &TestEnv| {
        let mut c = env.shim();
        c.env("HEADLESS_RUN_DB", db.url_as(&runner))
            .args(["--", "rm", "-i", "victim"]);
        c
    };
    let first = shim(&env).run();
    first.expect_code(90);
    assert!(victim.exists());
    // The hint names the operator's command, never the runner's URL or password.
    assert!(
        first.stderr.contains("with: monitor decide AP-"),
        "{}",
        first.stderr
    );
    assert!(!first.stderr.contains(&runner.password), "{}", first.stderr);

    let op = |args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", db.url_as(&operator)).args(args);
        c.run()
    };
    let listed = op(&["approvals", "--json"]);
    listed.expect_code(0);
    let pending: serde_json::Value = serde_json::from_str(&listed.out()).unwrap();
    let pending = pending.as_array().unwrap();
    assert_eq!(pending.len(), 1, "{}", listed.out());
    let ap = pending[0]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(pending[0]["status"], "pending");
    assert!(
        pending[0]["question"]
            .as_str()
            .unwrap()
            .contains("remove regular file 'victim'"),
        "{}",
        listed.out()
    );
    let decided = op(&["decide", &ap, "yes"]);
    decided.expect_code(0);
    assert!(
        decided.out().contains(&format!("by {}", operator.user)),
        "{}",
        decided.out()
    );
    // Deciding again: the first writer won.
    op(&["decide", &ap, "reject"]).expect_code(3);

    // Another runner login (another CI runner) running the same command does not get
    // this decision: it is asked anew.
    let other = db.member(&env, "runner2", "runner");
    let elsewhere = env
        .shim()
        .env("HEADLESS_RUN_DB", db.url_as(&other))
        .args(["--", "rm", "-i", "victim"])
        .run();
    elsewhere.expect_code(90);
    assert!(victim.exists());
    assert!(!elsewhere.stderr.contains(&ap), "{}", elsewhere.stderr);

    let second = shim(&env).run();
    second.expect_code(0);
    assert!(!victim.exists(), "the re-run typed the decision");

    // Recorded with the login, whatever OS user ran `monitor decide` (root here).
    assert_eq!(
        db.value(&format!(
            "SELECT decided_by || ' ' || decision_channel || ' ' || status || ' ' || (consumed_at IS NOT NULL) FROM hr.approvals WHERE approval_id = '{ap}'"
        )),
        format!("{} cli approved true", operator.user)
    );
    assert_eq!(
        db.value(&format!(
            "SELECT string_agg(DISTINCT db_user, ',' ORDER BY db_user) FROM hr.events WHERE approval_id = '{ap}'"
        )),
        {
            let mut users = [operator.user.clone(), runner.user.clone()];
            users.sort();
            users.join(",")
        }
    );
    let runs = op(&["runs", "--json"]);
    runs.expect_code(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.out()).unwrap();
    let statuses: Vec<(&str, i64)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap(),
                r["exit_code"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("completed", 0),
            ("waiting_approval", 90),
            ("completed", 90)
        ],
        "{runs}"
    );
    // The chain verifies as the SQLite store's does.
    let doctor = op(&["doctor"]);
    assert!(
        doctor.out().contains("audit chain intact"),
        "{}{}",
        doctor.out(),
        doctor.stderr
    );
    // A chain per login, and doctor keeps each one's head: the tail of another login's
    // chain cut back (by the table's owner, its append-only trigger off) is found, though
    // the newest row of all and every chain's links are still there.
    let tail = db.value(&format!(
        "SELECT max(id) FROM hr.events WHERE chain = '{}'",
        other.user
    ));
    db.admin_sql(&format!(
        "ALTER TABLE hr.events DISABLE TRIGGER events_append_only;
         DELETE FROM hr.events WHERE id = {tail};
         ALTER TABLE hr.events ENABLE TRIGGER events_append_only"
    ));
    let cut = op(&["doctor"]);
    cut.expect_code(1);
    assert!(
        cut.out()
            .contains(&format!("audit row {tail}, seen by a check at")),
        "{}",
        cut.out()
    );
}

#[test]
fn a_supervised_tool_holding_the_runner_login_cannot_approve_touch_another_run_or_rewrite_history()
{
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    std::fs::write(env.work().join("victim"), "x").unwrap();
    env.shim()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    let ap = db.value("SELECT approval_id FROM hr.approvals");
    let run = db.value("SELECT tool_run_id FROM hr.tool_runs");
    let attempts = [
        // Straight at the tables.
        format!(
            "UPDATE hr.approvals SET status = 'approved', chosen_value = 'y', decided_by = 'alice' WHERE approval_id = '{ap}'"
        ),
        "SELECT * FROM hr.approvals".to_owned(),
        format!(
            "INSERT INTO hr.approvals (approval_id, tool_run_id, tool_name, question, status, created_at) VALUES ('AP-X', '{run}', 'rm', 'q', 'approved', 'now')"
        ),
        "DELETE FROM hr.events".to_owned(),
        "UPDATE hr.events SET actor = 'root via cli'".to_owned(),
        format!("DELETE FROM hr.tool_runs WHERE tool_run_id = '{run}'"),
        // The operator's functions.
        format!("SELECT hr.decide('{ap}', 'approved', 'y', NULL, 'cli')"),
        format!("SELECT hr.cancel('{run}', 'mine now')"),
        // Another run's functions, without its capability.
        format!(
            "SELECT hr.run_status('{run}', 'guess', 'completed', NULL, 0, true, NULL, NULL, 'not_final')"
        ),
        format!("SELECT hr.approval_consume('{run}', '', '{ap}', NULL, true)"),
        format!("SELECT hr.runner_approvals('{run}', 'guess', NULL)"),
        // Internal helpers.
        format!(
            "SELECT hr.set_status('{run}', 'completed', NULL, 0, true, NULL, NULL, 'any', 'x')"
        ),
        "SELECT hr.audit('forged', NULL, NULL, 'alice', '{}')".to_owned(),
    ];
    for sql in &attempts {
        let out = db.sql_as(&runner, sql);
        assert_ne!(
            out.code(),
            0,
            "the runner was allowed: {sql}\n{}",
            out.out()
        );
        assert!(
            out.stderr.contains("permission denied") || out.stderr.contains("not yours"),
            "{sql}: {}",
            out.stderr
        );
    }
    // A run of its own, started through the runner's function: what it asks is pending
    // whatever it sends, and it cannot use the pending approval of the parked run.
    let own = db.sql_as(
        &runner,
        "SELECT hr.run_start('{\"tool_run_id\": \"TR-01M85000000000000000000000\", \"tool_name\": \"rm\", \"status\": \"running\", \"started_at\": \"x\", \"updated_at\": \"x\", \"argv_json\": [\"rm\", \"-i\", \"victim\"]}', (SELECT 'anything'), false, repeat('k', 64))",
    );
    own.expect_code(0);
    let cap = own.out().trim().to_owned();
    assert_eq!(cap.len(), 64, "{}", own.out());
    let forged = db.sql_as(
        &runner,
        &format!(
            "SELECT hr.approval_ask('TR-01M85000000000000000000000', '{cap}', '{{\"approval_id\": \"AP-01M85000000000000000000000\", \"question\": \"q\", \"status\": \"approved\", \"chosen_value\": \"y\", \"decided_by\": \"alice\", \"tool_run_id\": \"{run}\"}}', 'AP-01M85000000000000000000001')::jsonb->>'status'"
        ),
    );
    forged.expect_code(0);
    assert_eq!(forged.out().trim(), "pending");
    let used = db.sql_as(
        &runner,
        &format!(
            "SELECT hr.approval_consume('TR-01M85000000000000000000000', '{cap}', '{ap}', '{run}', true) IS NULL"
        ),
    );
    used.expect_code(0);
    assert_eq!(used.out().trim(), "t", "a pending approval is no answer");
    // Nothing the runner tried moved anything.
    assert_eq!(
        db.value(&format!("SELECT status || ' ' || coalesce(decided_by, '-') FROM hr.approvals WHERE approval_id = '{ap}'")),
        "pending -"
    );
    assert_eq!(
        db.value("SELECT status || ' ' || coalesce(decided_by, '-') FROM hr.approvals WHERE approval_id = 'AP-01M85000000000000000000000'"),
        "pending -"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM hr.approvals WHERE approval_id = 'AP-X'"),
        "0"
    );
    assert_eq!(
        db.value(&format!(
            "SELECT status FROM hr.tool_runs WHERE tool_run_id = '{run}'"
        )),
        "waiting_approval"
    );
    // The server's log names each refusal with the login that tried.
    let log = cluster().server_log();
    let refused = log
        .lines()
        .filter(|l| l.contains(&format!("{}@{}", runner.user, db.name)) && l.contains("ERROR"))
        .count();
    assert!(
        refused >= attempts.len(),
        "{refused} refusals logged:\n{log}"
    );

    // An answer nobody gave cannot be planted through expiry: whatever deadline and
    // expire action the runner sends, the server sets the time and expiry rejects.
    let planted = db.sql_as(
        &runner,
        &format!(
            "SELECT hr.approval_ask('TR-01M85000000000000000000000', '{cap}', '{{\"approval_id\": \"AP-01M85000000000000000000002\", \"question\": \"q\", \"options_json\": [{{\"value\": \"y\", \"label\": \"Yes\"}}], \"default_value\": \"y\", \"expire_action\": \"default\", \"created_at\": \"2000-01-01T00:00:00.000Z\", \"expires_at\": \"2000-01-01T00:00:01.000Z\"}}', 'AP-01M85000000000000000000003')::jsonb->>'expire_action'"
        ),
    );
    planted.expect_code(0);
    assert_eq!(planted.out().trim(), "reject");
    // Its TTL (1 s) counts from the server's clock, not from the year 2000 it claimed.
    std::thread::sleep(Duration::from_millis(1500));
    db.sql_as(&runner, "SELECT count(*) FROM hr.expire_due()")
        .expect_code(0);
    assert_eq!(
        db.value("SELECT status || ' ' || coalesce(chosen_value, '-') || ' ' || (created_at > '2001') FROM hr.approvals WHERE approval_id = 'AP-01M85000000000000000000002'"),
        "expired - true"
    );
    // Another runner login sees nothing of this login's approvals, and a worker's functions
    // move only parked runs of its own login.
    let other = db.member(&env, "runner2", "runner");
    let other_cap = "c".repeat(64);
    db.sql_as(
        &other,
        &format!("SELECT hr.run_start('{{\"tool_run_id\": \"TR-01M85000000000000000000009\", \"tool_name\": \"rm\", \"status\": \"running\", \"started_at\": \"x\", \"updated_at\": \"x\"}}', 'fp', false, '{other_cap}')"),
    )
    .expect_code(0);
    let peek = db.sql_as(
        &other,
        &format!("SELECT hr.runner_approval('TR-01M85000000000000000000009', '{other_cap}', '{ap}') IS NULL"),
    );
    peek.expect_code(0);
    assert_eq!(
        peek.out().trim(),
        "t",
        "another login's approval is not shown"
    );
    for sql in [
        format!(
            "SELECT hr.close_run('{run}', 'completed', 'mine', 0, true, NULL, NULL, ARRAY['waiting_approval'])"
        ),
        format!("SELECT hr.claim('{ap}', 'worker:x')"),
    ] {
        let out = db.sql_as(&other, &sql);
        assert!(
            out.stderr.contains("not yours") || out.stderr.contains("not resumed"),
            "{sql}: {}",
            out.stderr
        );
    }
    let own_live = db.sql_as(
        &runner,
        "SELECT hr.close_run('TR-01M85000000000000000000000', 'completed', 'x', 0, true, NULL, NULL, ARRAY['running'])",
    );
    assert!(
        own_live.stderr.contains("closes only a parked run"),
        "{}",
        own_live.stderr
    );
    // A login that somehow holds both roles (granted past `monitor db grant`) still does
    // not decide: the server refuses runners in the operator's functions.
    let both = db.login("both");
    db.admin_sql(&format!(
        "GRANT headless_runner TO {0}; GRANT headless_operator TO {0}",
        both.user
    ));
    let sneaky = db.sql_as(
        &both,
        &format!("SELECT hr.decide('{ap}', 'approved', 'y', NULL, 'cli')"),
    );
    assert!(
        sneaky.stderr.contains("does not decide"),
        "{}",
        sneaky.stderr
    );

    // The operator may decide, but not rewrite history either; a viewer may only read.
    let rewrite = db.sql_as(&operator, "DELETE FROM hr.events");
    assert_ne!(rewrite.code(), 0);
    let viewer = db.member(&env, "viewer", "viewer");
    let looked = db.sql_as(&viewer, "SELECT count(*) FROM hr.approvals");
    looked.expect_code(0);
    let tried = db.sql_as(
        &viewer,
        &format!("SELECT hr.decide('{ap}', 'approved', 'y', NULL, 'cli')"),
    );
    assert!(
        tried.stderr.contains("permission denied"),
        "{}",
        tried.stderr
    );
    let as_viewer = env
        .monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&viewer))
        .args(["decide", &ap, "yes"])
        .run();
    assert_ne!(as_viewer.code(), 0, "{}", as_viewer.out());
    assert!(
        as_viewer.stderr.contains("permission denied"),
        "{}",
        as_viewer.stderr
    );
    // Even the schema's owner cannot rewrite the chain without dropping its guard first.
    let owner = psql(&db.admin_url())
        .args(["-c", "UPDATE hr.events SET actor = 'x'"])
        .run();
    assert_ne!(owner.code(), 0);
    assert!(owner.stderr.contains("append-only"), "{}", owner.stderr);
}

#[test]
fn an_unreachable_server_leaves_the_tool_whole_and_a_prompt_ends_125() {
    let env = TestEnv::new();
    let url = format!("postgres://runner:secret-pw@127.0.0.1:{}/none", free_port());
    let out = env
        .shim()
        .env("HEADLESS_RUN_DB", &url)
        .args([
            "--",
            "sh",
            "-c",
            "printf 'out\\n'; printf 'err\\n' >&2; exit 7",
        ])
        .run();
    out.expect_code(7);
    // The tool's terminal carries both of its streams.
    assert_eq!(out.out(), "out\nerr\n");
    assert!(out.stderr.contains("unavailable"), "{}", out.stderr);
    assert!(!out.stderr.contains("secret-pw"), "{}", out.stderr);
    assert!(
        out.stderr.contains("postgres://runner:***@"),
        "{}",
        out.stderr
    );
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let asked = env
        .shim()
        .env("HEADLESS_RUN_DB", &url)
        .args(["--", "rm", "-i", "victim"])
        .run();
    asked.expect_code(125);
    assert!(
        asked.stderr.contains("could not be recorded"),
        "{}",
        asked.stderr
    );
    assert!(env.work().join("victim").exists());
    // The user config's `store` names the same server when HEADLESS_RUN_DB is unset.
    env.write_config(&format!("store = \"{url}\"\n"));
    let from_config = env.shim().args(["--", "true"]).run();
    from_config.expect_code(0);
    assert!(
        from_config.stderr.contains("postgres://runner:***@"),
        "{}",
        from_config.stderr
    );
}

#[test]
fn a_waiting_tool_is_woken_by_the_servers_notification_and_monitor_wait_too() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let tool = env
        .shim()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["--", "rm", "-i", "victim"])
        .spawn_wait_mode();
    let op = |args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", db.url_as(&operator)).args(args);
        c
    };
    let mut ap = String::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            ap = db.value(
                "SELECT coalesce(max(approval_id), '') FROM hr.approvals WHERE status = 'pending'",
            );
            !ap.is_empty()
        }),
        "no approval; tool said: {}",
        tool.stderr_now()
    );
    let waiter = op(&["wait", &ap, "--timeout", "30s"]).spawn();
    std::thread::sleep(Duration::from_millis(300));
    op(&["decide", &ap, "y"]).run().expect_code(0);
    let waited = waiter.wait();
    waited.expect_code(0);
    let out = tool.wait();
    out.expect_code(0);
    assert!(!env.work().join("victim").exists());
    assert_eq!(
        db.value(&format!("SELECT status || ' ' || decided_by || ' ' || (consumed_by IS NOT NULL) FROM hr.approvals WHERE approval_id = '{ap}'")),
        format!("approved {} true", operator.user)
    );
    // The listener is a connection of the runner's login, and it is gone with the tool.
    assert!(
        wait_until(Duration::from_secs(10), || db.value(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{}'",
            runner.user
        )) == "0"),
        "the runner's connections outlived it"
    );
}

#[test]
fn a_server_down_at_start_or_restarted_mid_run_loses_nothing_and_duplicates_nothing() {
    let env = TestEnv::new();
    let private = Cluster::start("faults", 100);
    let (db, runner, operator) = initialised_on(&private, &env);
    let shim = |script: &str| {
        let mut c = env.shim();
        c.env("HEADLESS_RUN_DB", db.url_as(&runner))
            .args(["--", "sh", "-c", script]);
        c
    };
    // Down at start: the tool is whole, its final row waits in this host's spool.
    private.down();
    let offline = shim("echo offline; exit 3").run();
    offline.expect_code(3);
    assert_eq!(offline.out(), "offline\n");
    assert!(offline.stderr.contains("unavailable"), "{}", offline.stderr);
    let spool = env.state().join("spool");
    let spooled: Vec<_> = std::fs::read_dir(&spool)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(spooled.len(), 1, "the run waits in {}", spool.display());
    private.up();
    // Restarted while a run is under way: its end is still recorded.
    let running = shim("echo before; sleep 4; echo after; exit 5").spawn();
    std::thread::sleep(Duration::from_millis(1500));
    private.down();
    private.up();
    let mid = running.wait();
    mid.expect_code(5);
    assert_eq!(mid.out(), "before\nafter\n");
    // The next shim of the host delivered the spooled run; once, however often it runs.
    shim("exit 0").run().expect_code(0);
    shim("exit 0").run().expect_code(0);
    assert!(std::fs::read_dir(&spool).map(|d| d.count()).unwrap_or(0) == 0);
    let runs = env
        .monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .args(["runs", "--json"])
        .run();
    runs.expect_code(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.out()).unwrap();
    let mut ends: Vec<(String, i64)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap().to_owned(),
                r["exit_code"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    ends.sort();
    assert_eq!(
        ends,
        [
            ("completed".to_owned(), 0),
            ("completed".to_owned(), 0),
            ("failed".to_owned(), 3),
            ("failed".to_owned(), 5)
        ],
        "{runs}"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM hr.events WHERE data::jsonb->>'delivered' = 'true'"),
        "1"
    );
}

#[test]
fn the_hosts_worker_resumes_its_logins_parked_runs_and_refuses_an_operator_login() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let victim = env.work().join("victim");
    std::fs::write(&victim, "x").unwrap();
    env.shim()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    let ap = db.value("SELECT approval_id FROM hr.approvals");
    let worker = |login: &Login| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", db.url_as(login))
            .args(["worker", "--once"]);
        c.run()
    };
    // An operator login would hand the resumed tools the power to decide.
    let refused = worker(&operator);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("runner login"),
        "{}",
        refused.stderr
    );
    env.monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .args(["decide", &ap, "yes"])
        .run()
        .expect_code(0);
    // Another host's runner login sees none of these runs.
    let other = db.member(&env, "runner2", "runner");
    let elsewhere = worker(&other);
    elsewhere.expect_code(0);
    assert!(
        elsewhere.out().contains("nothing to resume"),
        "{}",
        elsewhere.out()
    );
    assert!(victim.exists());
    // This host's worker, with the runner login, resumes it.
    let resumed = worker(&runner);
    resumed.expect_code(0);
    assert!(!victim.exists(), "{}{}", resumed.out(), resumed.stderr);
    assert_eq!(
        db.value(&format!(
            "SELECT (consumed_by IS NOT NULL) || ' ' || coalesce(claimed_by LIKE 'worker:%', false) FROM hr.approvals WHERE approval_id = '{ap}'"
        )),
        "true true"
    );
    assert_eq!(
        db.value("SELECT string_agg(status || ':' || coalesce(exit_code::text, '-'), ',' ORDER BY tool_run_id) FROM hr.tool_runs"),
        "completed:90,completed:0"
    );
    // The resume's shim recorded with the runner login (no operator's ever reached it).
    assert_eq!(
        db.value("SELECT string_agg(DISTINCT runner_login, ',') FROM hr.tool_runs"),
        runner.user
    );
}

/// How many sessions of `login` on `db` are listening for the server's notifications.
fn listeners(db: &Db, login: &Login) -> String {
    db.value(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND usename = '{}' AND query = 'LISTEN headless_run'",
        db.name, login.user
    ))
}

/// Whether process `pid` has an inotify watch on the directory `dir`: its doorbell is a
/// relay's bell file there (`/proc/PID/fdinfo` lists an inotify descriptor's watches with
/// the inode of each, in hex).
fn watches_dir(pid: i32, dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = format!(" ino:{:x} ", std::fs::metadata(dir).unwrap().ino());
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| {
            std::fs::read_to_string(fd.path()).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.starts_with("inotify ") && l.contains(&ino))
            })
        })
}

/// The pending approvals of `db`, oldest first.
fn pending_approvals(db: &Db) -> Vec<String> {
    db.value(
        "SELECT coalesce(string_agg(approval_id, ' ' ORDER BY approval_id), '') FROM hr.approvals WHERE status = 'pending'",
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

/// A shell tool that asks `Proceed NAME? [y/N]` and prints `NAME=<answer>`.
fn asks(name: &str) -> [String; 3] {
    [
        "sh".into(),
        "-c".into(),
        format!("read -p 'Proceed {name}? [y/N] ' a; echo {name}=$a"),
    ]
}

/// The host's worker relays the server's notifications (ARCHITECTURE.md, "Listeners"): while
/// it runs, the server sees one listening session of the runner login however many shims of
/// its state dir wait — each watches the relay's bell file instead —, a decision rings that
/// bell, and both waiters are answered. Once the worker is gone, a new waiter listens on its
/// own again.
#[test]
fn the_hosts_worker_relays_the_servers_notifications_to_its_waiters_and_without_it_a_waiter_listens_itself()
 {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let worker = env
        .monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .arg("worker")
        .timeout(Duration::from_secs(120))
        .spawn();
    assert!(
        wait_until(Duration::from_secs(20), || listeners(&db, &runner) == "1"),
        "no relay listening; the worker said: {}",
        worker.stderr_now()
    );
    assert!(
        worker
            .stderr_now()
            .contains("relaying the server's notifications"),
        "{}",
        worker.stderr_now()
    );
    let waiting = |name: &str| {
        env.shim()
            .env("HEADLESS_RUN_DB", db.url_as(&runner))
            .args(asks(name))
            .timeout(Duration::from_secs(120))
            .spawn_wait_mode()
    };
    let decide = |ap: &str| {
        env.monitor()
            .env("HEADLESS_RUN_DB", db.url_as(&operator))
            .args(["decide", ap, "y"])
            .run()
            .expect_code(0);
    };
    let one = waiting("one");
    let two = waiting("two");
    let mut pending = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(30), || {
            pending = pending_approvals(&db);
            pending.len() == 2
        }),
        "not two approvals: {pending:?}; {} {}",
        one.stderr_now(),
        two.stderr_now()
    );
    // Both wait on the relay's bell (an inotify watch of the state dir), with no listening
    // connection of their own: the server still sees the relay's alone.
    for tool in [&one, &two] {
        assert!(
            wait_until(Duration::from_secs(20), || watches_dir(
                tool.pid(),
                &env.state()
            )),
            "a waiter has no watch on the relay's bell; it said: {}",
            tool.stderr_now()
        );
    }
    assert_eq!(listeners(&db, &runner), "1");
    let lock = std::fs::metadata(env.state().join("notify.relay")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&lock.permissions()) & 0o777,
        0o600
    );
    // The decisions ring the bell the waiters watch.
    let bell = hr_shared::store::doorbell::Doorbell::for_file(&env.state().join("notify.bell"))
        .expect("inotify");
    bell.rang();
    for ap in &pending {
        decide(ap);
    }
    assert!(
        bell.wait(Duration::from_secs(20)),
        "the relay did not ring for the decisions; the worker said: {}",
        worker.stderr_now()
    );
    let (one, two) = (one.wait(), two.wait());
    one.expect_code(0);
    two.expect_code(0);
    assert!(one.out().contains("one=y"), "{}", one.context());
    assert!(two.out().contains("two=y"), "{}", two.context());
    assert_eq!(
        db.value("SELECT string_agg(status || ' ' || decided_by, ',') FROM hr.approvals"),
        format!("approved {0},approved {0}", operator.user)
    );

    // The worker stops: its relay's connection and lock go with it, and the next waiter
    // listens on its own.
    worker.signal(libc::SIGTERM);
    worker.wait().expect_code(0);
    assert!(
        wait_until(Duration::from_secs(20), || listeners(&db, &runner) == "0"),
        "the relay's connection outlived its worker"
    );
    let three = waiting("three");
    let mut ap = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(30), || {
            ap = pending_approvals(&db);
            ap.len() == 1
        }),
        "no third approval; {}",
        three.stderr_now()
    );
    assert!(
        wait_until(Duration::from_secs(20), || listeners(&db, &runner) == "1"),
        "the waiter does not listen on its own; it said: {}",
        three.stderr_now()
    );
    assert!(!watches_dir(three.pid(), &env.state()));
    decide(&ap[0]);
    let three = three.wait();
    three.expect_code(0);
    assert!(three.out().contains("three=y"), "{}", three.context());
}

/// `HEADLESS_RUN_LISTEN_DB` is where a waiter and the relay listen: the store's own login
/// on a direct session while `HEADLESS_RUN_DB` goes through PgBouncer in transaction
/// pooling, where `LISTEN` hears nothing (told apart here: over the cluster's socket). A
/// listen URL of another login is refused, its password never shown: the tools a worker
/// resumes inherit it.
#[test]
fn a_waiter_and_the_relay_listen_on_the_listen_url_of_the_stores_own_login() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let pooler = Pooler::start(&db, &[&runner]);
    let direct = format!(
        "postgres://{}:{}@{}:{}/{}",
        runner.user,
        runner.password,
        cluster().dir.display().to_string().replace('/', "%2F"),
        db.port,
        db.name
    );
    let on = |c: &mut Cmd| {
        c.env("HEADLESS_RUN_DB", pooler.url_as(&db, &runner))
            .env("HEADLESS_RUN_LISTEN_DB", &direct);
    };
    let direct_listeners = || {
        db.value(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE client_addr IS NULL AND backend_type = 'client backend' \
               AND query = 'LISTEN headless_run'",
        )
    };
    let mut tool = env.shim();
    on(&mut tool);
    let tool = tool.args(asks("listened")).spawn_wait_mode();
    let mut ap = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(30), || {
            ap = pending_approvals(&db);
            ap.len() == 1
        }),
        "no approval; {}",
        tool.stderr_now()
    );
    assert!(
        wait_until(Duration::from_secs(20), || direct_listeners() == "1"),
        "the waiter does not listen on the direct URL; it said: {}",
        tool.stderr_now()
    );
    env.monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .args(["decide", &ap[0], "y"])
        .run()
        .expect_code(0);
    let out = tool.wait();
    out.expect_code(0);
    assert!(out.out().contains("listened=y"), "{}", out.context());

    let mut refused = env.monitor();
    refused
        .env("HEADLESS_RUN_DB", pooler.url_as(&db, &runner))
        .env("HEADLESS_RUN_LISTEN_DB", db.url_as(&operator));
    // Refused as the state store's settings are (exit 1), before anything starts.
    let refused = refused.args(["worker"]).run();
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("HEADLESS_RUN_LISTEN_DB") && refused.stderr.contains("same login"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains(&operator.password),
        "{}",
        refused.stderr
    );

    let mut worker = env.monitor();
    on(&mut worker);
    let worker = worker
        .arg("worker")
        .timeout(Duration::from_secs(120))
        .spawn();
    assert!(
        wait_until(Duration::from_secs(20), || {
            hr_shared::store::relay::relaying(&env.state()).is_some()
        }),
        "the worker does not relay; it said: {}",
        worker.stderr_now()
    );
    assert!(
        wait_until(Duration::from_secs(20), || direct_listeners() == "1"),
        "the relay does not listen on the direct URL; the worker said: {}",
        worker.stderr_now()
    );
    worker.signal(libc::SIGTERM);
    worker.wait().expect_code(0);
}

/// Issue 25 item 7: a worker whose password is in `PGPASSWORD` only (never recorded with a
/// parked run: it looks secret) resumes with its own login — the resume's shim used to
/// reach no store and exit 125 on every approved run. The store's host, port, user and
/// database come from the worker's own `PG*` variables too, while the run's own `PG*`
/// variables (which would point the store nowhere) stay the tool's.
#[test]
fn a_worker_with_its_password_in_pgpassword_resumes_and_the_tools_pg_variables_stay_its_own() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let script = "read -p 'Proceed? [y/N] ' a; echo \"answer=$a db=$PGDATABASE host=$PGHOST\"";
    env.shim()
        .env(
            "HEADLESS_RUN_DB",
            format!(
                "postgres://{}@{}:{}/{}",
                runner.user, db.host, db.port, db.name
            ),
        )
        .env("PGPASSWORD", &runner.password)
        // The tool's own database (the URL names the store's).
        .env("PGDATABASE", "app")
        .env("PGHOST", "/nonexistent")
        .args(["sh", "-c", script])
        .run()
        .expect_code(90);
    let ap = db.value("SELECT approval_id FROM hr.approvals");
    env.monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .args(["decide", &ap, "y"])
        .run()
        .expect_code(0);
    // The worker's URL leaves everything to its environment: the password is in
    // PGPASSWORD alone.
    let out = env
        .monitor()
        .env("HEADLESS_RUN_DB", "postgres://")
        .env("PGHOST", &db.host)
        .env("PGPORT", db.port.to_string())
        .env("PGUSER", &runner.user)
        .env("PGDATABASE", &db.name)
        .env("PGPASSWORD", &runner.password)
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("with PGPASSWORD from the worker's"),
        "{}",
        out.context()
    );
    assert_eq!(
        db.value("SELECT string_agg(status || ':' || coalesce(exit_code::text, '-'), ',' ORDER BY tool_run_id) FROM hr.tool_runs"),
        "completed:90,completed:0",
        "{}",
        out.context()
    );
    assert_eq!(
        db.value("SELECT (consumed_by IS NOT NULL)::text FROM hr.approvals"),
        "true"
    );
    assert_eq!(
        db.value("SELECT string_agg(DISTINCT runner_login, ',') FROM hr.tool_runs"),
        runner.user
    );
    let resumed = db.value("SELECT tool_run_id FROM hr.tool_runs WHERE resumed_from IS NOT NULL");
    let output = String::from_utf8_lossy(&env.run_log(&resumed)).into_owned();
    assert!(
        output.contains("answer=y db=app host=/nonexistent"),
        "{output}"
    );
}

#[test]
fn two_hundred_fifty_six_shims_share_a_server_of_a_hundred_connections() {
    let env = TestEnv::new();
    let small = Cluster::start("many", 100);
    let (db, runner, operator) = initialised_on(&small, &env);
    const SHIMS: usize = 256;
    let running: Vec<Running> = (0..SHIMS)
        .map(|i| {
            env.shim()
                .env("HEADLESS_RUN_DB", db.url_as(&runner))
                .timeout(Duration::from_secs(120))
                .args(["--", "sh", "-c", "echo out-$0; sleep 1; exit $(($0 % 3))"])
                .arg(i.to_string())
                .spawn()
        })
        .collect();
    for (i, r) in running.into_iter().enumerate() {
        let out = r.wait();
        out.expect_code((i % 3) as i32);
        assert_eq!(out.out(), format!("out-{i}\n"));
        assert!(
            !out.stderr.contains("unavailable"),
            "shim {i} lost the store: {}",
            out.stderr
        );
    }
    assert_eq!(
        db.value(
            "SELECT count(*) || ' ' || count(*) FILTER (WHERE completed_at IS NOT NULL) \
             || ' ' || count(DISTINCT tool_run_id) FROM hr.tool_runs"
        ),
        format!("{SHIMS} {SHIMS} {SHIMS}")
    );
    let by_code = db.value(
        "SELECT string_agg(n::text, ',' ORDER BY exit_code) FROM \
         (SELECT exit_code, count(*) n FROM hr.tool_runs GROUP BY exit_code) x",
    );
    assert_eq!(by_code, "86,85,85");
    let doctor = env
        .monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .arg("doctor")
        .run();
    assert!(
        doctor.out().contains("audit chain intact"),
        "{}",
        doctor.out()
    );
}

/// Four "hosts" on this machine: network namespaces (the server's holds a bridge the
/// others are joined to by veth pairs), each command run with a hostname of its own.
struct Hosts {
    ns: [String; 4],
    octet: usize,
}

const SERVER: usize = 0;
const RUNNER1: usize = 1;
const RUNNER2: usize = 2;
const OPERATOR: usize = 3;
const HOSTNAMES: [&str; 4] = ["dbserver", "runner1", "runner2", "operator"];

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    fn new() -> Hosts {
        need("ip", "iproute2");
        need("unshare", "util-linux");
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let octet = 20 + (std::process::id() as usize * 7 + n) % 200;
        let ns = ["db", "r1", "r2", "op"].map(|h| format!("hr{h}{tag}"));
        let hosts = Hosts { ns, octet };
        for ns in &hosts.ns {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let server = &hosts.ns[SERVER];
        ip(&["-n", server, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", server, "link", "set", "br0", "up"]);
        ip(&[
            "-n",
            server,
            "addr",
            "add",
            &format!("{}/24", hosts.addr(SERVER)),
            "dev",
            "br0",
        ]);
        for i in [RUNNER1, RUNNER2, OPERATOR] {
            let (inner, outer) = (format!("v{i}x{tag}"), format!("b{i}x{tag}"));
            ip(&[
                "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ]);
            ip(&["link", "set", &inner, "netns", &hosts.ns[i], "name", "eth0"]);
            ip(&["link", "set", &outer, "netns", server]);
            ip(&["-n", server, "link", "set", &outer, "master", "br0", "up"]);
            ip(&[
                "-n",
                &hosts.ns[i],
                "addr",
                "add",
                &format!("{}/24", hosts.addr(i)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &hosts.ns[i], "link", "set", "eth0", "up"]);
        }
        hosts
    }

    fn addr(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.octet, i + 1)
    }

    /// `program` run on host `i`: in its namespace, under its hostname.
    fn on(&self, env: &TestEnv, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Cmd {
        let mut c = env.command("ip");
        c.args(["netns", "exec", &self.ns[i], "unshare", "--uts", "sh", "-c"])
            .arg("hostname \"$0\" && exec \"$@\"")
            .arg(HOSTNAMES[i])
            .arg(program);
        c
    }

    /// Cuts (or mends) host `i`'s link.
    fn link(&self, i: usize, up: bool) {
        ip(&[
            "-n",
            &self.ns[i],
            "link",
            "set",
            "eth0",
            if up { "up" } else { "down" },
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

#[test]
fn runners_on_two_hosts_an_operator_on_a_third_and_a_cut_link_through_one_server() {
    let env = TestEnv::new();
    let hosts = Hosts::new();
    let server = Cluster::start_in("hosts", 100, Some(&hosts.ns[SERVER]), &hosts.addr(SERVER));
    let db = database(&server);
    env.monitor()
        .args(["db", "init", &db.admin_url()])
        .run()
        .expect_code(0);
    let runner1 = db.member(&env, "runner1", "runner");
    let runner2 = db.member(&env, "runner2", "runner");
    let operator = db.member(&env, "operator", "operator");
    let shim_on = |i: usize, login: &Login| {
        let mut c = hosts.on(&env, i, bin("headless-run"));
        c.env("HEADLESS", "1")
            .env("HEADLESS_RUN_DB", db.url_as(login));
        c
    };
    let monitor_on = |i: usize, login: &Login| {
        let mut c = hosts.on(&env, i, bin("monitor"));
        c.env("HEADLESS_RUN_DB", db.url_as(login));
        c
    };
    std::fs::write(env.work().join("one"), "1").unwrap();
    std::fs::write(env.work().join("two"), "2").unwrap();
    // Runner 1 waits for its decision; runner 2 parks (exit 90).
    let waiting = shim_on(RUNNER1, &runner1)
        .args(["--", "rm", "-i", "one"])
        .spawn_wait_mode();
    shim_on(RUNNER2, &runner2)
        .args(["--", "rm", "-i", "two"])
        .run()
        .expect_code(90);
    let mut pending = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            let out = monitor_on(OPERATOR, &operator)
                .args(["approvals", "--json"])
                .run();
            pending = serde_json::from_str::<serde_json::Value>(&out.out())
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            pending.len() == 2
        }),
        "the operator sees both hosts' approvals: {pending:?}; runner 1 said {}",
        waiting.stderr_now()
    );
    let host_of = |ap: &serde_json::Value| {
        db.value(&format!(
            "SELECT r.host FROM hr.tool_runs r JOIN hr.approvals a USING (tool_run_id) WHERE a.approval_id = '{}'",
            ap["approval_id"].as_str().unwrap()
        ))
    };
    let mut seen: Vec<String> = pending.iter().map(host_of).collect();
    seen.sort();
    assert_eq!(seen, ["runner1", "runner2"]);
    for ap in &pending {
        monitor_on(OPERATOR, &operator)
            .args(["decide", ap["approval_id"].as_str().unwrap(), "yes"])
            .run()
            .expect_code(0);
    }
    waiting.wait().expect_code(0);
    assert!(!env.work().join("one").exists());
    // Runner 2's own worker resumes its parked run.
    monitor_on(RUNNER2, &runner2)
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    assert!(!env.work().join("two").exists());

    // Runner 1's link cut while its tool runs, mended after the tool ended: the tool is
    // whole, and its end reaches the server with the host's next run.
    let cut = shim_on(RUNNER1, &runner1)
        .args(["--", "sh", "-c", "echo before; sleep 2; echo after; exit 4"])
        .spawn();
    std::thread::sleep(Duration::from_millis(800));
    hosts.link(RUNNER1, false);
    let out = cut.wait();
    out.expect_code(4);
    assert_eq!(out.out(), "before\nafter\n");
    hosts.link(RUNNER1, true);
    shim_on(RUNNER1, &runner1)
        .args(["--", "true"])
        .run()
        .expect_code(0);
    assert_eq!(
        db.value("SELECT count(*) FROM hr.tool_runs WHERE exit_code = 4 AND status = 'failed'"),
        "1"
    );

    // Cancelled from the operator's host, which cannot signal runner 1's shim: the shim
    // learns it from its next heartbeat and ends the tool.
    let long = shim_on(RUNNER1, &runner1)
        .args(["--", "sleep", "60"])
        .timeout(Duration::from_secs(30))
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || db.value(
        "SELECT count(*) FROM hr.tool_runs WHERE status = 'running' AND host = 'runner1'"
    ) == "1"));
    let victim = db.value(
        "SELECT tool_run_id FROM hr.tool_runs WHERE status = 'running' AND host = 'runner1'",
    );
    let cancelled = monitor_on(OPERATOR, &operator)
        .args(["cancel", &victim, "--reason", "wrong branch"])
        .run();
    cancelled.expect_code(0);
    let ended = long.wait();
    ended.expect_code(143);
    assert_eq!(
        db.value(&format!(
            "SELECT status || ' ' || exit_code || ' ' || reason FROM hr.tool_runs WHERE tool_run_id = '{victim}'"
        )),
        format!("cancelled 143 cancelled by {}: wrong branch", operator.user)
    );

    // Runner 2's shims killed with their host: the operator's reconcile, on another host,
    // fails the run once its heartbeat is stale (made old here rather than waited for).
    let doomed = shim_on(RUNNER2, &runner2)
        .args(["--", "sleep", "60"])
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || db.value(
        "SELECT count(*) FROM hr.tool_runs WHERE status = 'running' AND host = 'runner2'"
    ) == "1"));
    let shim_pid =
        db.value("SELECT shim_pid FROM hr.tool_runs WHERE status = 'running' AND host = 'runner2'");
    let tool_pid =
        db.value("SELECT pid FROM hr.tool_runs WHERE status = 'running' AND host = 'runner2'");
    for pid in [&shim_pid, &tool_pid] {
        // SAFETY: kill with a pid this test started (through ip netns exec, same pid space).
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    let _ = doomed.wait();
    db.admin_sql(
        "UPDATE hr.tool_runs SET supervisor_heartbeat_at = '2000-01-01T00:00:00.000Z' \
         WHERE status = 'running' AND host = 'runner2'",
    );
    let rec = monitor_on(OPERATOR, &operator).arg("reconcile").run();
    rec.expect_code(0);
    assert_eq!(
        db.value("SELECT status || ' ' || reason FROM hr.tool_runs WHERE host = 'runner2' AND tool_run_id = (SELECT max(tool_run_id) FROM hr.tool_runs WHERE host = 'runner2')"),
        format!("failed {}", rec.out().lines().find_map(|l| l.split_once(" failed: ").map(|(_, w)| w.to_owned())).unwrap_or_default())
    );
    assert!(rec.out().contains("supervisor vanished"), "{}", rec.out());
}

/// A throw-away CA and a server certificate it signed for 127.0.0.1 (openssl), in `dir`:
/// (ca.pem, server.pem, server.key); and a second, unrelated CA.
pub(crate) fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 4] {
    need("openssl", "openssl");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for ca in ["ca", "other-ca"] {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=headless-run test {ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
        ]);
    }
    std::fs::write(dir.join("san.cnf"), "subjectAltName = IP:127.0.0.1\n").unwrap();
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
        "-out",
        "server.pem",
    ]);
    ["ca.pem", "server.pem", "server.key", "other-ca.pem"].map(|f| dir.join(f))
}

#[test]
fn tls_with_verify_full_reaches_a_server_that_takes_only_tls_and_a_wrong_ca_is_refused() {
    let env = TestEnv::new();
    let server = Cluster::start("tls", 100);
    let (db, runner, _operator) = initialised_on(&server, &env);
    let [ca, cert, key, other_ca] = certificates(env.path());
    let data = server.dir.join("data");
    for (from, to) in [(&cert, "server.pem"), (&key, "server.key")] {
        std::fs::copy(from, data.join(to)).unwrap();
        std::process::Command::new("chown")
            .arg("nobody")
            .arg(data.join(to))
            .status()
            .unwrap();
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            data.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    // TCP logins over TLS only (the superuser keeps the local socket).
    let hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    std::fs::write(
        data.join("pg_hba.conf"),
        hba.replace("\nhost ", "\nhostssl "),
    )
    .unwrap();
    let mut conf = std::fs::read_to_string(data.join("postgresql.auto.conf")).unwrap();
    conf.push_str("ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n");
    std::fs::write(data.join("postgresql.auto.conf"), conf).unwrap();
    server.down();
    server.up();
    let shim = |query: &str| {
        env.shim()
            .env("HEADLESS_RUN_DB", format!("{}?{query}", db.url_as(&runner)))
            .args(["--", "sh", "-c", "echo hi; exit 3"])
            .run()
    };
    let verified = shim(&format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    verified.expect_code(3);
    assert_eq!(verified.out(), "hi\n");
    assert!(
        !verified.stderr.contains("unavailable"),
        "{}",
        verified.stderr
    );
    assert_eq!(
        db.value("SELECT count(*) FROM hr.tool_runs WHERE exit_code = 3"),
        "1"
    );
    // Without TLS the server has no door for the login; with an unrelated CA the client
    // refuses the server. The tool is whole either way.
    for query in [
        "sslmode=disable".to_owned(),
        format!("sslmode=verify-full&sslrootcert={}", other_ca.display()),
    ] {
        let out = shim(&query);
        out.expect_code(3);
        assert_eq!(out.out(), "hi\n");
        assert!(
            out.stderr.contains("unavailable"),
            "{query}: {}",
            out.stderr
        );
    }
    assert_eq!(db.value("SELECT count(*) FROM hr.tool_runs"), "1");
    // A mode that is no mode is said so.
    let bad = shim("sslmode=sometimes");
    bad.expect_code(3);
    assert!(bad.stderr.contains("sslmode=sometimes"), "{}", bad.stderr);
}

#[test]
fn the_dashboard_on_the_server_shows_a_runners_prompt_and_approves_it_as_the_operators_login() {
    use crate::dashboard::{Tmux, monitor_argv};
    assert!(
        Tmux::installed(),
        "tmux is not installed: apt-get install tmux (as .ci/run does)"
    );
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let exit_file = env.path().join("monitor.exit");
    let mut argv = monitor_argv(&env, &exit_file);
    let monitor = argv.pop().unwrap();
    argv.push(format!("HEADLESS_RUN_DB={}", db.url_as(&operator)));
    argv.push(monitor);
    let tmux = Tmux::start(&env, 140, 40, &argv);
    let shim = env
        .shim()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(60))
        .spawn_wait_mode();
    // The server's notification brings the prompt to the screen (its poll is 1 s).
    let screen = tmux.wait_for(&env, "the runner's prompt", Duration::from_secs(20), |s| {
        s.contains("Pending approvals (1)") && s.contains("remove regular file 'victim'")
    });
    assert!(!screen.contains(&operator.password), "{screen}");
    // Its first option, yes (`a` would take rm's own default, no).
    tmux.keys(&["1"]);
    shim.wait().expect_code(0);
    assert!(!env.work().join("victim").exists());
    assert_eq!(
        db.value("SELECT decided_by || ' ' || decision_channel FROM hr.approvals"),
        format!("{} tui", operator.user)
    );
    tmux.wait_for(&env, "the decision", Duration::from_secs(10), |s| {
        s.contains("Pending approvals (0)")
    });
    // A pipeline the runner login started on the server's store, left waiting at its human
    // step, is in the operator's pipelines pane.
    let f = env.work().join("gate.yaml");
    std::fs::write(
        &f,
        "name: gate\nnodes:\n  - { id: ok, kind: human, title: Ship, question: Ship it? }\n",
    )
    .unwrap();
    env.monitor()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-dash"])
        .arg(&f)
        .timeout(Duration::from_secs(60))
        .run()
        .expect_code(90);
    tmux.wait_for(&env, "the pipeline", Duration::from_secs(20), |s| {
        s.contains("Pipelines (1)") && s.contains("EX-dash") && s.contains("Pending approvals (1)")
    });
}

#[test]
fn the_http_api_on_the_server_store_records_the_servers_login_and_the_token() {
    use crate::serve::{Served, token};
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let tool = env
        .shim()
        .env("HEADLESS_RUN_DB", db.url_as(&runner))
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(60))
        .spawn_wait_mode();
    let alice = token(&env, "alice", "operator");
    let url = db.url_as(&operator);
    let served = Served::start_with(&env, &[("HEADLESS_RUN_DB", &url)]);
    let mut id = String::new();
    assert!(wait_for_state(Duration::from_secs(20), || {
        let (_, v) = served.json("GET", "/api/v1/approvals", &alice, None);
        id = v["approvals"][0]["approval_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !id.is_empty()
    }));
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &alice,
        Some(r#"{"value":"yes"}"#),
    );
    assert_eq!(st, 200, "{v}");
    tool.wait().expect_code(0);
    assert_eq!(
        db.value(&format!("SELECT decided_by || ' ' || decision_channel FROM hr.approvals WHERE approval_id = '{id}'")),
        format!("{} http:alice", operator.user)
    );
}

#[test]
fn the_runner_api_on_the_server_store_writes_with_the_runner_login_it_was_given() {
    use crate::serve::{Served, token};
    let server = TestEnv::new();
    let (db, runner, operator) = initialised(&server);
    let alice = token(&server, "alice", "operator");
    let ci = token(&server, "ci-7", "runner");
    // Without a runner login the runner API says what it needs.
    let served = Served::start_with(&server, &[("HEADLESS_RUN_DB", &db.url_as(&operator))]);
    let (st, v) = served.json("POST", "/api/v1/runner/expire", &ci, Some("{}"));
    assert_eq!(st, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--runner-db"), "{v}");
    served.stop().expect_code(0);
    let served = Served::start_args(
        &server,
        &[("HEADLESS_RUN_DB", &db.url_as(&operator))],
        &["--runner-db", &db.url_as(&runner)],
    );
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    let shim = |host: &TestEnv| {
        let mut c = host.shim();
        c.env("HEADLESS_RUN_SERVER", served.url())
            .env("HEADLESS_RUN_TOKEN", &ci)
            .args(["--", "rm", "-i", "victim"]);
        c
    };
    shim(&host).run().expect_code(90);
    let (_, v) = served.json("GET", "/api/v1/approvals?status=pending", &alice, None);
    let id = v["approvals"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The run's row was written by the runner login, through its functions.
    assert_eq!(
        db.value(&format!(
            "SELECT r.status FROM hr.tool_runs r JOIN hr.approvals a USING (tool_run_id) WHERE a.approval_id = '{id}'"
        )),
        "waiting_approval"
    );
    let (st, _) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &alice,
        Some(r#"{"value":"yes"}"#),
    );
    assert_eq!(st, 200);
    shim(&host).run().expect_code(0);
    assert!(!host.work().join("victim").exists());
    assert_eq!(
        db.value(&format!(
            "SELECT decided_by || ' ' || decision_channel || ' ' || (consumed_at IS NOT NULL) FROM hr.approvals WHERE approval_id = '{id}'"
        )),
        format!("{} http:alice true", operator.user)
    );
    // --runner-db is a postgres URL, and only for that store.
    server
        .monitor()
        .args(["serve", "--runner-db", "http://x"])
        .env("HEADLESS_RUN_DB", db.url_as(&operator))
        .run()
        .expect_code(2);
}

/// A pipeline on the server's store: started and moved by a runner login, its human step
/// decided by the operator login the step names (another operator is refused), the comment
/// reaching the next step; the runner's login cannot complete the human step by rewriting
/// the execution, nor write the table, and another runner login does not see it.
#[test]
fn a_pipeline_on_the_server_store_is_moved_by_its_runner_login_and_decided_by_its_named_operator() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let other_operator = db.member(&env, "boss2", "operator");
    let other_runner = db.member(&env, "runner2", "runner");
    let f = env.work().join("ship.yaml");
    std::fs::write(
        &f,
        format!(
            "name: ship\nnodes:\n  - {{ id: build, kind: task, command: 'echo build >> ran' }}\n  - {{ id: ok, kind: human, title: Ship, question: \"\u{26a0}\u{fe0f}\tShip it?\", deciders: [{}] }}\n  - {{ id: ship, kind: task, command: 'echo \"ship $HEADLESS_RUN_APPROVAL_COMMENT\" >> ran' }}\nedges:\n  - {{ from: build, to: ok }}\n  - {{ from: ok, to: ship }}\n",
            operator.user
        ),
    )
    .unwrap();
    let as_login = |login: &Login, args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", db.url_as(login))
            .args(args)
            .timeout(Duration::from_secs(60));
        c
    };
    let running = as_login(&runner, &["pipeline", "run", "--execution-id", "EX-pg"])
        .arg(&f)
        .spawn();
    let mut ap = String::new();
    assert!(
        wait_for_state(Duration::from_secs(30), || {
            ap = db.value(
                "SELECT coalesce(max(approval_id), '') FROM hr.approvals WHERE status = 'pending'",
            );
            !ap.is_empty()
        }),
        "no approval: {}",
        running.stderr_now()
    );
    assert_eq!(
        std::fs::read_to_string(env.work().join("ran")).unwrap(),
        "build\n"
    );
    assert_eq!(
        db.value("SELECT owner || ' ' || status FROM hr.pipelines WHERE execution_id = 'EX-pg'"),
        format!("{} waiting_approval", runner.user)
    );

    // The runner's login (what a step's tool holds) marks the human step completed: refused.
    let forged = db.sql_as(
        &runner,
        "SELECT hr.pipeline_swap(jsonb_set(x, '{steps}', (SELECT jsonb_agg(CASE WHEN s->>'node' = 'ok' THEN jsonb_set(s, '{status}', '\"completed\"') ELSE s END) FROM jsonb_array_elements(x->'steps') s))) FROM hr.pipeline_docs('EX-pg', false, 1) x",
    );
    assert_ne!(forged.code, Some(0), "{}", forged.out());
    assert!(
        forged.stderr.contains("without an operator's approval"),
        "{}",
        forged.stderr
    );
    let written = db.sql_as(
        &runner,
        "UPDATE hr.pipelines SET steps = '[]' WHERE execution_id = 'EX-pg'",
    );
    assert_ne!(written.code, Some(0));
    assert!(
        written.stderr.contains("permission denied"),
        "{}",
        written.stderr
    );
    // Another runner login sees nothing of it.
    let unseen = as_login(&other_runner, &["pipeline", "status", "EX-pg"]).run();
    assert_ne!(unseen.code, Some(0));
    assert!(
        unseen.stderr.contains("no pipeline execution"),
        "{}",
        unseen.stderr
    );

    // An operator the step does not name is refused by the server; the named one decides.
    let refused = as_login(&other_operator, &["decide", &ap, "approve"]).run();
    assert_ne!(refused.code, Some(0));
    assert!(
        refused
            .stderr
            .contains(&format!("only {} may decide", operator.user)),
        "{}",
        refused.stderr
    );
    // Naming another in the channel (what a client says) changes nothing.
    let forged = db.sql_as(
        &other_operator,
        &format!(
            "SELECT hr.decide('{ap}', 'approved', 'approve', NULL, 'http:{}')",
            operator.user
        ),
    );
    assert!(
        forged.stderr.contains("may decide this pipeline step"),
        "{}",
        forged.stderr
    );
    // A step listed twice is refused.
    let doubled = db.sql_as(
        &runner,
        "SELECT hr.pipeline_swap(jsonb_set(x, '{steps}', (x->'steps') || (x->'steps'->0))) FROM hr.pipeline_docs('EX-pg', false, 1) x",
    );
    assert!(
        doubled.stderr.contains("listed twice"),
        "{}",
        doubled.stderr
    );
    as_login(
        &operator,
        &["decide", &ap, "approve", "--comment", "go ahead"],
    )
    .run()
    .expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(env.work().join("ran")).unwrap(),
        "build\nship go ahead\n"
    );
    let st = as_login(&operator, &["pipeline", "status", "EX-pg", "--json"]).run();
    st.expect_code(0);
    let st: serde_json::Value = serde_json::from_str(&st.out()).unwrap();
    assert_eq!(st["status"], "completed", "{st}");
    assert_eq!(
        db.value("SELECT string_agg(DISTINCT runner_login, ',') FROM hr.tool_runs WHERE execution_id = 'EX-pg'"),
        runner.user
    );

    // Left waiting (--detach), then decided with no runner alive: the operator's decision
    // moves the step in its own transaction (the question's run ends, the answer is used
    // up, the next step is ready), and a resume runs the rest.
    as_login(
        &runner,
        &["pipeline", "run", "--detach", "--execution-id", "EX-pg3"],
    )
    .arg(&f)
    .run()
    .expect_code(90);
    let ap3 = db.value(
        "SELECT approval_id FROM hr.approvals WHERE status = 'pending' AND execution_id = 'EX-pg3'",
    );
    as_login(
        &operator,
        &["decide", &ap3, "approve", "--comment", "later"],
    )
    .run()
    .expect_code(0);
    assert_eq!(
        db.value("SELECT status || ' ' || (SELECT string_agg(s->>'node' || ':' || (s->>'status'), ',') FROM jsonb_array_elements(steps) s) FROM hr.pipelines WHERE execution_id = 'EX-pg3'"),
        "running build:completed,ok:completed,ship:ready"
    );
    assert_eq!(
        db.value(&format!("SELECT r.status || ' ' || (a.consumed_at IS NOT NULL) FROM hr.approvals a JOIN hr.tool_runs r USING (tool_run_id) WHERE a.approval_id = '{ap3}'")),
        "completed true"
    );
    // Two resumers at once: the server's compare-and-swap lets exactly one drive it.
    let r1 = as_login(&runner, &["pipeline", "resume", "EX-pg3"]).spawn();
    let r2 = as_login(&runner, &["pipeline", "resume", "EX-pg3"]).spawn();
    let (o1, o2) = (r1.wait(), r2.wait());
    let mut codes = [o1.code(), o2.code()];
    codes.sort();
    assert_eq!(codes, [0, 3], "{}\n{}", o1.context(), o2.context());
    assert_eq!(
        db.value(
            "SELECT count(*) FROM hr.tool_runs WHERE execution_id = 'EX-pg3' AND tool_name = 'sh'"
        ),
        "2",
        "build and ship, once each"
    );
    assert!(
        std::fs::read_to_string(env.work().join("ran"))
            .unwrap()
            .ends_with("ship later\n")
    );

    // The runner's login (a step's tool) skips the waiting human step and makes the step
    // after it ready: the database lets the owner write that, but the step is refused by
    // whoever would start it, since the store has no approval of the step that guards it.
    as_login(
        &runner,
        &["pipeline", "run", "--detach", "--execution-id", "EX-pg4"],
    )
    .arg(&f)
    .run()
    .expect_code(90);
    let ships = || {
        std::fs::read_to_string(env.work().join("ran"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("ship"))
            .count()
    };
    let shipped = ships();
    let forged = db.sql_as(
        &runner,
        "SELECT hr.pipeline_swap(jsonb_set(jsonb_set(x, '{status}', '\"running\"'), '{steps}', (SELECT jsonb_agg(CASE WHEN s->>'node' = 'ok' THEN jsonb_set(s, '{status}', '\"skipped\"') ELSE s END) FROM jsonb_array_elements(x->'steps') s) || '[{\"node\": \"ship\", \"iteration\": 0, \"status\": \"ready\"}]'::jsonb)) FROM hr.pipeline_docs('EX-pg4', false, 1) x",
    );
    forged.expect_code(0);
    let refused = as_login(&runner, &["pipeline", "resume", "EX-pg4"]).run();
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("has no approval in the store"),
        "{}",
        refused.stderr
    );
    assert_eq!(ships(), shipped, "the guarded step did not run");
    // Its question is withdrawn with it: nobody is left to decide for it.
    assert_eq!(
        db.value(
            "SELECT status || ' ' || decided_by FROM hr.approvals WHERE execution_id = 'EX-pg4'"
        ),
        "expired system:run-ended"
    );
    assert_eq!(
        db.value("SELECT status FROM hr.pipelines WHERE execution_id = 'EX-pg4'"),
        "failed"
    );

    // Nor can it run a guarded step again with the approval it had: `ship` done, the
    // execution waiting at a second human step, the row says `ship` is ready once more.
    let twice = env.work().join("twice.yaml");
    std::fs::write(
        &twice,
        "name: twice\nnodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship?' }\n  - { id: ship, kind: task, command: 'echo ship-twice >> ran' }\n  - { id: done, kind: human, title: Done, question: 'Done?' }\nedges:\n  - { from: ok, to: ship }\n  - { from: ship, to: done }\n",
    )
    .unwrap();
    as_login(
        &runner,
        &["pipeline", "run", "--detach", "--execution-id", "EX-pg5"],
    )
    .arg(&twice)
    .run()
    .expect_code(90);
    let ap5 = db.value(
        "SELECT approval_id FROM hr.approvals WHERE status = 'pending' AND execution_id = 'EX-pg5'",
    );
    as_login(&operator, &["decide", &ap5, "approve"])
        .run()
        .expect_code(0);
    as_login(&runner, &["pipeline", "resume", "EX-pg5", "--detach"])
        .run()
        .expect_code(90);
    let once = || {
        std::fs::read_to_string(env.work().join("ran"))
            .unwrap()
            .lines()
            .filter(|l| *l == "ship-twice")
            .count()
    };
    assert_eq!(once(), 1);
    db.sql_as(
        &runner,
        "SELECT hr.pipeline_swap(jsonb_set(jsonb_set(x, '{status}', '\"running\"'), '{steps}', (SELECT jsonb_agg(CASE WHEN s->>'node' = 'ship' THEN jsonb_set(s, '{status}', '\"ready\"') ELSE s END) FROM jsonb_array_elements(x->'steps') s))) FROM hr.pipeline_docs('EX-pg5', false, 1) x",
    )
    .expect_code(0);
    let again = as_login(&runner, &["pipeline", "resume", "EX-pg5"]).run();
    again.expect_code(1);
    assert!(
        again.stderr.contains("has run 1 time(s) already"),
        "{}",
        again.stderr
    );
    assert_eq!(once(), 1, "the guarded step ran once");

    // Left waiting (--detach), then cancelled by an operator: an operator only cancels.
    as_login(
        &runner,
        &["pipeline", "run", "--detach", "--execution-id", "EX-pg2"],
    )
    .arg(&f)
    .run()
    .expect_code(90);
    // Through `monitor serve` on this store: listed and shown with its steps, and a token
    // the step does not name is refused (the server's login could decide; `bob` may not).
    let bob = crate::serve::token(&env, "bob", "operator");
    let url = db.url_as(&operator);
    let served = crate::serve::Served::start_with(&env, &[("HEADLESS_RUN_DB", &url)]);
    let (st, v) = served.json("GET", "/api/v1/executions", &bob, None);
    assert_eq!(st, 200, "{v}");
    let listed: Vec<&str> = v["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["EX-pg2", "EX-pg5", "EX-pg4", "EX-pg3", "EX-pg"],
        "{v}"
    );
    let (st, v) = served.json("GET", "/api/v1/executions/EX-pg2", &bob, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["pipeline"]["status"], "waiting_approval", "{v}");
    assert_eq!(v["pipeline"]["steps"][1]["node"], "ok", "{v}");
    let (st, v) = served.json("POST", "/api/v1/executions/EX-pg2/approve", &bob, None);
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"].as_str().unwrap_or_default().contains("only "),
        "{v}"
    );
    served.stop().expect_code(0);
    let moved = db.sql_as(
        &operator,
        "SELECT hr.pipeline_swap(jsonb_set(x, '{status}', '\"completed\"')) FROM hr.pipeline_docs('EX-pg2', false, 1) x",
    );
    assert!(
        moved.stderr.contains("an operator only cancels"),
        "{}",
        moved.stderr
    );
    as_login(&operator, &["pipeline", "cancel", "EX-pg2"])
        .run()
        .expect_code(0);
    assert_eq!(
        db.value("SELECT status FROM hr.pipelines WHERE execution_id = 'EX-pg2'"),
        "cancelled"
    );
    // Its steps settle with it (hr.settle_steps): none waits or runs any more.
    assert_eq!(
        db.value(
            "SELECT count(*) FROM hr.pipelines p, jsonb_array_elements(p.steps) s WHERE p.execution_id = 'EX-pg2' AND s->>'status' IN ('running', 'waiting_approval', 'ready', 'pending')"
        ),
        "0"
    );
    // What ran or waited is shown cancelled, not failed.
    assert_ne!(
        db.value(
            "SELECT count(*) FROM hr.pipelines p, jsonb_array_elements(p.steps) s WHERE p.execution_id = 'EX-pg2' AND s->>'status' = 'cancelled'"
        ),
        "0"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM hr.approvals WHERE status = 'pending'"),
        "0"
    );
}

/// One pipeline across two hosts over one server: its runner on runner1 runs the unlabelled
/// steps, the worker of label `r2` on runner2 (the same runner login) runs the labelled one,
/// a worker of another runner login is shown nothing, and the operator on a third host
/// decides the human step. The runner2 worker then killed mid-step (its beat made stale,
/// as a host that went away would leave it): the runner takes the step over and runs
/// nothing twice.
#[test]
fn a_pipeline_runs_its_labelled_step_on_another_hosts_worker_through_one_server() {
    let env = TestEnv::new();
    let hosts = Hosts::new();
    let server = Cluster::start_in("lab", 100, Some(&hosts.ns[SERVER]), &hosts.addr(SERVER));
    let (db, ci, operator) = initialised_on(&server, &env);
    let stranger = db.member(&env, "stranger", "runner");
    // runner2's own login (one login per OS user per host): its label worker runs ci's
    // labelled steps only as its host's config allows and ci's run names it.
    let deployer = db.member(&env, "deployer", "runner");
    let monitor_on = |i: usize, login: &Login| {
        let mut c = hosts.on(&env, i, bin("monitor"));
        c.env("HEADLESS_RUN_DB", db.url_as(login))
            .timeout(Duration::from_secs(120));
        c
    };
    let f = env.work().join("two-hosts.yaml");
    std::fs::write(
        &f,
        r#"name: two-hosts
nodes:
  - { id: a, kind: task, command: 'echo "a $(hostname)" >> ran' }
  - id: b
    kind: gate
    host: r2
    command: 'echo "b $(hostname)" >> ran; while [ -e hold ]; do sleep 0.05; done'
  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }
  - { id: c, kind: task, command: 'echo "c $(hostname) $HEADLESS_RUN_APPROVAL_COMMENT" >> ran' }
edges:
  - { from: a, to: b }
  - { from: b, to: ok }
  - { from: ok, to: c }
"#,
    )
    .unwrap();
    std::fs::write(env.work().join("hold"), "").unwrap();
    let ran = || std::fs::read_to_string(env.work().join("ran")).unwrap_or_default();
    let running = monitor_on(RUNNER1, &ci)
        .args(["pipeline", "run", "--execution-id", "EX-hosts", "--workers"])
        .arg(&deployer.user)
        .arg(&f)
        .spawn();
    let step_b = |what: &str| {
        db.value(&format!(
            "SELECT coalesce((SELECT s #>> '{{{what}}}' FROM hr.pipelines p, jsonb_array_elements(p.steps) s WHERE p.execution_id = 'EX-hosts' AND s->>'node' = 'b'), '')"
        ))
    };
    assert!(
        wait_for_state(Duration::from_secs(30), || step_b("status") == "ready"),
        "{}",
        running.stderr_now()
    );
    assert_eq!(ran(), "a runner1\n");
    // The named worker's host does not trust ci yet: nothing runs there.
    let out = monitor_on(RUNNER2, &deployer)
        .args(["worker", "--once", "--labels", "r2"])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("pipelines_from"), "{}", out.context());
    assert_eq!(step_b("status"), "ready", "{}", out.out());
    // Its host's own config trusts ci's pipelines (never a row or a project file).
    env.write_config(&format!("[worker]\npipelines_from = [\"{}\"]\n", ci.user));
    // Another runner login that ci did not name is shown nothing, trusting or not.
    let out = monitor_on(RUNNER2, &stranger)
        .args(["worker", "--once", "--labels", "r2"])
        .run();
    out.expect_code(0);
    assert_eq!(step_b("status"), "ready", "{}", out.out());
    let worker = monitor_on(RUNNER2, &deployer)
        .args(["worker", "--labels", "r2", "--interval", "200ms"])
        .spawn();
    assert!(
        wait_for_state(Duration::from_secs(30), || !step_b("run,pid").is_empty()),
        "{}",
        worker.stderr_now()
    );
    assert_eq!(step_b("run,host"), "runner2");
    assert_eq!(
        step_b("run,login"),
        deployer.user,
        "claimed as its own login"
    );
    // A named label worker moves only the labelled steps it claims: rewriting another step
    // (a's result, which later conditions read) is refused by the server.
    let mut psql = hosts.on(&env, RUNNER2, "psql");
    psql.env_remove("PGPASSWORD").args([
        "-X",
        "-q",
        "-t",
        "-A",
        &db.url_as(&deployer),
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "SELECT hr.pipeline_swap(d || jsonb_build_object('steps', (SELECT jsonb_agg(CASE WHEN s->>'node' = 'a' THEN jsonb_set(s, '{exit_code}', '7') ELSE s END ORDER BY n) FROM jsonb_array_elements(d->'steps') WITH ORDINALITY x(s, n)))) FROM hr.pipeline_docs('EX-hosts', false, 1) d",
    ]);
    let forged = psql.run();
    assert!(
        forged
            .stderr
            .contains("moves only the labelled steps it claims"),
        "{}",
        forged.context()
    );
    let who = step_b("run,worker");
    assert!(
        who.starts_with(&format!("runner2 {} ", worker.pid())),
        "{who}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || ran().contains("b runner2")),
        "{}",
        ran()
    );
    // runner2's worker gone with its host: killed, its beat stale.
    worker.signal(libc::SIGKILL);
    db.admin_sql(
        "UPDATE hr.pipelines SET version = version + 1, steps = (SELECT jsonb_agg(CASE WHEN s->>'node' = 'b' THEN jsonb_set(s, '{run,beat_at}', '\"2000-01-01T00:00:00.000Z\"') ELSE s END ORDER BY n) FROM jsonb_array_elements(steps) WITH ORDINALITY x(s, n)) WHERE execution_id = 'EX-hosts'",
    );
    assert!(
        wait_until(Duration::from_secs(30), || running
            .stderr_now()
            .contains("its worker")),
        "the runner takes the step over: {}",
        running.stderr_now()
    );
    std::fs::remove_file(env.work().join("hold")).unwrap();
    let mut ap = String::new();
    assert!(
        wait_for_state(Duration::from_secs(30), || {
            ap = db.value(
                "SELECT coalesce(max(approval_id), '') FROM hr.approvals WHERE status = 'pending'",
            );
            !ap.is_empty()
        }),
        "{}",
        running.stderr_now()
    );
    monitor_on(OPERATOR, &operator)
        .args(["decide", &ap, "approve", "--comment", "ship"])
        .run()
        .expect_code(0);
    running.wait().expect_code(0);
    assert_eq!(ran(), "a runner1\nb runner2\nc runner1 ship\n");
    assert_eq!(
        db.value("SELECT string_agg(host || ':' || tool_name, ',' ORDER BY started_at) FROM hr.tool_runs WHERE execution_id = 'EX-hosts' AND tool_name <> 'pipeline'"),
        "runner1:sh,runner2:sh,runner1:sh"
    );
    // Each step's run is recorded as the login of the worker that ran it.
    assert_eq!(
        db.value("SELECT string_agg(runner_login, ',' ORDER BY started_at) FROM hr.tool_runs WHERE execution_id = 'EX-hosts' AND tool_name <> 'pipeline'"),
        format!("{},{},{}", ci.user, deployer.user, ci.user)
    );
    let _ = worker.wait();
}

/// DESIGN §14 across hosts: two OS users of one host (root and `hr-test-alice`), each with
/// a runner login of its own, an operator on another host, one server. Nothing one user's
/// tool recorded — honestly, or forged with the user's own credentials to say it ran as
/// root — is ever run as the other: the other's worker does not see it, its own worker
/// refuses what claims another uid (and `monitor show` says why it waits), a worker whose
/// login two users share runs nothing, and a pipeline is driven only by its starter. Each
/// effect is checked by the uid that wrote the proof file.
#[test]
fn two_users_of_a_host_each_with_its_own_login_never_run_each_others_work() {
    if !running_as_root("two_users_of_a_host_each_with_its_own_login") {
        return;
    }
    need("setpriv", "util-linux");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = TestEnv::new();
    let alice = os_user("hr-test-alice");
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = env.path().join("alice");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(alice.0), Some(alice.1)).unwrap();
    let hosts = Hosts::new();
    let server = Cluster::start_in("who", 100, Some(&hosts.ns[SERVER]), &hosts.addr(SERVER));
    let (db, root_login, operator) = initialised_on(&server, &env);
    let alice_login = db.member(&env, "alice", "runner");
    // A program on runner1 as `user` (root: None) with `login`'s store.
    let on_runner1 = |user: Option<(u32, u32)>, login: &Login, program: &str| {
        let mut c = hosts.on(&env, RUNNER1, "setpriv");
        match user {
            Some((uid, gid)) => c
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .env("HEADLESS_RUN_HOME", home.join("state"))
                .current_dir(&home),
            None => c.arg("--reuid=0"),
        };
        c.arg(bin(program))
            .env("HEADLESS_RUN_DB", db.url_as(login))
            .timeout(Duration::from_secs(120));
        c
    };
    let operator_does = |args: &[&str]| {
        let mut c = hosts.on(&env, OPERATOR, bin("monitor"));
        c.env("HEADLESS_RUN_DB", db.url_as(&operator)).args(args);
        c.run()
    };
    let proof = |name: &str| home.join(name);

    // Alice's honest run, parked on its question and approved: root's worker (root's own
    // login) sees none of it; hers resumes it, as her.
    on_runner1(Some(alice), &alice_login, "headless-run")
        .env("HEADLESS", "1")
        .args([
            "sh",
            "-c",
            "printf 'Deploy? [y/N] '; read a; id -u > honest",
        ])
        .run()
        .expect_code(90);
    let ap = db.value("SELECT approval_id FROM hr.approvals WHERE status = 'pending'");
    operator_does(&["decide", &ap, "yes"]).expect_code(0);
    let out = on_runner1(None, &root_login, "monitor")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("nothing to resume"), "{}", out.context());
    assert!(!proof("honest").exists());
    let out = on_runner1(Some(alice), &alice_login, "monitor")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        wait_until(Duration::from_secs(30), || proof("honest").exists()),
        "{}",
        out.context()
    );
    assert_eq!(std::fs::metadata(proof("honest")).unwrap().uid(), alice.0);

    // Her tool, holding her login, forges a parked run that says it ran as root.
    let cap = "forged-capability-".repeat(3);
    let forged_cmd = format!("id -u > {}", proof("forged").display());
    let psql_on_runner1 = |login: &Login, sql: &str| {
        let mut c = hosts.on(&env, RUNNER1, "psql");
        c.env_remove("PGPASSWORD")
            .args(["-X", "-q", "-t", "-A", &db.url_as(login)])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql]);
        c.run()
    };
    psql_on_runner1(
        &alice_login,
        &format!(
            "SELECT hr.run_start('{{\"tool_run_id\": \"TR-01M8F0RGED0000000000000000\", \"tool_name\": \"sh\", \"status\": \"running\", \"started_at\": \"2026-01-01T00:00:00.000Z\", \"updated_at\": \"2026-01-01T00:00:00.000Z\", \"host\": \"runner1\", \"cwd\": \"/\", \"argv_json\": [\"sh\", \"-c\", \"{forged_cmd}\"], \"metadata\": {{\"uid\": 0}}}}', 'forged', false, '{cap}'); \
             SELECT hr.approval_ask('TR-01M8F0RGED0000000000000000', '{cap}', '{{\"approval_id\": \"AP-01M8F0RGED0000000000000000\", \"question\": \"Run it?\", \"options_json\": [{{\"value\": \"y\", \"label\": \"Yes\"}}], \"prompt_kind\": \"choice\", \"screen_digest\": \"f\"}}', 'AP-01M8F0RGED0000000000000001'); \
             SELECT hr.run_status('TR-01M8F0RGED0000000000000000', '{cap}', 'waiting_approval', 'parked', 90, false, NULL, NULL, 'not_final')"
        ),
    )
    .expect_code(0);
    let ap = db.value("SELECT approval_id FROM hr.approvals WHERE status = 'pending'");
    operator_does(&["decide", &ap, "yes"]).expect_code(0);
    // The server recorded who wrote each run, whatever the row said.
    assert_eq!(
        db.value("SELECT string_agg(DISTINCT runner_login, ',') FROM hr.tool_runs"),
        alice_login.user
    );
    // Root's worker with root's login: nothing of it. Hers: the login now carries runs of
    // two users of this host, so it runs nothing at all.
    let out = on_runner1(None, &root_login, "monitor")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("nothing to resume"), "{}", out.context());
    let out = on_runner1(Some(alice), &alice_login, "monitor")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("runs nothing") && out.out().contains("root (uid 0)"),
        "{}",
        out.context()
    );
    assert!(!proof("forged").exists(), "the forged run ran");
    // It waits, and says who would run it, and as whom, to an operator.
    let shown = operator_does(&["show", "TR-01M8F0RGED0000000000000000"]);
    shown.expect_code(0);
    assert!(
        shown
            .out()
            .lines()
            .any(|l| l.starts_with("resumed") && l.contains("uid 0")),
        "{}",
        shown.out()
    );
    assert!(
        shown
            .out()
            .lines()
            .any(|l| l.starts_with("started_by") && l.contains(&alice_login.user)),
        "{}",
        shown.out()
    );

    // The mistake the README warns of: root's worker with alice's login. The login's runs
    // say two users of this host use it: the worker runs nothing (the forged row claims
    // root, which this worker is), and `doctor` and `db grant` say why.
    let out = on_runner1(None, &alice_login, "monitor")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("runs nothing") && out.out().contains("hr-test-alice"),
        "{}",
        out.context()
    );
    assert!(
        !proof("forged").exists(),
        "root's worker ran the forged run"
    );
    let doctor = on_runner1(None, &alice_login, "monitor")
        .arg("doctor")
        .run();
    assert!(
        doctor
            .out()
            .contains(&format!("runner login {} is used by", alice_login.user)),
        "{}",
        doctor.context()
    );
    let granted = env
        .monitor()
        .args([
            "db",
            "grant",
            &alice_login.user,
            "runner",
            "--url",
            &db.admin_url(),
        ])
        .run();
    granted.expect_code(0);
    assert!(
        granted.stderr.contains("is used by") && granted.out().contains("one OS user"),
        "{}",
        granted.context()
    );

    // A pipeline is its starter's: alice's, waiting on its human step, is never driven by
    // root — not with root's login (it sees nothing), nor with hers (another uid).
    let f = home.join("p.yaml");
    std::fs::write(
        &f,
        format!(
            "name: deploy\nnodes:\n  - {{ id: ok, kind: human, title: Ship, question: 'Ship it?' }}\n  - {{ id: ship, kind: task, command: 'id -u > {}' }}\nedges:\n  - {{ from: ok, to: ship }}\n",
            proof("shipped").display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&f, Some(alice.0), Some(alice.1)).unwrap();
    on_runner1(Some(alice), &alice_login, "monitor")
        .args(["pipeline", "run", "--execution-id", "EX-alice", "--detach"])
        .arg(&f)
        .run()
        .expect_code(90);
    let ap = db.value("SELECT approval_id FROM hr.approvals WHERE status = 'pending'");
    operator_does(&["decide", &ap, "approve"]).expect_code(0);
    let out = on_runner1(None, &alice_login, "monitor")
        .args(["pipeline", "resume", "EX-alice"])
        .run();
    out.expect_code(1);
    assert!(
        out.stderr.contains("not resumed here") && out.stderr.contains("hr-test-alice"),
        "{}",
        out.context()
    );
    on_runner1(None, &root_login, "monitor")
        .args(["pipeline", "resume", "EX-alice"])
        .run()
        .expect_code(4);
    assert!(!proof("shipped").exists(), "root drove alice's pipeline");
    // Her own resume runs the step, as her.
    on_runner1(Some(alice), &alice_login, "monitor")
        .args(["pipeline", "resume", "EX-alice"])
        .run()
        .expect_code(0);
    assert_eq!(std::fs::metadata(proof("shipped")).unwrap().uid(), alice.0);
}

/// DESIGN §14: on the server's store, an approval's times are the server's. A runner that
/// says its approval was asked in 2001 and expires an hour later gets one asked now that
/// expires in an hour.
#[test]
fn an_approvals_times_are_the_servers_whatever_the_runner_says() {
    let env = TestEnv::new();
    let (db, runner, _operator) = initialised(&env);
    let cap = "clock-capability-".repeat(3);
    db.sql_as(
        &runner,
        &format!(
            "SELECT hr.run_start('{{\"tool_run_id\": \"TR-01M8C10CK00000000000000000\", \"tool_name\": \"sh\", \"status\": \"running\", \"started_at\": \"x\", \"updated_at\": \"x\"}}', 'fp', false, '{cap}'); \
             SELECT hr.approval_ask('TR-01M8C10CK00000000000000000', '{cap}', '{{\"approval_id\": \"AP-01M8C10CK00000000000000000\", \"question\": \"q\", \"created_at\": \"2001-01-01T00:00:00.000Z\", \"expires_at\": \"2001-01-01T01:00:00.000Z\"}}', 'AP-01M8C10CK00000000000000001')"
        ),
    )
    .expect_code(0);
    let (asked, expires) = (
        db.value("SELECT extract(epoch FROM now() - created_at::timestamptz)::int FROM hr.approvals"),
        db.value("SELECT extract(epoch FROM expires_at::timestamptz - created_at::timestamptz)::int FROM hr.approvals"),
    );
    let asked: i64 = asked.parse().unwrap();
    assert!((0..600).contains(&asked), "asked {asked} s ago");
    assert_eq!(expires, "3600", "its TTL, from the server's clock");
    assert_eq!(
        db.value("SELECT status FROM hr.approvals"),
        "pending",
        "not expired on arrival"
    );
}

/// DESIGN §14 (an approval never changes under the operator): a takeover is checked by
/// the server against the two runs it keeps. A tool holding the runner login that starts a
/// run of another command, copying the waiting run's fingerprint and screen, does not get
/// its approval: the operator's "yes" stays bound to the command it was asked for.
#[test]
fn a_takeover_needs_the_same_stored_command_whatever_fingerprint_the_runner_sends() {
    let env = TestEnv::new();
    let (db, runner, _operator) = initialised(&env);
    let start = |id: &str, cap: &str, argv: &str| {
        format!(
            "SELECT hr.run_start('{{\"tool_run_id\": \"{id}\", \"tool_name\": \"deploy\", \"status\": \"running\", \"started_at\": \"x\", \"updated_at\": \"x\", \"cwd\": \"/w\", \"host\": \"h\", \"argv_json\": {argv}, \"metadata\": {{\"uid\": 0}}}}', 'same-fingerprint', false, '{cap}');"
        )
    };
    let take_over = |id: &str, cap: &str| {
        format!(
            "SELECT hr.approval_take_over('{id}', '{cap}', 'AP-01M8TAKE0VER0000000000000A', '{{\"screen_digest\": \"s\"}}', 'TR-01M8TAKE0VER0000000000000A', true) IS NULL"
        )
    };
    let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
    db.sql_as(
        &runner,
        &format!(
            "{} SELECT hr.approval_ask('TR-01M8TAKE0VER0000000000000A', '{a}', '{{\"approval_id\": \"AP-01M8TAKE0VER0000000000000A\", \"question\": \"Deploy?\", \"screen_digest\": \"s\"}}', 'AP-01M8TAKE0VER0000000000000B'); SELECT hr.run_status('TR-01M8TAKE0VER0000000000000A', '{a}', 'waiting_approval', 'parked', 90, false, NULL, NULL, 'not_final');",
            start("TR-01M8TAKE0VER0000000000000A", &a, "[\"deploy\", \"staging\"]")
        ),
    )
    .expect_code(0);
    // Another command line with the same fingerprint and screen: refused (NULL).
    let other = db.sql_as(
        &runner,
        &format!(
            "{} {}",
            start(
                "TR-01M8TAKE0VER0000000000000B",
                &b,
                "[\"deploy\", \"prod\"]"
            ),
            take_over("TR-01M8TAKE0VER0000000000000B", &b)
        ),
    );
    other.expect_code(0);
    assert!(other.out().trim().ends_with('t'), "{}", other.context());
    assert_eq!(
        db.value("SELECT tool_run_id FROM hr.approvals WHERE approval_id = 'AP-01M8TAKE0VER0000000000000A'"),
        "TR-01M8TAKE0VER0000000000000A"
    );
    // The same command (a true retry): taken over, its text as it was.
    let retry = db.sql_as(
        &runner,
        &format!(
            "{} {}",
            start(
                "TR-01M8TAKE0VER0000000000000C",
                &c,
                "[\"deploy\", \"staging\"]"
            ),
            take_over("TR-01M8TAKE0VER0000000000000C", &c)
        ),
    );
    retry.expect_code(0);
    assert!(retry.out().trim().ends_with('f'), "{}", retry.context());
    assert_eq!(
        db.value("SELECT tool_run_id || ' ' || question FROM hr.approvals WHERE approval_id = 'AP-01M8TAKE0VER0000000000000A'"),
        "TR-01M8TAKE0VER0000000000000C Deploy?"
    );
}

/// Required reviewers on the PostgreSQL store, with the real binaries: the runner login's
/// run needs two logins of role `ops_…` and a wait timer (its config's `[[reviewers]]`);
/// each operator decides with their own login, an operator outside the role is refused,
/// one login counts once, and the re-run is answered only once the timer let it go.
#[test]
fn two_operator_logins_of_a_role_and_a_wait_timer_answer_the_rerun() {
    let env = TestEnv::new();
    let (db, runner, alice) = initialised(&env);
    let bob = db.member(&env, "bob", "operator");
    let dave = db.member(&env, "dave", "operator");
    let group = format!("ops_{}", db.name);
    db.admin_sql(&format!(
        "CREATE ROLE {group} NOLOGIN; GRANT {group} TO {}; GRANT {group} TO {}",
        alice.user, bob.user
    ));
    env.write_config(&format!(
        "[[reviewers]]\nname = \"deletions\"\ntool = \"rm\"\nrequired = 2\ngroup = \"{group}\"\nwait = \"2s\"\n"
    ));
    let victim = env.work().join("victim");
    std::fs::write(&victim, "x").unwrap();
    let shim = || {
        env.shim()
            .env("HEADLESS_RUN_DB", db.url_as(&runner))
            .args(["--", "rm", "-i", "victim"])
            .run()
    };
    shim().expect_code(90);
    let op = |login: &Login, args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", db.url_as(login)).args(args);
        c.run()
    };
    let listed = op(&alice, &["approvals", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&listed.out()).unwrap();
    let ap = v[0]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(v[0]["reviews_required"], 2, "{v}");
    assert_eq!(v[0]["reviewer_group"], group.as_str(), "{v}");

    let refused = op(&dave, &["decide", &ap, "yes"]);
    assert_ne!(refused.code(), 0);
    assert!(
        refused.stderr.contains("is not a member"),
        "{}",
        refused.stderr
    );
    let first = op(&alice, &["decide", &ap, "yes"]);
    first.expect_code(0);
    assert!(first.out().contains("1 of 2 approvals"), "{}", first.out());
    let again = op(&alice, &["decide", &ap, "yes"]);
    again.expect_code(0);
    assert!(again.out().contains("1 of 2 approvals"), "{}", again.out());
    // One approval of two answers nothing.
    shim().expect_code(90);
    assert!(victim.exists());
    let second = op(&bob, &["decide", &ap, "yes"]);
    second.expect_code(0);
    assert!(
        second.out().contains("held by its 2s wait timer"),
        "{}",
        second.out()
    );
    shim().expect_code(90);
    assert!(victim.exists(), "answered while held");
    std::thread::sleep(Duration::from_millis(2200));
    shim().expect_code(0);
    assert!(
        !victim.exists(),
        "the re-run was not answered after the timer"
    );
    assert_eq!(
        db.value(&format!(
            "SELECT status || ' ' || decided_by || ' ' || jsonb_array_length(reviews) FROM hr.approvals WHERE approval_id = '{ap}'"
        )),
        format!("approved {}, {} 2", alice.user, bob.user)
    );
}

/// PgBouncer in front of the test cluster, as nobody: transaction pooling over two server
/// connections per login, taken in turn, so that consecutive transactions of one client run
/// on different server connections.
struct Pooler {
    dir: tempfile::TempDir,
    port: u16,
    child: std::process::Child,
}

impl Pooler {
    fn start(db: &Db, logins: &[&Login]) -> Pooler {
        let program = need("pgbouncer", "pgbouncer");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let users: String = logins
            .iter()
            .map(|l| format!("\"{}\" \"{}\"\n", l.user, l.password))
            .collect();
        std::fs::write(dir.path().join("users.txt"), users).unwrap();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\n{name} = host={host} port={pgport} dbname={name}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = scram-sha-256\nauth_file = {dir}/users.txt\n\
                 pool_mode = transaction\ndefault_pool_size = 2\nmin_pool_size = 2\n\
                 server_round_robin = 1\nmax_client_conn = 200\n\
                 ignore_startup_parameters = options,extra_float_digits\n\
                 logfile = {dir}/log\n",
                name = db.name,
                host = db.host,
                pgport = db.port,
                dir = dir.path().display(),
            ),
        )
        .unwrap();
        let status = std::process::Command::new("chown")
            .args(["-R", "nobody"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let child = std::process::Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(program)
            .arg(dir.path().join("pgbouncer.ini"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let pooler = Pooler { dir, port, child };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return pooler;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("pgbouncer did not listen: {}", pooler.log());
    }

    fn url_as(&self, db: &Db, login: &Login) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{}",
            login.user, login.password, self.port, db.name
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Through PgBouncer in transaction pooling (how 10 000 runners reach one server), over
/// two server connections taken in turn: shims ask and park, an operator lists and
/// decides, the re-runs are answered, and the runs, the audit chain and `doctor` read — all
/// through the pooler. A row dropped after its transaction's commit closes its statement
/// outside the transaction, so the close reached the other server connection and the
/// named statement stayed prepared where it ran, failing a later client's statement of
/// that name ("prepared statement already exists"); here nothing fails.
#[test]
fn the_store_works_through_pgbouncer_in_transaction_pooling() {
    let env = TestEnv::new();
    let (db, runner, operator) = initialised(&env);
    let pooler = Pooler::start(&db, &[&runner, &operator]);
    let op = |args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_DB", pooler.url_as(&db, &operator))
            .args(args);
        c.run()
    };
    for round in 0..3 {
        let victim = env.work().join(format!("victim{round}"));
        std::fs::write(&victim, "x").unwrap();
        let name = format!("victim{round}");
        let shim = || {
            let mut c = env.shim();
            c.env("HEADLESS_RUN_DB", pooler.url_as(&db, &runner))
                .args(["--", "rm", "-i", &name]);
            c.run()
        };
        let first = shim();
        first.expect_code(90);
        let listed = op(&["approvals", "--json"]);
        listed.expect_code(0);
        let pending: serde_json::Value = serde_json::from_str(&listed.out()).unwrap();
        let ap = pending.as_array().unwrap()[0]["approval_id"]
            .as_str()
            .unwrap()
            .to_owned();
        op(&["decide", &ap, "yes"]).expect_code(0);
        let again = shim();
        again.expect_code(0);
        assert!(!victim.exists(), "round {round}: {}", again.stderr);
    }
    let runs = op(&["runs", "--json"]);
    runs.expect_code(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.out()).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 6, "{runs}");
    let doctor = op(&["doctor"]);
    assert!(
        doctor.out().contains("audit chain intact"),
        "{}{}",
        doctor.out(),
        doctor.stderr
    );
    assert!(
        !pooler.log().contains("already exists") && !pooler.log().contains("does not exist"),
        "{}",
        pooler.log()
    );
    assert_eq!(
        db.value("SELECT count(DISTINCT chain) FROM hr.events"),
        "2",
        "a chain for each login"
    );
}

/// Two `monitor serve` of one state dir behind a balancer (here: the test picks), on the
/// server store: a run started through one takes its heartbeat and its end
/// through the other. A run's capability came from the memory of the server that started
/// it, so every later write through the other was refused ("not yours"); now both derive
/// it from the state dir's key (`capability.key`, 0600), and a runner token still writes
/// only its own runs.
#[test]
fn two_servers_of_one_state_dir_take_each_others_runs_writes() {
    use crate::serve::{Served, token};
    use std::os::unix::fs::PermissionsExt;
    let server = TestEnv::new();
    let (db, runner, operator) = initialised(&server);
    let ci = token(&server, "ci-7", "runner");
    let other = token(&server, "ci-8", "runner");
    let start = || {
        Served::start_args(
            &server,
            &[("HEADLESS_RUN_DB", &db.url_as(&operator))],
            &["--runner-db", &db.url_as(&runner)],
        )
    };
    let (a, b) = (start(), start());
    let key = server.state().join("capability.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mut run = hr_shared::testing::run(
        &hr_shared::id::new_run_id(),
        "make",
        hr_shared::status::RunStatus::Running,
    );
    run.host = Some("elsewhere".into());
    let id = run.tool_run_id.clone();
    let call = |writes: Vec<hr_shared::store::RunWrite>| {
        serde_json::to_string(&hr_shared::wire::RecordCall {
            run_id: id.clone(),
            writes,
            actor: "ci".into(),
            row_may_exist: false,
        })
        .unwrap()
    };
    let started = call(vec![hr_shared::store::RunWrite::Start(Box::new(run))]);
    let (st, v) = a.json("POST", "/api/v1/runner/record", &ci, Some(&started));
    assert_eq!(st, 200, "{v}");
    let beat = call(vec![hr_shared::store::RunWrite::Touch(
        hr_shared::runs::Touch {
            supervisor_heartbeat_at: Some("2026-11-27T23:00:00.000Z".into()),
            ..Default::default()
        },
    )]);
    let (st, v) = b.json("POST", "/api/v1/runner/record", &ci, Some(&beat));
    assert_eq!(st, 200, "the other server took the heartbeat: {v}");
    assert_eq!(
        db.value(&format!(
            "SELECT supervisor_heartbeat_at FROM hr.tool_runs WHERE tool_run_id = '{id}'"
        )),
        "2026-11-27T23:00:00.000Z"
    );
    let ended = call(vec![hr_shared::store::RunWrite::Status(
        hr_shared::runs::StatusChange {
            exit_code: Some(0),
            ..hr_shared::runs::StatusChange::to(hr_shared::status::RunStatus::Completed, None)
        },
        hr_shared::store::Replace::AnyButCancelled,
    )]);
    // Another token is refused on either server; the run's own ends it on the other.
    let (st, _) = b.json("POST", "/api/v1/runner/record", &other, Some(&ended));
    assert_eq!(st, 403);
    let (st, v) = b.json("POST", "/api/v1/runner/record", &ci, Some(&ended));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        db.value(&format!(
            "SELECT status FROM hr.tool_runs WHERE tool_run_id = '{id}'"
        )),
        "completed"
    );
    a.stop().expect_code(0);
    b.stop().expect_code(0);
}

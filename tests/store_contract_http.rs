//! The store contract suite through the runner API: every case's runner sessions are
//! `HttpRunner`s talking to a real `monitor serve` (the built binary) over loopback, with a
//! runner token; its operator sessions read and decide on the server's SQLite store
//! directly, as `monitor` on the server's host does.
//!
//! ```sh
//! cargo build --workspace && cargo test -p headless-run-e2e --test store_contract_http
//! ```

#[macro_use]
#[path = "../shared/tests/contract/mod.rs"]
mod contract;

use contract::StoreUnderTest;
use hr_shared::paths::StatePaths;
use hr_shared::remote::Remote;
use hr_shared::store::http::HttpRunner;
use hr_shared::store::{self, AdminStore, RunnerStore};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The runner token's name.
const TOKEN_NAME: &str = "contract-runner";
/// Another runner's token: a stranger to the first's runs.
const STRANGER_NAME: &str = "contract-stranger";

/// One token file with the two runner tokens, copied into every case's server (each case
/// has a server of its own): (dir, runner's secret, stranger's secret).
fn tokens() -> &'static (tempfile::TempDir, String, String) {
    static TOKENS: OnceLock<(tempfile::TempDir, String, String)> = OnceLock::new();
    TOKENS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let create = |name: &str| {
            let out = Command::new(headless_run_e2e::bin("monitor"))
                .arg("--state-dir")
                .arg(dir.path())
                .args(["token", "create", name, "--role", "runner"])
                .env_remove("CI")
                .output()
                .expect("monitor token create");
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let token = create(TOKEN_NAME);
        let stranger = create(STRANGER_NAME);
        (dir, token, stranger)
    })
}

struct Http {
    dir: tempfile::TempDir,
    /// The server's state dir (its SQLite store).
    server: StatePaths,
    /// The runner host's state dir (its spool).
    host: StatePaths,
    remote: Remote,
    stranger: Remote,
    child: Child,
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StoreUnderTest for Http {
    fn fresh() -> Self {
        let (token_dir, token, stranger) = tokens();
        let dir = tempfile::tempdir().expect("temp dir");
        let server = StatePaths::at(dir.path().join("server"));
        server.ensure_dirs().expect("server state dir");
        std::fs::copy(
            token_dir.path().join("tokens.json"),
            server.root.join("tokens.json"),
        )
        .expect("token file");
        // The store exists before the server starts, as on a server where runs happened.
        store::runner(&server).connect().expect("create the store");
        let log = dir.path().join("serve.log");
        let child = Command::new(headless_run_e2e::bin("monitor"))
            .arg("--state-dir")
            .arg(&server.root)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env_remove("CI")
            .env_remove("HEADLESS_RUN_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("monitor serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .find_map(|l| l.split("listening on ").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                break addr.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "the server did not start: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Http {
            host: StatePaths::at(dir.path().join("host")),
            remote: Remote {
                url: url.clone(),
                token: token.clone(),
                ca: None,
            },
            stranger: Remote {
                url,
                token: stranger.clone(),
                ca: None,
            },
            server,
            dir,
            child,
        }
    }

    fn runner(&self) -> Box<dyn RunnerStore> {
        Box::new(HttpRunner::to(&self.remote, &self.host).expect("client"))
    }

    fn stranger(&self) -> Box<dyn RunnerStore> {
        Box::new(HttpRunner::to(&self.stranger, &self.host).expect("client"))
    }

    /// A runner's runs are run again on its own machine, never by the server's host.
    fn resumable(&self) -> bool {
        false
    }

    fn operator(&self) -> Box<dyn AdminStore> {
        own_store(&self.server)
    }

    fn absent_operator(&self) -> Box<dyn AdminStore> {
        own_store(&StatePaths::at(self.dir.path().join("never-created")))
    }

    fn replace_with_empty(&self) -> bool {
        false
    }

    /// The host's spool keeps rows, delivered by its next session.
    fn keeps_rows_for_later(&self) -> bool {
        false
    }

    /// A runner says when its approvals expire: a default is never its to plant.
    fn honours_expiry_defaults(&self) -> bool {
        false
    }

    /// Only a person answers a runner's prompts.
    fn takes_runner_policies(&self) -> bool {
        false
    }

    /// The server records its runners' rows as `runner:TOKEN`.
    fn runner_identity(&self) -> String {
        format!("runner:{TOKEN_NAME}")
    }

    fn stored_row(&self, mut row: hr_shared::runs::ToolRun) -> hr_shared::runs::ToolRun {
        hr_shared::store::http::mark_as_runners(TOKEN_NAME, &mut row);
        row.stamped(&self.runner_identity(), None)
    }

    fn stored_fingerprint(&self, fingerprint: &str) -> String {
        hr_shared::store::http::runner_fingerprint(TOKEN_NAME, fingerprint)
    }
}

contract_tests!(http, Http);

/// The store itself (the contract's operator and worker sessions; never a server's API).
fn own_store(paths: &StatePaths) -> Box<dyn AdminStore> {
    match store::local(paths, "the store contract") {
        Ok(store) => store,
        Err(e) => panic!("{e}"),
    }
}

//! A throw-away PostgreSQL cluster for tests (the store contract suite and the end-to-end
//! suite): Debian's `postgresql`, `initdb` + `pg_ctl` as the unprivileged `nobody` (the
//! server refuses root), SCRAM logins over a loopback port, in a temp dir. A cluster lives
//! as long as the test process: a watchdog stops it and removes its dir once the process
//! is gone, however it ends. A missing PostgreSQL fails the test (`.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The superuser (`admin`) password of every test cluster: it listens on loopback only
/// and lives for one test process.
pub const ADMIN_PASSWORD: &str = "admin-pw";

/// A running test cluster.
pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    /// The network namespace it runs in (`None`: this process's).
    pub netns: Option<String>,
    /// The address it listens on (and URLs name).
    pub host: String,
}

/// A PostgreSQL program (`initdb`, `pg_ctl`): Debian keeps them out of `PATH`.
pub fn program(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("`{name}` is not installed: apt-get install postgresql (as .ci/run does)")
    })
}

fn as_nobody(netns: Option<&str>, program: &Path) -> Command {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "runuser"]);
            c
        }
        None => Command::new("runuser"),
    };
    c.args(["-u", "nobody", "--"]).arg(program);
    c
}

fn checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Cluster {
    /// A new cluster of this test process (`name` tells several apart), running, with
    /// `max_connections` slots, on loopback.
    pub fn start(name: &str, max_connections: u32) -> Cluster {
        Cluster::start_in(name, max_connections, None, "127.0.0.1")
    }

    /// Like [`Cluster::start`], in network namespace `netns`, listening on `host` (and
    /// taking SCRAM logins from 10.0.0.0/8 too).
    pub fn start_in(name: &str, max_connections: u32, netns: Option<&str>, host: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("hr-pg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster dir");
        checked(
            Command::new("chown").arg("nobody").arg(&dir),
            "chown the cluster dir",
        );
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, ADMIN_PASSWORD).expect("password file");
        checked(
            Command::new("chown").arg("nobody").arg(&pwfile),
            "chown the password file",
        );
        checked(
            as_nobody(None, &program("initdb"))
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-U", "admin", "-A", "scram-sha-256", "--no-sync"])
                .arg(format!("--pwfile={}", pwfile.display())),
            "initdb",
        );
        let port = free_port();
        std::fs::write(
            dir.join("data/postgresql.auto.conf"),
            format!(
                "listen_addresses = '{host}'\nport = {}\nunix_socket_directories = '{}'\n\
                 max_connections = {max_connections}\nfsync = off\n\
                 log_line_prefix = '%m [%p] %u@%d '\n",
                port,
                dir.display()
            ),
        )
        .expect("server settings");
        if host != "127.0.0.1" {
            let hba = dir.join("data/pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).expect("pg_hba.conf");
            text.push_str("host all all 10.0.0.0/8 scram-sha-256\n");
            std::fs::write(&hba, text).expect("pg_hba.conf");
        }
        let cluster = Cluster {
            dir,
            port,
            netns: netns.map(str::to_owned),
            host: host.to_owned(),
        };
        cluster.up();
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runuser} -u nobody -- {pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; \
             rm -rf {dir}",
            pid = std::process::id(),
            runuser = match &cluster.netns {
                Some(ns) => format!("ip netns exec {ns} runuser"),
                None => "runuser".into(),
            },
            pg_ctl = program("pg_ctl").display(),
            data = cluster.dir.join("data").display(),
            dir = cluster.dir.display(),
        );
        {
            use std::os::unix::process::CommandExt;
            // Outlives this process on purpose: it is what stops the cluster after it.
            #[allow(clippy::zombie_processes)]
            let _watchdog = Command::new("sh")
                .args(["-c", &watchdog])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("start the cluster's watchdog");
        }
        cluster
    }

    /// Starts the server (again).
    pub fn up(&self) {
        checked(
            as_nobody(self.netns.as_deref(), &program("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "60", "start"]),
            "pg_ctl start",
        );
    }

    /// Stops the server at once (as a crash or a cut link looks to its clients).
    pub fn down(&self) {
        checked(
            as_nobody(self.netns.as_deref(), &program("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "immediate", "-w", "stop"]),
            "pg_ctl stop",
        );
    }

    /// A URL of this cluster, over TCP.
    pub fn url(&self, user: &str, password: &str, db: &str) -> String {
        format!(
            "postgres://{user}:{password}@{}:{}/{db}",
            self.host, self.port
        )
    }

    /// A URL as the superuser, over the cluster's socket (which reaches it from any
    /// network namespace).
    pub fn admin_url(&self, db: &str) -> String {
        let dir = self.dir.display().to_string().replace('/', "%2F");
        format!("postgres://admin:{ADMIN_PASSWORD}@{dir}:{}/{db}", self.port)
    }

    /// Runs SQL as the superuser on database `db`.
    pub fn admin_sql(&self, db: &str, sql: &str) {
        let mut c = postgres::Client::connect(&self.admin_url(db), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect as admin to {db}: {e}"));
        c.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A new, empty database (named `t0`, `t1`, … in this process).
    pub fn database(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!("t{}", N.fetch_add(1, Ordering::SeqCst));
        self.admin_sql("postgres", &format!("CREATE DATABASE {name}"));
        name
    }

    /// The server's log.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// A cluster a test owns stops with it (a shared one in a `static` lives until the
/// process ends, when its watchdog stops it).
impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_nobody(self.netns.as_deref(), &program("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

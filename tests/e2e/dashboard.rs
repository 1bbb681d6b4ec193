//! The dashboard, for real: `monitor` runs in tmux (keys by `send-keys`, the screen by
//! `capture-pane`) against a state dir where the real shim waits on `rm -i`'s prompt in
//! wait mode. Skipped, with a message, when tmux is not installed (CI installs it).

use headless_run_e2e::*;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A tmux server of its own (its socket in the test's temp dir), killed when dropped.
pub(crate) struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    pub(crate) fn installed() -> bool {
        Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts `argv` in a detached session of `width`×`height`; the pane stays after the
    /// program exits, so its exit status can be read.
    pub(crate) fn start(env: &TestEnv, width: u16, height: u16, argv: &[String]) -> Tmux {
        let t = Tmux {
            socket: env.path().join("tmux.sock"),
        };
        let (w, h) = (width.to_string(), height.to_string());
        let mut args = vec!["new-session", "-d", "-x", &w, "-y", &h];
        args.extend(argv.iter().map(String::as_str));
        let out = t.tmux(&args);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        t.tmux(&["set-option", "-g", "remain-on-exit", "on"]);
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p"]).stdout).into_owned()
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        let out = self.tmux(&args);
        assert!(out.status.success(), "send-keys {keys:?}: {out:?}");
    }

    /// Polls the screen until `cond` holds; fails the test showing the last screen and
    /// what is stored.
    #[track_caller]
    pub(crate) fn wait_for(
        &self,
        env: &TestEnv,
        what: &str,
        limit: Duration,
        cond: impl Fn(&str) -> bool,
    ) -> String {
        let mut last = String::new();
        let ok = wait_until(limit, || {
            last = self.screen();
            cond(&last)
        });
        if !ok {
            panic!(
                "the dashboard never showed {what} within {limit:?}; screen:\n{last}\nruns: {:#?}\napprovals: {:#?}",
                env.runs(),
                env.approvals()
            );
        }
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The command line that starts `monitor` for this env in a clean environment; a shell
/// writes its exit status to `exit_file` (tmux itself sometimes leaves the pane's process
/// unreaped, so `#{pane_dead_status}` cannot be relied on).
pub(crate) fn monitor_argv(env: &TestEnv, exit_file: &std::path::Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        r#""$@"; echo $? > "$0""#.into(),
        exit_file.display().to_string(),
        "env".into(),
        "-i".into(),
        format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
        "TERM=screen".into(),
        format!("HEADLESS_RUN_HOME={}", env.state().display()),
        format!("XDG_CONFIG_HOME={}", env.path().join("config").display()),
        bin("monitor").display().to_string(),
    ]
}

/// Whether a pending approval is stored (false while there is no database yet).
fn has_pending_approval(env: &TestEnv) -> bool {
    env.approvals().iter().any(|a| a["status"] == "pending")
}

pub(crate) fn current_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("id -un");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The screen line of the run's row (its short id: the last 8 characters).
fn row_of<'a>(screen: &'a str, run_id: &str) -> Option<&'a str> {
    let short = &run_id[run_id.len().saturating_sub(8)..];
    screen.lines().find(|l| l.contains(short))
}

#[test]
fn approve_a_waiting_prompt_from_the_dashboard() {
    if !Tmux::installed() {
        eprintln!("skipping the dashboard end-to-end test: tmux is not installed");
        return;
    }
    let env = TestEnv::new();
    let file = env.work().join("FILE");
    std::fs::write(&file, "x").unwrap();

    // Opened before anything ran: no database yet is a message, not a crash.
    let exit_file = env.path().join("monitor.exit");
    let tmux = Tmux::start(&env, 120, 40, &monitor_argv(&env, &exit_file));
    tmux.wait_for(&env, "the missing database", Duration::from_secs(20), |s| {
        s.contains("Cannot read the database")
    });

    let shim = env
        .shim()
        .args(["--on-prompt", "wait", "--", "rm", "-i", "FILE"])
        .timeout(Duration::from_secs(60))
        .spawn();
    let pending = wait_for_state(Duration::from_secs(20), || has_pending_approval(&env));
    assert!(
        pending,
        "no pending approval; shim stderr: {}",
        shim.stderr_now()
    );
    let run_id = s(&env.only_run(), "tool_run_id").to_owned();

    // The approval appears, with its run waiting for it.
    let screen = tmux.wait_for(&env, "the pending approval", Duration::from_secs(10), |s| {
        s.contains("Pending approvals (1)")
            && s.contains("rm: remove regular file 'FILE'?")
            && row_of(s, &run_id).is_some_and(|r| r.contains("waiting_approval"))
    });
    assert!(screen.contains("ALERTS"), "{screen}");
    // `1` on the selected (newest) run answers its pending approval with its first option,
    // yes (`a` would take rm's own default, no).
    tmux.keys(&["1"]);
    let out = shim.wait();
    out.expect_code(0);
    assert!(!file.exists(), "rm did not remove the file");

    let screen = tmux.wait_for(&env, "the run completed", Duration::from_secs(10), |s| {
        row_of(s, &run_id).is_some_and(|r| r.contains("completed"))
            && s.contains("Pending approvals (0)")
    });
    assert!(screen.contains("approved `yes`"), "{screen}");
    let ap = env.approvals().remove(0);
    assert_eq!(s(&ap, "status"), "approved");
    assert_eq!(s(&ap, "chosen_value"), "yes");
    assert_eq!(s(&ap, "decision_channel"), "tui");
    assert_eq!(s(&ap, "decided_by"), current_user());

    // Resized to 80×24 it still shows the alerts line, the run and the panes.
    tmux.tmux(&["resize-window", "-x", "80", "-y", "24"]);
    tmux.wait_for(
        &env,
        "the dashboard at 80×24",
        Duration::from_secs(10),
        |s| {
            s.lines().count() <= 24
                && s.lines().next().is_some_and(|l| l.contains("all calm"))
                && row_of(s, &run_id).is_some_and(|r| r.contains("completed"))
                && s.contains("Log (UTC)")
        },
    );

    // Enter opens the run: its output tail, as rm showed it.
    tmux.keys(&["Enter"]);
    tmux.wait_for(&env, "the run's detail", Duration::from_secs(10), |s| {
        s.contains(&format!("Run {run_id}")) && s.contains("remove regular file 'FILE'? y")
    });

    // q ends it cleanly.
    tmux.keys(&["q"]);
    let exited = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&exit_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let status = std::fs::read_to_string(&exit_file).unwrap_or_default();
    assert!(
        exited && status.trim() == "0",
        "monitor did not exit 0 on q: {status:?}; screen:\n{}",
        tmux.screen()
    );
}

//! Concurrent load at a CI-friendly size, as `scripts/stress` runs it at 64 and 256: 24
//! shims against one state dir — heartbeats, a flood of output, exit codes 0/1/7/255,
//! prompts in exit mode (resumed by the worker) and in wait mode — while `monitor runs
//! --json` refreshes like a dashboard, a decider decides every pending approval with
//! `monitor decide AP-… y`, and `monitor worker --interval 200ms` resumes. Then: no
//! warning or lock error in any stderr, no lost row, no stuck row, every exit code and
//! status right, every approval approved and consumed, every exit-mode prompt resumed
//! exactly once, the audit chain intact.

use headless_run_e2e::*;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SHIMS: usize = 24;
const FLOOD_LINES: usize = 5000;
const HEARTBEATS: usize = 6;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Heartbeat,
    Flood,
    Exit(i32),
    PromptExit,
    PromptWait,
}

use Behaviour::*;

/// The rotation scripts/stress uses.
const ROTATION: [Behaviour; 12] = [
    Heartbeat,
    Flood,
    Exit(0),
    PromptExit,
    Exit(1),
    Heartbeat,
    PromptWait,
    Exit(7),
    Flood,
    Exit(255),
    PromptExit,
    PromptWait,
];

impl Behaviour {
    /// The tool's argv; the tag makes every command (and so its request fingerprint)
    /// unique, so that a resume can only find its own decision.
    fn argv(self, tag: &str, python: bool) -> Vec<String> {
        let sh = |script: &str, args: &[&str]| {
            let mut v = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
            v.extend(args.iter().map(|a| a.to_string()));
            v
        };
        match self {
            Heartbeat => sh(
                &format!(
                    r#"n=0; while [ $n -lt {HEARTBEATS} ]; do echo "{{\"event\":\"heartbeat\",\"token\":\"$HEADLESS_RUN_EVENT_TOKEN\"}}"; sleep 0.3; n=$((n+1)); done; echo "$0 done""#
                ),
                &[tag],
            ),
            Flood => sh(&format!(r#"seq 1 {FLOOD_LINES}; echo "$0 done""#), &[tag]),
            Exit(code) => sh(
                r#"echo "$0 exits $1"; exit "$1""#,
                &[tag, &code.to_string()],
            ),
            PromptExit | PromptWait if python => vec![
                "python3".into(),
                tool().to_string_lossy().into_owned(),
                "ask".into(),
                format!("Deploy {tag}?"),
                "[y/N] ".into(),
            ],
            PromptExit | PromptWait => sh(
                r#"printf "Deploy %s? [y/N] " "$0"; read a; echo "got $a"; [ "$a" = y ]"#,
                &[tag],
            ),
        }
    }

    fn expected_code(self) -> i32 {
        match self {
            Exit(code) => code,
            PromptExit => 90,
            _ => 0,
        }
    }
}

/// What must never appear on a stderr under load.
fn bad_stderr(text: &str) -> Option<&str> {
    text.lines().find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("warning:") || l.contains("database is locked") || l.contains("panicked")
    })
}

/// Sets the flag when dropped, so the monitor loops stop even when the test fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `monitor ARGS` and returns its stdout, or why it is a failure under load.
fn monitor_ok(env: &TestEnv, args: &[&str]) -> Result<String, String> {
    let out = env
        .monitor()
        .args(args)
        .timeout(Duration::from_secs(60))
        .run();
    if out.code != Some(0) || !out.stderr.trim().is_empty() {
        return Err(format!(
            "monitor {} exited {:?}: {}",
            args.join(" "),
            out.code,
            out.stderr.trim()
        ));
    }
    Ok(out.out())
}

fn wait_for_db(env: &TestEnv, stop: &AtomicBool) -> bool {
    while !env.state().join("state.db").exists() {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// A dashboard: `monitor runs --json` every 250 ms. Returns its failures.
fn dashboard(env: &TestEnv, stop: &AtomicBool) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut refreshes = 0;
    if !wait_for_db(env, stop) {
        return (0, failures);
    }
    while !stop.load(Ordering::Relaxed) {
        match monitor_ok(env, &["runs", "--json"]) {
            Ok(out) => {
                refreshes += 1;
                if !serde_json::from_str::<Value>(&out).is_ok_and(|v| v.is_array()) {
                    failures.push(format!("monitor runs --json printed {out:?}"));
                }
            }
            Err(e) => failures.push(e),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    (refreshes, failures)
}

/// An operator: decides every pending approval with `y`. Returns what it decided and its
/// failures.
fn decider(env: &TestEnv, stop: &AtomicBool) -> (HashSet<String>, Vec<String>) {
    let mut decided = HashSet::new();
    let mut failures = Vec::new();
    if !wait_for_db(env, stop) {
        return (decided, failures);
    }
    while !stop.load(Ordering::Relaxed) {
        match monitor_ok(env, &["approvals", "--json", "--limit", "0"]) {
            Ok(out) => {
                let pending: Vec<Map<String, Value>> =
                    serde_json::from_str(&out).unwrap_or_default();
                for ap in pending {
                    let Some(id) = ap.get("approval_id").and_then(Value::as_str) else {
                        failures.push(format!("approval without an id: {ap:?}"));
                        continue;
                    };
                    if decided.contains(id) {
                        continue;
                    }
                    match monitor_ok(env, &["decide", id, "y"]) {
                        Ok(_) => {
                            decided.insert(id.to_owned());
                        }
                        Err(e) => failures.push(e),
                    }
                }
            }
            Err(e) => failures.push(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (decided, failures)
}

#[test]
fn concurrent_shims_with_a_dashboard_a_decider_and_a_worker_lose_nothing() {
    let env = TestEnv::new();
    let started = Instant::now();
    let worker = env
        .monitor()
        .args(["worker", "--interval", "200ms"])
        .timeout(Duration::from_secs(180))
        .spawn();
    let stop = AtomicBool::new(false);
    let mut problems: Vec<String> = Vec::new();

    let (outcomes, (refreshes, dash_failures), (decided, decide_failures)) =
        std::thread::scope(|scope| {
            let _stop = StopOnDrop(&stop);
            let dash = scope.spawn(|| dashboard(&env, &stop));
            let dec = scope.spawn(|| decider(&env, &stop));
            let mut prompts = 0;
            let shims: Vec<(usize, Behaviour, String, Running)> = (0..SHIMS)
                .map(|i| {
                    let b = ROTATION[i % ROTATION.len()];
                    if matches!(b, PromptExit | PromptWait) {
                        prompts += 1;
                    }
                    let id = format!("stress-{i:02}");
                    let mut cmd = env.shim();
                    cmd.args(["--execution-id", &id]);
                    if b == PromptWait {
                        cmd.args(["--on-prompt", "wait"]);
                    }
                    cmd.arg("--")
                        .args(b.argv(&format!("s{i}"), prompts % 4 == 0))
                        .timeout(Duration::from_secs(120));
                    (i, b, id, cmd.spawn())
                })
                .collect();
            let outcomes: Vec<(usize, Behaviour, String, Outcome)> = shims
                .into_iter()
                .map(|(i, b, id, running)| (i, b, id, running.wait()))
                .collect();
            // Every shim has exited; the exit-mode prompts stay waiting_approval until the
            // worker's re-run of each has answered it.
            let settled = wait_for_state(Duration::from_secs(90), || {
                env.runs().iter().all(|r| {
                    !matches!(
                        r["status"].as_str(),
                        Some("queued" | "running" | "stalled" | "waiting_approval")
                    )
                })
            });
            stop.store(true, Ordering::Relaxed);
            let dash = dash.join().expect("dashboard thread");
            let dec = dec.join().expect("decider thread");
            if !settled {
                problems.push("runs still live 90 s after every shim exited".into());
            }
            (outcomes, dash, dec)
        });
    worker.signal(libc::SIGTERM);
    let worker = worker.wait();
    let elapsed = started.elapsed();

    problems.extend(dash_failures.into_iter().map(|f| format!("dashboard: {f}")));
    problems.extend(decide_failures.into_iter().map(|f| format!("decider: {f}")));
    if worker.code != Some(0) {
        problems.push(format!("monitor worker exited {:?}", worker.code));
    }
    if let Some(line) = bad_stderr(&worker.stderr) {
        problems.push(format!("monitor worker: {line}"));
    }

    // The spool is counted before the state is read: the monitor that reads it replays what
    // is left there.
    let spooled = std::fs::read_dir(env.state().join("spool"))
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    if spooled > 0 {
        problems.push(format!("{spooled} run rows left in the spool"));
    }
    let runs = env.runs();
    let approvals = env.approvals();
    let mut by_execution: HashMap<&str, Vec<&Map<String, Value>>> = HashMap::new();
    for r in &runs {
        by_execution
            .entry(r["execution_id"].as_str().unwrap_or(""))
            .or_default()
            .push(r);
    }
    for (i, b, id, out) in &outcomes {
        let what = format!("{id} ({b:?})");
        if let Some(line) = bad_stderr(&out.stderr) {
            problems.push(format!("{what} stderr: {line}"));
        }
        if out.code != Some(b.expected_code()) {
            problems.push(format!(
                "{what} exited {:?}, expected {}; {}",
                out.code,
                b.expected_code(),
                out.context()
            ));
        }
        let rows = by_execution.get(id.as_str()).cloned().unwrap_or_default();
        let (first, resumes): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|r| r["resumed_from"].is_null());
        let [row] = first[..] else {
            problems.push(format!("{what}: {} run rows, expected 1", first.len()));
            continue;
        };
        let run_id = s(row, "tool_run_id");
        if row["exit_code"].as_i64() != Some(i64::from(b.expected_code())) {
            problems.push(format!("{what}: row exit_code {}", row["exit_code"]));
        }
        let want_status = if b.expected_code() == 0 || *b == PromptExit {
            "completed"
        } else {
            "failed"
        };
        if row["status"] != want_status {
            problems.push(format!(
                "{what}: row {} ({}), expected {want_status}",
                row["status"], row["reason"]
            ));
        }
        let want_resumes = usize::from(*b == PromptExit);
        if resumes.len() != want_resumes {
            problems.push(format!("{what}: resumed {} times", resumes.len()));
        }
        for r in &resumes {
            if r["resumed_from"] != run_id || r["status"] != "completed" || r["exit_code"] != 0 {
                problems.push(format!("{what}: resume {r:?}"));
            } else if !String::from_utf8_lossy(&env.run_log(s(r, "tool_run_id"))).contains("got y")
            {
                problems.push(format!("{what}: the resume never got its answer"));
            }
        }
        let aps: Vec<_> = approvals
            .iter()
            .filter(|a| a["tool_run_id"] == run_id)
            .collect();
        match b {
            PromptExit | PromptWait => match aps[..] {
                [a] if a["status"] == "approved"
                    && a["chosen_value"] == "yes"
                    && !a["consumed_at"].is_null()
                    && decided.contains(s(a, "approval_id")) => {}
                _ => problems.push(format!("{what}: approvals {aps:#?}")),
            },
            _ if !aps.is_empty() => problems.push(format!("{what}: approvals {aps:#?}")),
            _ => {}
        }
        match b {
            Flood => {
                let mut want: String = (1..=FLOOD_LINES).map(|n| format!("{n}\n")).collect();
                want.push_str(&format!("s{i} done\n"));
                if out.stdout != want.as_bytes() {
                    problems.push(format!(
                        "{what}: output differs: {} bytes, expected {}",
                        out.stdout.len(),
                        want.len()
                    ));
                }
            }
            Heartbeat => {
                if row["last_heartbeat_at"].is_null() {
                    problems.push(format!("{what}: no heartbeat recorded"));
                }
                if out
                    .out()
                    .matches(r#"{"event":"heartbeat","token":""#)
                    .count()
                    != HEARTBEATS
                {
                    problems.push(format!("{what}: heartbeats not passed through"));
                }
            }
            PromptWait if !out.out().contains("got y") => {
                problems.push(format!("{what}: never got its answer: {}", out.out()));
            }
            _ => {}
        }
    }
    let live: Vec<_> = runs
        .iter()
        .filter(|r| {
            matches!(
                r["status"].as_str(),
                Some("queued" | "running" | "stalled" | "waiting_approval")
            )
        })
        .collect();
    if !live.is_empty() {
        problems.push(format!("stuck rows: {live:#?}"));
    }
    let doctor = env.monitor().arg("doctor").run();
    if !doctor
        .out()
        .lines()
        .any(|l| l.starts_with("ok") && l.contains("audit chain intact"))
    {
        problems.push(format!("audit chain: {}", doctor.context()));
    }
    assert!(refreshes > 0, "the dashboard never refreshed");
    assert!(
        problems.is_empty(),
        "{} problems under load ({elapsed:?}):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

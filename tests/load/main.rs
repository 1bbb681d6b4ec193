//! `hr-load`: plays the runner side of the protocol for many live runs at once, through the
//! same store code a shim uses (`hr_shared::store::runner`: PostgreSQL when
//! `HEADLESS_RUN_DB` names a server, the runner API of `monitor serve` when
//! `HEADLESS_RUN_SERVER` does), at the rate that many shims write:
//!
//! - a run starts (its row, in one batch with its pid, as a shim's first batch);
//! - every 3 s it writes its supervisor's heartbeat, with an output mark when it printed;
//! - now and then one asks a prompt (exit mode: it parks with exit 90, pending);
//! - `--waiters` of them ask and wait for the decision as a wait-mode shim does (the same
//!   watcher: a session of its own, the store's doorbell, the change mark), and print
//!   `SEEN <approval> <unix time>` when they see it, for whoever decides to time;
//! - it ends (completed, exit 0) after its length, and a new run takes its place.
//!
//! Used by `scripts/bench scale`; it prints `ASKED`/`SEEN` lines while it runs and one JSON
//! report at the end (writes by kind, their latency, how late the heartbeats were, errors).

use hr_shared::approvals::PromptKind;
use hr_shared::config::OnExpire;
use hr_shared::event::ApprovalOption;
use hr_shared::paths::StatePaths;
use hr_shared::prompt::Prompt;
use hr_shared::rules::LocalHost;
use hr_shared::runs::{StatusChange, ToolRun, Touch};
use hr_shared::status::RunStatus;
use hr_shared::store::watch::{Watched, Watcher};
use hr_shared::store::{
    self, Asker, PromptRequest, PromptResolution, Replace, RunWrite, RunnerStore,
};
use hr_shared::{fingerprint, id, time};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const HELP: &str = "\
hr-load: plays N live headless-run shims against the store the environment names

usage: hr-load [--runs N] [--seconds S] [--ramp S] [--run-seconds S] [--prompts-per-s P]
               [--waiters W] [--threads T] [--tag TEXT]

  --runs N           live runs to keep (default 1000)
  --seconds S        how long to measure once all runs are up (default 60)
  --ramp S           seconds over which the runs start (default 20)
  --run-seconds S    a run's mean length; each lasts 0.5–1.5 of it, then a new one starts
                     (default 120)
  --prompts-per-s P  prompts asked (exit mode, the run parks) a second, in all (default 1)
  --waiters W        runs that ask and wait for a decision, each a process of its own
                     as a wait-mode shim is, printing `ASKED <approval>` and
                     `SEEN <approval> <unix time>` (default 0)
  --threads T        threads that write (default 64)
  --tag TEXT         put in every run's command line, to tell runs apart (default load)

The store: HEADLESS_RUN_DB=postgres://… or HEADLESS_RUN_SERVER + HEADLESS_RUN_TOKEN, as for
headless-run. Prints one JSON report on stdout at the end.";

struct Args {
    runs: usize,
    seconds: f64,
    ramp: f64,
    run_seconds: f64,
    prompts_per_s: f64,
    waiters: usize,
    threads: usize,
    tag: String,
    /// Be one waiting runner (slot N), once, and exit.
    wait_once: Option<usize>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        runs: 1000,
        seconds: 60.0,
        ramp: 20.0,
        run_seconds: 120.0,
        prompts_per_s: 1.0,
        waiters: 0,
        threads: 64,
        tag: "load".into(),
        wait_once: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{HELP}");
            std::process::exit(0);
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--wait-once" => a.wait_once = Some(num(&value)? as usize),
            "--runs" => a.runs = num(&value)? as usize,
            "--seconds" => a.seconds = num(&value)?,
            "--ramp" => a.ramp = num(&value)?,
            "--run-seconds" => a.run_seconds = num(&value)?,
            "--prompts-per-s" => a.prompts_per_s = num(&value)?,
            "--waiters" => a.waiters = num(&value)? as usize,
            "--threads" => a.threads = (num(&value)? as usize).max(1),
            "--tag" => a.tag = value,
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
    }
    if a.runs == 0 || a.seconds <= 0.0 || a.run_seconds <= 0.0 || a.ramp < 0.0 {
        return Err("--runs, --seconds and --run-seconds must be above 0".into());
    }
    Ok(a)
}

/// Latencies (µs) and counts of one kind of write.
#[derive(Default)]
struct Kind {
    lat_us: Vec<u64>,
    errors: u64,
    last_error: Option<String>,
}

#[derive(Default)]
struct Stats {
    kinds: BTreeMap<&'static str, Kind>,
    /// How late each heartbeat was written after it was due (µs), in the measured window.
    beat_late_us: Vec<u64>,
}

struct Shared {
    stats: Mutex<Stats>,
    /// The measured window: (from, to).
    window: (Instant, Instant),
    stop: AtomicBool,
}

impl Shared {
    fn note(&self, kind: &'static str, started: Instant, out: Result<(), String>) {
        let now = Instant::now();
        if started < self.window.0 || started > self.window.1 {
            return;
        }
        let mut s = self.stats.lock().unwrap();
        let k = s.kinds.entry(kind).or_default();
        match out {
            Ok(()) => k
                .lat_us
                .push(now.duration_since(started).as_micros() as u64),
            Err(e) => {
                k.errors += 1;
                k.last_error = Some(e);
            }
        }
    }
}

/// One simulated shim.
struct Sim {
    store: Box<dyn RunnerStore>,
    run: ToolRun,
    asker: Asker,
    ends_at: Instant,
    printing: bool,
    /// Writes that failed, sent again with the next batch.
    kept: Vec<RunWrite>,
}

enum Due {
    Start,
    Beat,
}

fn rng(seed: &mut u64) -> f64 {
    // xorshift64*: plenty for spreading times.
    *seed ^= *seed >> 12;
    *seed ^= *seed << 25;
    *seed ^= *seed >> 27;
    (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

fn new_run(args: &Args, paths: &StatePaths, slot: usize, seed: &mut u64) -> Sim {
    let tool = "load-tool".to_owned();
    let argv = vec![tool.clone(), args.tag.clone(), slot.to_string()];
    let cwd = "/tmp".to_owned();
    let mut run = hr_shared::testing::run(&id::new_run_id(), &tool, RunStatus::Running);
    run.execution_id = Some(id::new_execution_id());
    run.argv_json = argv.clone();
    run.cwd = Some(cwd.clone());
    run.pid = None;
    run.shim_pid = Some(i64::from(std::process::id()));
    // This process is each run's shim and tool, alive, so that a host's worker leaves
    // the runs alone.
    run.shim_start_time =
        hr_shared::proc::read_stat(std::process::id() as i32).map(|s| s.start_time as i64);
    run.host = Some(hr_shared::proc::hostname());
    run.supervisor_heartbeat_at = Some(time::now_rfc3339());
    let asker = Asker {
        tool_run_id: run.tool_run_id.clone(),
        tool: tool.clone(),
        execution_id: run.execution_id.clone().unwrap_or_default(),
        request_fingerprint: fingerprint::request(&tool, &argv, &cwd),
        argv,
        cwd,
        tool_digest: None,
        actor: "load".into(),
        review: Default::default(),
    };
    let length = args.run_seconds * (0.5 + rng(seed));
    Sim {
        store: store::runner(paths),
        run,
        asker,
        ends_at: Instant::now() + Duration::from_secs_f64(length),
        printing: rng(seed) < 0.5,
        kept: Vec::new(),
    }
}

fn yes_no(tool: &str, slot: usize) -> PromptRequest {
    let line = format!("Apply change {slot}? [y/N]");
    let opt = |v: &str, l: &str| ApprovalOption {
        value: v.into(),
        label: l.into(),
        keys: Some(format!("{v}\r")),
    };
    PromptRequest {
        prompt: Prompt {
            kind: PromptKind::Confirm,
            secret: false,
            rule: "generic:yes-no".into(),
            question: line.clone(),
            prompt_line: line.clone(),
            context: format!("$ {tool}\n{line}"),
            options: vec![opt("y", "Yes"), opt("n", "No")],
            default: Some("n".into()),
            allows_text: false,
            alternative: None,
            select: None,
        },
        prompt_fingerprint: fingerprint::prompt(tool, &line),
        policies: Vec::new(),
        ttl: None,
        on_expire: OnExpire::Reject,
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Writes a batch as a shim's store thread does: what failed before goes again first.
fn record(sim: &mut Sim, writes: &[RunWrite]) -> Result<(), String> {
    let id = sim.run.tool_run_id.clone();
    let mut batch = std::mem::take(&mut sim.kept);
    batch.extend_from_slice(writes);
    let out = sim
        .store
        .record(&id, &batch, "load", false)
        .map(|_| ())
        .map_err(err);
    if out.is_err() {
        sim.kept = batch;
    }
    out
}

fn status(status: RunStatus, exit: i32, finished: bool) -> RunWrite {
    RunWrite::Status(
        StatusChange {
            status,
            reason: None,
            exit_code: Some(exit),
            finished,
            error: None,
            at: Some(time::now_rfc3339()),
        },
        Replace::AnyButCancelled,
    )
}

/// One writer thread: its share of the slots, each a run after run.
fn writer(args: Arc<Args>, paths: StatePaths, shared: Arc<Shared>, slots: Vec<usize>, t0: Instant) {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (slots.first().copied().unwrap_or(0) as u64 + 1);
    let mut sims: BTreeMap<usize, Sim> = BTreeMap::new();
    let mut due: BinaryHeap<Reverse<(Instant, usize, u8)>> = BinaryHeap::new();
    for &slot in &slots {
        let at = t0 + Duration::from_secs_f64(args.ramp * slot as f64 / args.runs as f64);
        due.push(Reverse((at, slot, 0)));
    }
    let host = LocalHost::new();
    let prompt_share = args.prompts_per_s / args.runs as f64 * 3.0;
    while let Some(Reverse((at, slot, what))) = due.pop() {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let what = if what == 0 { Due::Start } else { Due::Beat };
        match what {
            Due::Start => {
                let mut sim = new_run(&args, &paths, slot, &mut seed);
                // A shim connects first (to warn early), then writes its first batch.
                let started = Instant::now();
                let out = sim.store.connect().map_err(err);
                shared.note("connect", started, out);
                let started = Instant::now();
                let row = Box::new(sim.run.clone());
                let out = record(
                    &mut sim,
                    &[
                        RunWrite::Start(row),
                        RunWrite::Pid(std::process::id() as i32),
                    ],
                );
                shared.note("start", started, out);
                sims.insert(slot, sim);
                due.push(Reverse((Instant::now() + store_beat(), slot, 1)));
            }
            Due::Beat => {
                let Some(sim) = sims.get_mut(&slot) else {
                    continue;
                };
                let late = Instant::now().saturating_duration_since(at);
                if at >= shared.window.0 && at <= shared.window.1 {
                    shared
                        .stats
                        .lock()
                        .unwrap()
                        .beat_late_us
                        .push(late.as_micros() as u64);
                }
                if Instant::now() >= sim.ends_at {
                    let started = Instant::now();
                    let out = record(sim, &[status(RunStatus::Completed, 0, true)]);
                    shared.note("end", started, out);
                    sims.remove(&slot);
                    due.push(Reverse((Instant::now(), slot, 0)));
                    continue;
                }
                let stamp = time::now_rfc3339();
                let touch = Touch {
                    supervisor_heartbeat_at: Some(stamp.clone()),
                    last_output_at: sim.printing.then_some(stamp),
                    ..Touch::default()
                };
                let started = Instant::now();
                let out = record(sim, &[RunWrite::Touch(touch)]);
                shared.note("heartbeat", started, out);
                // Now and then a run asks, in exit mode: pending, then it parks (exit 90).
                if rng(&mut seed) < prompt_share {
                    let req = yes_no(&sim.asker.tool, slot);
                    let started = Instant::now();
                    let out = sim
                        .store
                        .resolve_prompt(&sim.asker, &req, &host)
                        .map(|_| ())
                        .map_err(err);
                    shared.note("prompt", started, out);
                    let started = Instant::now();
                    let out = record(sim, &[status(RunStatus::WaitingApproval, 90, false)]);
                    shared.note("park", started, out);
                    sims.remove(&slot);
                    due.push(Reverse((Instant::now(), slot, 0)));
                    continue;
                }
                due.push(Reverse((at + store_beat(), slot, 1)));
            }
        }
    }
}

fn store_beat() -> Duration {
    hr_shared::runs::SUPERVISOR_HEARTBEAT
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A wait-mode shim, again and again: asks, watches as a shim watches, reports when it
/// sees the decision, types it (consumes it) and ends; then the next run.
/// A waiting runner is a process of its own, as a wait-mode shim is (a watcher's second
/// session finds its run as the one run of its process): this thread starts
/// `hr-load --wait-once SLOT` again and again, passing on what each prints.
fn waiter_processes(args: Arc<Args>, shared: Arc<Shared>, slot: usize) {
    use std::io::BufRead;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let child = std::process::Command::new(&exe)
            .args(["--wait-once", &slot.to_string(), "--tag", &args.tag])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            shared.note(
                "waiter-start",
                Instant::now(),
                Err("cannot start a waiter".into()),
            );
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        if let Some(out) = child.stdout.take() {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{line}");
                let _ = stdout.flush();
            }
        }
        let _ = child.wait();
    }
}

fn waiter(args: Arc<Args>, paths: StatePaths, shared: Arc<Shared>, slot: usize, once: bool) {
    let mut seed = 0xD1B5_4A32_D192_ED03u64 ^ (slot as u64 + 1);
    let host = LocalHost::new();
    let out = Arc::new(Mutex::new(std::io::stdout()));
    while !shared.stop.load(Ordering::Relaxed) {
        let mut sim = new_run(&args, &paths, 1_000_000 + slot, &mut seed);
        let row = Box::new(sim.run.clone());
        if let Err(e) = record(
            &mut sim,
            &[
                RunWrite::Start(row),
                RunWrite::Pid(std::process::id() as i32),
            ],
        ) {
            shared.note("waiter-start", Instant::now(), Err(e));
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        let req = yes_no(&sim.asker.tool, 1_000_000 + slot);
        let approval = match sim.store.resolve_prompt(&sim.asker, &req, &host) {
            Ok(done) => match done.value {
                PromptResolution::Pending { approval, .. } => approval,
                _ => continue,
            },
            Err(e) => {
                shared.note("waiter-prompt", Instant::now(), Err(err(e)));
                continue;
            }
        };
        let _ = writeln!(out.lock().unwrap(), "ASKED {}", approval.approval_id);
        let _ = out.lock().unwrap().flush();
        let watcher = Watcher::start(
            store::runner_watch(&paths),
            paths.combined_log(),
            &approval,
            store::doorbell::for_store(&paths),
        );
        let mut beat = Instant::now() + store_beat();
        let decided = loop {
            if shared.stop.load(Ordering::Relaxed) {
                break None;
            }
            match watcher.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Watched::Decided(a)) => break Some(a),
                Err(_) if Instant::now() >= beat => {
                    beat += store_beat();
                    let touch = Touch {
                        supervisor_heartbeat_at: Some(time::now_rfc3339()),
                        ..Touch::default()
                    };
                    let started = Instant::now();
                    let out = record(&mut sim, &[RunWrite::Touch(touch)]);
                    shared.note("heartbeat", started, out);
                }
                Err(_) => {}
            }
        };
        let Some(a) = decided else { break };
        let _ = writeln!(
            out.lock().unwrap(),
            "SEEN {} {:.6}",
            a.approval_id,
            unix_now()
        );
        let _ = out.lock().unwrap().flush();
        let started = Instant::now();
        let out_w = record(
            &mut sim,
            &[
                RunWrite::Consume(a.approval_id.clone()),
                status(RunStatus::Completed, 0, true),
            ],
        );
        shared.note("waiter-end", started, out_w);
        if once {
            break;
        }
    }
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            let want = libc::rlimit {
                rlim_cur: 262_144,
                rlim_max: 262_144,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) != 0 {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn main() {
    let args = match parse() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("hr-load: {e}");
            std::process::exit(2);
        }
    };
    let paths = match StatePaths::resolve(None) {
        Ok(p) if !p.is_embedded() => p,
        Ok(_) => {
            eprintln!(
                "hr-load: name a server store: HEADLESS_RUN_DB=postgres://… or HEADLESS_RUN_SERVER"
            );
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("hr-load: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = paths.ensure_dirs() {
        eprintln!("hr-load: {}: {e}", paths.root.display());
        std::process::exit(2);
    }
    raise_fd_limit();
    if let Some(slot) = args.wait_once {
        // Dies with the hr-load that started it.
        // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let now = Instant::now();
        let shared = Arc::new(Shared {
            stats: Mutex::new(Stats::default()),
            window: (now, now + Duration::from_secs(86_400)),
            stop: AtomicBool::new(false),
        });
        waiter(args.clone(), paths, shared, slot, true);
        return;
    }
    let t0 = Instant::now() + Duration::from_millis(200);
    // The window starts once every run is up and has beaten once.
    let from = t0 + Duration::from_secs_f64(args.ramp) + store_beat();
    let to = from + Duration::from_secs_f64(args.seconds);
    let shared = Arc::new(Shared {
        stats: Mutex::new(Stats::default()),
        window: (from, to),
        stop: AtomicBool::new(false),
    });
    let mut handles = Vec::new();
    for t in 0..args.threads {
        let slots: Vec<usize> = (t..args.runs).step_by(args.threads).collect();
        let (a, p, s) = (args.clone(), paths.clone(), shared.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("writer-{t}"))
                .stack_size(256 * 1024)
                .spawn(move || writer(a, p, s, slots, t0))
                .expect("a writer thread"),
        );
    }
    for w in 0..args.waiters {
        let (a, s) = (args.clone(), shared.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("waiter-{w}"))
                .spawn(move || {
                    std::thread::sleep(from.saturating_duration_since(Instant::now()));
                    waiter_processes(a, s, w)
                })
                .expect("a waiter thread"),
        );
    }
    std::thread::sleep(to.saturating_duration_since(Instant::now()));
    shared.stop.store(true, Ordering::Relaxed);
    let measured = args.seconds;
    let stats = shared.stats.lock().unwrap();
    let mut kinds = serde_json::Map::new();
    let mut writes = 0usize;
    let mut errors = 0u64;
    for (name, k) in &stats.kinds {
        let mut lat = k.lat_us.clone();
        lat.sort_unstable();
        writes += lat.len();
        errors += k.errors;
        kinds.insert(
            (*name).into(),
            serde_json::json!({
                "ok": lat.len(),
                "errors": k.errors,
                "per_s": lat.len() as f64 / measured,
                "p50_ms": pct(&lat, 0.50),
                "p95_ms": pct(&lat, 0.95),
                "p99_ms": pct(&lat, 0.99),
                "last_error": k.last_error,
            }),
        );
    }
    let mut late = stats.beat_late_us.clone();
    late.sort_unstable();
    let report = serde_json::json!({
        "runs": args.runs,
        "waiters": args.waiters,
        "threads": args.threads,
        "seconds": measured,
        "writes": writes,
        "writes_per_s": writes as f64 / measured,
        "errors": errors,
        "heartbeat_late_p50_ms": pct(&late, 0.50),
        "heartbeat_late_p95_ms": pct(&late, 0.95),
        "heartbeat_late_p99_ms": pct(&late, 0.99),
        "kinds": kinds,
    });
    println!("REPORT {report}");
    let _ = std::io::stdout().flush();
    // The writer threads may sit in a slow write; the report is out, so end here.
    std::process::exit(0);
}

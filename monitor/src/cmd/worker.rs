//! `monitor worker [--once] [--interval DUR]`: the resume worker loop (see `crate::worker`).

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::worker::{Relay, Worker};
use crate::{locate, stop};
use hr_shared::db::StoreError;
use std::time::Duration;

const AFTER_HELP: &str = "\
Every pass:
  * reconciles: a running/stalled/waiting run whose headless-run is gone becomes failed
    (`supervisor vanished`); pending approvals past expires_at expire;
  * a run parked on an approval (it exited 90) whose approval was rejected, or expired
    without a default, becomes failed with that reason;
  * one whose approval was approved (or expired with its default) is claimed (two workers
    never resume the same run) and re-run: its stored command, in its stored directory,
    through headless-run (the one beside monitor, else on PATH) with HEADLESS=1,
    AUTO_APPROVAL=<value>, HEADLESS_RUN_APPROVAL_ID=<AP-…> and
    HEADLESS_RUN_RESUMED_FROM=<TR-…>. The re-run is that run's resume (a decision answers
    no other run): it answers the prompt itself — and every earlier prompt of the chain
    from the decisions made for them — and is linked by resumed_from; its output goes to
    its own run log. A decision a re-run by hand already took up is not claimed. A re-run
    that fails to start is tried again 3 times, then the waiting run fails.

Who: a worker runs as itself and never switches user. It resumes only what its own identity
started, as the store recorded it — the embedded store's owner (another user's state dir is
refused at start), or its PostgreSQL runner login — and only runs of this host (or its
--pool) that say they ran as this user. Anything else stays parked; the worker says whose it
is once, and `monitor show` says who would resume it. On PostgreSQL, while runs under its
login say two users of this host use it, it runs nothing (one runner login per OS user per
host: `monitor doctor` names them).

Re-runs run in their own process group and are not waited for inside a pass. A database
error is reported on stderr and the next pass goes on. SIGINT/SIGTERM stop the worker
between passes: it then waits for the re-runs it started (a second signal leaves them
running; a later worker closes their waiting runs).

Pipelines: an execution its own identity started whose runner is gone, or that a decision
moved while no runner was alive, is resumed with `monitor pipeline resume`. With --labels,
the worker also runs the ready steps whose `host:` is one of its labels, of its own
identity's executions — and of another login's that named this worker's login (`pipeline
run --workers`) when this user's config trusts it ([worker] pipelines_from) — beats on them
while they run, and reports how they ended; the execution's runner applies that and goes
on from there. A step starts only when the stored definition is the one pinned at the
start.

Notifications (PostgreSQL store): the worker also relays the server's notifications to the
waiters of its state dir (wait-mode headless-run, monitor wait, the dashboard, pipeline
runners, monitor serve). It holds the state dir's notify.relay lock and one connection that
LISTENs — on HEADLESS_RUN_LISTEN_DB when set (a direct connection to the server, for a
HEADLESS_RUN_DB that goes through a transaction pooler, which cannot carry LISTEN), else on
HEADLESS_RUN_DB — and writes notify.bell on every notification; the waiters watch that file
instead of each holding a connection. A waiter with no live relay of the same server and
database listens on its own. A second worker of the state dir takes over the relay when the
first stops. Not with --once. The re-runs it starts inherit HEADLESS_RUN_LISTEN_DB too: an
operator's login there is refused, as in HEADLESS_RUN_DB.

--once does one pass, waits for the re-runs it started (retrying failed starts), and exits:
0, or 1 when the database could not be used.

Examples:
  monitor worker                         # in a spare terminal, or as a service
  monitor worker --once                  # one pass, e.g. from cron or after monitor wait
  monitor worker --labels gpu,eu-west    # also run pipeline steps labelled gpu or eu-west";

/// The least time between two passes the doorbell started: a database many shims write to
/// rings all the time.
const RING_SPACING: Duration = Duration::from_millis(50);

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// One pass, wait for the re-runs it started, then exit
    #[arg(long)]
    once: bool,
    /// Time between passes (a decision, or any write to the database, starts one sooner)
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = crate::parse::nonzero)]
    interval: Duration,
    /// With --once: one JSON object (schema, actions: at, text) instead of lines
    #[arg(long, requires = "once")]
    json: bool,
    /// Also resume the runs of this worker pool (started with HEADLESS_RUN_POOL=NAME) from
    /// any host — still only as their own user (default: HEADLESS_RUN_POOL)
    #[arg(long, value_name = "NAME", value_parser = pool_arg)]
    pool: Option<String>,
    /// Also run the pipeline steps whose `host` is one of these labels (comma-separated), of
    /// its own identity's executions and those of logins its config trusts that named it
    #[arg(long, value_name = "LABEL,…", value_delimiter = ',', value_parser = label_arg)]
    labels: Vec<String>,
}

fn label_arg(s: &str) -> Result<String, String> {
    if crate::pipeline::file::valid_label(s) {
        Ok(s.to_owned())
    } else {
        Err("a label is letters, digits, `.`, `_` and `-`, at most 64".into())
    }
}

fn pool_arg(s: &str) -> Result<String, String> {
    hr_shared::mode::pool_name(s)
        .ok_or_else(|| "a pool name is letters, digits, `.`, `_` and `-`, at most 64".into())
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let shim = locate::shim_binary().map_err(|e| CliError::error(e.to_string()))?;
    // The resumed tools inherit the worker's store login: on the PostgreSQL store it must
    // be the host's runner login, which cannot decide.
    if let Some(url) = &ctx.paths.store_url {
        let roles = hr_shared::store::postgres::roles_of(url)?;
        if !roles.contains(&"runner") || roles.contains(&"operator") {
            return Err(CliError::usage(format!(
                "monitor worker on the PostgreSQL store runs with this host's runner login (HEADLESS_RUN_DB of a login granted `runner` only); {} has {}: the tools it resumes would hold it",
                ctx.paths.store_label(),
                if roles.is_empty() {
                    "no headless-run role".to_owned()
                } else {
                    roles.join(" and ")
                }
            )));
        }
        // HEADLESS_RUN_LISTEN_DB, which the resumes inherit too, is this same login
        // (`StatePaths::resolve` refuses any other).
    }
    stop::install();
    let pool = args.pool.or_else(|| {
        std::env::var(hr_shared::mode::ENV_POOL)
            .ok()
            .and_then(|p| hr_shared::mode::pool_name(&p))
    });
    // Whose pipelines' labelled steps run here besides its own: the user's config alone.
    let trusted = if args.labels.is_empty() {
        Vec::new()
    } else {
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        hr_shared::config::Config::load(&cwd, &hr_shared::paths::real_env)
            .map_err(|e| CliError::usage(hr_shared::sanitize::sanitize_line(&e.to_string())))?
            .pipelines_from()
    };
    let mut worker = Worker::new(ctx.paths.clone(), shim)?
        .with_pool(pool)
        .with_labels(args.labels, trusted);
    // A store this worker may not run commands from (another user's state dir) is an
    // error at once, not on every pass; a database not made yet is found later.
    match worker.identity() {
        Ok(_) | Err(StoreError::Missing(_)) => {}
        Err(e) => return Err(e.into()),
    }
    if args.once {
        if args.json {
            worker.keep_lines();
        }
        once(&mut worker, args.json)?;
        if args.json {
            let actions: Vec<serde_json::Value> = worker
                .kept()
                .into_iter()
                .map(|(at, text)| serde_json::json!({ "at": at, "text": text }))
                .collect();
            crate::output::print_report(serde_json::json!({ "actions": actions }))?;
        }
        return Ok(());
    }
    eprintln!(
        "monitor worker: started as {} (every {}, database {})",
        worker.name(),
        hr_shared::time::short_duration(args.interval),
        ctx.paths.store_label()
    );
    // Before its own doorbell is made, which is then the relay's bell file.
    match crate::worker::start_relay(&ctx.paths) {
        Ok(None) => {}
        Ok(Some(Relay::Relaying)) => eprintln!(
            "monitor worker: relaying the server's notifications to this state dir's waiters (LISTEN on {})",
            hr_shared::url::without_password(ctx.paths.listen_target().unwrap_or_default())
        ),
        Ok(Some(Relay::Standby)) => eprintln!(
            "monitor worker: another worker relays the server's notifications to this state dir's waiters; this one takes over when it stops"
        ),
        Err(e) => eprintln!(
            "monitor worker: cannot relay the server's notifications ({}); waiters listen on their own",
            hr_shared::sanitize::sanitize_line(&e)
        ),
    }
    let interval = args.interval.max(Duration::from_millis(10));
    // A decision rings the database's doorbell: the next pass comes at once rather than
    // after the interval — but at most every RING_SPACING, however busy the database.
    let mut bell = None;
    while !stop::requested() {
        if bell.is_none() {
            // Made once its directory exists (a worker may start before any run).
            bell = hr_shared::store::doorbell::for_store(&ctx.paths);
        }
        let passed = std::time::Instant::now();
        if let Err(e) = worker.pass(false) {
            eprintln!(
                "monitor worker: {e}; trying again in {}",
                hr_shared::time::short_duration(interval)
            );
        }
        if stop::sleep_or_ring(interval, 0, bell.as_ref()) {
            stop::sleep(RING_SPACING.saturating_sub(passed.elapsed()), 0);
        }
    }
    drain(&mut worker);
    eprintln!("monitor worker: stopped");
    Ok(())
}

fn once(worker: &mut Worker, json: bool) -> CliResult {
    worker.pass(false)?;
    let mut backoff = Duration::from_millis(50);
    while worker.in_flight() > 0 && !stop::requested() {
        stop::sleep(backoff, 0);
        backoff = (backoff * 2).min(Duration::from_millis(250));
        worker.tend()?;
    }
    if stop::requested() {
        drain(worker);
    }
    if worker.take_actions() == 0 && !json {
        crate::outln!("nothing to resume or reconcile");
    }
    Ok(())
}

/// After a stop request: waits for the re-runs in flight, until a second request.
fn drain(worker: &mut Worker) {
    if worker.in_flight() == 0 {
        return;
    }
    let ids = worker.running_ids();
    if !ids.is_empty() {
        eprintln!(
            "monitor worker: stopping; waiting for the resumes of {} to finish (signal again to leave them running)",
            ids.join(", ")
        );
    }
    while worker.in_flight() > 0 && stop::requests() < 2 {
        if let Err(e) = worker.pass(true) {
            eprintln!("monitor worker: {e}");
        }
        // Failed starts are not retried while stopping.
        if worker.running_ids().is_empty() {
            break;
        }
        stop::sleep(Duration::from_millis(100), 1);
    }
    if !worker.running_ids().is_empty() {
        eprintln!(
            "monitor worker: leaving {} running; a later worker closes their waiting runs",
            worker.running_ids().join(", ")
        );
    }
}

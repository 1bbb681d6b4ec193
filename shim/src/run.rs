//! From arguments to exit code: configuration, tool resolution, the run row, and the choice
//! between supervised (pty) and interactive mode. The one place outcomes become exit codes.

use crate::cli::{self, Invocation, Parsed};
use crate::store::{Replace, StoreHandle, StoreMsg};
use crate::{event_fd, interactive, pty, supervise};
use hr_shared::config::{self, Config, Resolved};
use hr_shared::event::{ENV_EVENT_FD, ENV_EVENT_PIPE, ENV_EVENT_TOKEN};
use hr_shared::exit::{RunOutcome, shim};
use hr_shared::mode::{self, StdinMode};
use hr_shared::mode::{ENV_APPROVAL_ID, ENV_AUTO_APPROVAL, ENV_RESTART_OF, ENV_RESUMED_FROM};
use hr_shared::paths::StatePaths;
use hr_shared::runs::{StatusChange, ToolRun};
use hr_shared::sanitize::escape_name;
use hr_shared::status::RunStatus;
use hr_shared::store::{Asker, RunWrite};
use hr_shared::tool_path::{self, FindToolError, ShimIdentity};
use hr_shared::{db, id, proc, spool, time};
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Everything known about the run before the tool starts.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub tool_run_id: String,
    /// The tool's name as shown and stored (`terraform`, `deploy.sh`).
    pub tool_name: String,
    /// The name for the shim's own stderr lines: control, bidi and invisible characters
    /// escaped, so a tool named with an escape sequence cannot drive the reader's terminal.
    pub tool_label: String,
    /// What the caller typed for the tool (becomes the tool's argv[0]).
    pub argv0: OsString,
    pub tool_path: PathBuf,
    pub args: Vec<OsString>,
    pub execution_id: String,
    pub cwd: PathBuf,
    pub settings: Resolved,
    /// The settings given by the run's environment and flags (not its config file).
    pub explicit: hr_shared::config::Settings,
    /// Wait mode because the tool is a coding agent and nobody asked for a mode.
    pub conversation_waits: bool,
    pub paths: Option<StatePaths>,
    pub stdin_mode: StdinMode,
    /// Prompt rules, policies and the notify hook.
    pub config: Config,
    /// Variables removed from the tool's environment (`HEADLESS_RUN_TOKEN`, a bare
    /// `AUTO_APPROVAL`).
    pub env_remove: Vec<&'static str>,
}

/// The pager variables a tool gets in headless (pty) mode, each unless the caller set it
/// (to anything, empty included): with a terminal as its stdout a tool would start a pager
/// and wait at its prompt, where in CI without the shim (stdout a pipe) it prints
/// everything. `cat` is the value every one of these tools takes as "no pager" — but for
/// `man`, see [`MAN_PAGER`].
pub const PAGER_VARS: [&str; 7] = [
    "PAGER",
    "GIT_PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "GH_PAGER",
    "AWS_PAGER",
    "PSQL_PAGER",
];

/// `man`'s pager: what man-db itself puts after the formatter when its output is not a
/// terminal. Formatting for a terminal (the pty), groff draws bold and underline by
/// overstriking (`N\bN`, `_\bx`), which `cat` would pass into a CI log; `col -b` leaves the
/// plain text `man ls | cat` gives. (`cat` where there is no `col`.)
pub const MAN_PAGER: &str = "col -b -p -x";

/// The pager variables to set, given which ones the caller has and whether `col` is there
/// (asked only when `MANPAGER` is to be set).
fn pager_env(
    caller_has: impl Fn(&str) -> bool,
    has_col: impl FnOnce() -> bool,
) -> Vec<(&'static str, &'static OsStr)> {
    let mut has_col = Some(has_col);
    PAGER_VARS
        .into_iter()
        .filter(|v| !caller_has(v))
        .map(|v| {
            let man = v == "MANPAGER" && has_col.take().is_some_and(|f| f());
            (v, OsStr::new(if man { MAN_PAGER } else { "cat" }))
        })
        .collect()
}

/// Whether `col` is on `PATH`.
fn col_on_path() -> bool {
    hr_shared::tool_path::find_tool(OsStr::new("col"), env("PATH").as_deref(), None, None).is_ok()
}

impl RunContext {
    /// What the tool's environment gets on top of the shim's; in headless (pty) mode also
    /// `HEADLESS=1` and the pager variables the caller did not set.
    pub fn tool_env(&self, headless: bool) -> Vec<(&'static str, &OsStr)> {
        let mut vars = vec![
            ("HEADLESS_RUN_TOOL_RUN_ID", OsStr::new(&self.tool_run_id)),
            ("HEADLESS_RUN_EXECUTION_ID", OsStr::new(&self.execution_id)),
        ];
        if headless {
            vars.push(("HEADLESS", OsStr::new("1")));
            vars.extend(pager_env(|v| env(v).is_some(), col_on_path));
        }
        vars
    }

    /// The command that starts the tool with inherited stdio (interactive mode). Nothing
    /// reads the tool's events there, so it gets no token and no event descriptor — nor an
    /// outer run's.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.tool_path);
        cmd.arg0(&self.argv0)
            .args(&self.args)
            .envs(self.tool_env(false));
        for var in self
            .env_remove
            .iter()
            .chain(&[ENV_EVENT_TOKEN, ENV_EVENT_FD, ENV_EVENT_PIPE])
        {
            cmd.env_remove(var);
        }
        cmd
    }

    /// The command line as stored.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(&self.argv0)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
}

/// A failure of the shim itself, with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// A shorter line for the run's reason, where the message is long.
    pub reason: Option<String>,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            reason: None,
        }
    }
}

/// Runs the shim for these arguments and returns its exit code.
pub fn main_with(argv: Vec<OsString>) -> u8 {
    let inv = match cli::parse(argv) {
        Parsed::Run(inv) => inv,
        Parsed::Exit { code, text } => {
            if code == 0 {
                print!("{text}");
            } else {
                eprint!("{text}");
            }
            return code;
        }
    };
    report(run(inv))
}

fn env(key: &str) -> Option<OsString> {
    std::env::var_os(key)
}

fn run(inv: Invocation) -> Result<u8, Failure> {
    event_fd::forget_outer();
    if let Some(dir) = inv.flags.as_ref().and_then(|f| f.cwd.as_ref()) {
        std::env::set_current_dir(dir).map_err(|e| {
            Failure::new(
                shim::SHIM_FAILED,
                format!("cannot change to {}: {e}", dir.display()),
            )
        })?;
    }
    let cwd = std::env::current_dir().map_err(|e| {
        Failure::new(
            shim::SHIM_FAILED,
            format!("cannot read the working directory: {e}"),
        )
    })?;
    let tool_name = Path::new(&inv.tool)
        .file_name()
        .unwrap_or(inv.tool.as_os_str())
        .to_string_lossy()
        .into_owned();
    // A broken config file must not stop every tool on the machine: it is named (file,
    // line, key) and the tool runs on the built-in defaults — which decide nothing by
    // themselves (no policies), so every prompt is asked. `monitor` fails loudly on it.
    let config = Config::load(&cwd, &env).unwrap_or_else(|e| {
        eprintln!(
            "headless-run: warning: {e}; the tool runs with the built-in settings until it is fixed (`monitor doctor` names it)"
        );
        Config::default()
    });
    for w in &config.warnings {
        eprintln!("headless-run: warning: {w}");
    }
    let mut settings = config.settings_for(&tool_name);
    let mut from_env =
        config::env_settings(&env).map_err(|e| Failure::new(shim::SHIM_FAILED, e.to_string()))?;
    // Inside a supervised tool (a nested run), the environment is the tool's to set: what
    // shapes decisions is not taken from it.
    if env(hr_shared::mode::ENV_TOOL_RUN_ID).is_some_and(|v| !v.is_empty()) {
        for key in from_env.drop_decision_settings() {
            eprintln!(
                "headless-run: warning: HEADLESS_RUN_{} ignored: set inside a supervised tool (a nested run), where the tool could approve its own prompts with it",
                key.to_uppercase()
            );
        }
    }
    settings.overlay(&from_env);
    // What the run was given itself (environment, flags): its resume is given the same.
    let mut explicit = from_env.clone();
    if let Some(flags) = &inv.flags {
        settings.overlay(&flags.settings());
        explicit.overlay(&flags.settings());
    }
    let stdin_mode = match env("HEADLESS_RUN_STDIN") {
        Some(v) => StdinMode::parse(&v.to_string_lossy())
            .map_err(|e| Failure::new(shim::SHIM_FAILED, e))?,
        None => StdinMode::Auto,
    };
    let flags = inv.flags.as_ref();
    let paths = match StatePaths::resolve(flags.and_then(|f| f.state_dir.as_deref())) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("headless-run: warning: {e}; the run is not recorded");
            None
        }
    };
    let execution_id = flags
        .and_then(|f| f.execution_id.clone())
        .or_else(|| env("HEADLESS_RUN_EXECUTION_ID").map(|v| v.to_string_lossy().into_owned()))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(id::new_execution_id);
    // A coding agent's conversation cannot be re-run: unless a flag, the environment or the
    // config asks for exit mode, its run waits for decisions.
    let conversation_waits = settings.on_prompt.is_none() && mode::is_coding_agent(&tool_name);
    if conversation_waits {
        settings.on_prompt = Some(hr_shared::config::OnPrompt::Wait);
    }
    let settings = settings.resolve();
    settings
        .check()
        .map_err(|e| Failure::new(shim::SHIM_FAILED, format!("bad settings: {e}")))?;
    let mut ctx = RunContext {
        tool_run_id: id::new_run_id(),
        tool_label: escape_name(&tool_name),
        tool_name,
        argv0: inv.tool.clone(),
        tool_path: PathBuf::new(),
        args: inv.args,
        execution_id,
        cwd,
        settings,
        explicit,
        conversation_waits,
        paths,
        stdin_mode,
        config,
        // The server's token is the shim's, never the tool's: a tool holding it could
        // write its own run's records (never decide: a runner token cannot).
        env_remove: vec![
            hr_shared::store::url::ENV_TOKEN,
            hr_shared::event::ENV_RESULT_FILE,
            hr_shared::event::ENV_PIPELINE_STEP,
            // The worker's note to this shim about the resume, recorded below; a nested run
            // inside the tool is no resume.
            mode::ENV_RESUME_ENV,
        ],
    };
    let headless = mode::headless_from_env(env("HEADLESS").as_deref(), env("CI").as_deref());
    let interactive = match headless {
        Some(h) => !h,
        None => pty::is_tty(libc::STDIN_FILENO),
    };
    // The embedded store is its owner's alone (DESIGN §14): a state dir another user owns,
    // or with a link in it, is not used at all — no database, no logs, no spool.
    let refused = ctx
        .paths
        .as_ref()
        .filter(|p| p.is_embedded())
        .and_then(|p| p.foreign_store())
        .map(|why| format!("not your state store: {why}"));
    if refused.is_some() {
        ctx.paths = None;
    }
    let store = StoreHandle::start(
        ctx.paths.clone(),
        Asker {
            tool_run_id: ctx.tool_run_id.clone(),
            tool: ctx.tool_name.clone(),
            execution_id: ctx.execution_id.clone(),
            // Filled in on the store thread: only a prompt needs it (a hash, kept off the
            // shim's start).
            request_fingerprint: String::new(),
            argv: ctx.argv(),
            cwd: ctx.cwd.to_string_lossy().into_owned(),
            tool_digest: None,
            actor: String::new(),
            review: hr_shared::policy::reviewers_for(
                &ctx.config,
                &ctx.tool_name,
                &ctx.argv(),
                &ctx.cwd.to_string_lossy(),
            ),
        },
        refused,
    );
    let skip_dir = env("HEADLESS_RUN_SHIM_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    let path_var = env("PATH");
    let resolved = tool_path::find_tool(
        &inv.tool,
        path_var.as_deref(),
        ShimIdentity::current().as_ref(),
        skip_dir.as_deref(),
    );
    if let Ok(path) = &resolved {
        ctx.tool_path = path.clone();
    }
    let first_row = run_row(&ctx, interactive);
    let mut start = RunStart {
        store: &store,
        row: Some(first_row.clone()),
    };
    // Checked (and so used up) only for a tool that will run: a command not found or not
    // executable does not burn the decision its resume was given.
    if let (Some(value), Ok(_)) = (env(ENV_AUTO_APPROVAL), &resolved) {
        // The row must exist before an approval can be consumed by it.
        start.send(None);
        check_auto_approval(&mut ctx, &store, &value.to_string_lossy());
    }
    let outcome = match resolved {
        // A person at a terminal: no quick run to hand off, the store opens at once.
        Ok(_) if interactive => {
            store.start_thread();
            interactive::run(&ctx, &mut start)
        }
        Ok(_) => supervise::run(&ctx, &store, &mut start),
        Err(e) => {
            let code = match e {
                FindToolError::NotFound { .. } => shim::NOT_FOUND,
                FindToolError::NotExecutable { .. } => shim::NOT_EXECUTABLE,
            };
            Err(Failure {
                reason: Some(e.short()),
                ..Failure::new(code, e.to_string())
            })
        }
    };
    // A run that never started still gets its row.
    start.send(None);
    let (code, change) = match &outcome {
        Ok(outcome) => (
            outcome.exit_code(),
            StatusChange {
                status: outcome.status(),
                reason: outcome.reason(),
                exit_code: outcome.tool_exit_code(),
                // The shim is exiting: the run is over unless it is parked on an approval.
                finished: !matches!(outcome, RunOutcome::ApprovalPending { .. }),
                error: None,
                at: Some(time::now_rfc3339()),
            },
        ),
        Err(f) => (
            f.code,
            StatusChange {
                status: RunStatus::Failed,
                reason: Some(f.reason.clone().unwrap_or_else(|| f.message.clone())),
                exit_code: Some(i32::from(f.code)),
                finished: true,
                error: Some(f.message.clone()),
                at: Some(time::now_rfc3339()),
            },
        ),
    };
    match &outcome {
        Ok(RunOutcome::Cancelled { code, .. }) => store.write(RunWrite::Cancelled {
            exit_code: i32::from(*code),
            at: hr_shared::time::now_rfc3339(),
        }),
        Ok(RunOutcome::ApprovalPending { .. }) => {
            store.write(RunWrite::Release(None));
            // The resume re-runs the command in this environment (secrets withheld).
            store.write(RunWrite::Environment(hr_shared::mode::SavedEnvironment {
                flags: hr_shared::mode::resume_flags(&ctx.explicit),
                ..hr_shared::mode::SavedEnvironment::capture(std::env::vars_os())
            }));
            store.write(RunWrite::Status(change.clone(), Replace::AnyButCancelled));
        }
        _ => {
            store.write(RunWrite::Status(change.clone(), Replace::AnyButCancelled));
            let why = change.reason.as_deref().unwrap_or("it completed");
            store.write(RunWrite::Abandon(format!(
                "the run ended before a decision ({why})"
            )));
        }
    }
    // The caller need not wait for the database: what has not landed is handed to a
    // finisher, unless `monitor` started this run and reads its end next (a resume, a
    // restart, a pipeline's step) or the run's end has more to it than its row.
    let handed = match &outcome {
        Ok(RunOutcome::ApprovalPending { .. } | RunOutcome::Cancelled { .. }) => false,
        _ => !started_by_monitor() && store.hand_off(&final_row(first_row.clone(), &change)),
    };
    let landed = handed || store.finish(db::BUSY_TIMEOUT + Duration::from_secs(2));
    if !landed && let Some(paths) = &ctx.paths {
        // The database stayed locked: keep the run's final state for the next writer.
        let _ = spool::write(paths, &final_row(first_row, &change));
    }
    let result = match outcome {
        Ok(outcome) => {
            if let Some(note) = outcome_note(&ctx, &outcome) {
                eprintln!("headless-run: {note}");
            }
            Ok(code)
        }
        Err(f) => Err(f),
    };
    if handed {
        // The finisher was forked from this process, which now shares its memory with it
        // copy-on-write: ending here, without freeing what the run built, spares both of
        // them the copies (and the caller the wait).
        std::process::exit(i32::from(report(result)));
    }
    result
}

/// The shim's exit code for a run's result, its failure (if any) said on stderr.
fn report(result: Result<u8, Failure>) -> u8 {
    match result {
        Ok(code) => code,
        Err(f) => {
            // The message may name the tool or its path as given.
            eprintln!("headless-run: {}", escape_name(&f.message));
            f.code
        }
    }
}

/// Whether `monitor` started this run to read its end next: a worker's resume, a restart,
/// a pipeline's step.
fn started_by_monitor() -> bool {
    [
        ENV_RESUMED_FROM,
        ENV_RESTART_OF,
        ENV_AUTO_APPROVAL,
        hr_shared::event::ENV_PIPELINE_STEP,
    ]
    .into_iter()
    .any(|v| env(v).is_some_and(|v| !v.is_empty()))
}

/// Sends the run's row once, as soon as the tool's pid is known: one write where a row and
/// a later pid update would be two.
pub struct RunStart<'a> {
    store: &'a StoreHandle,
    row: Option<ToolRun>,
}

impl RunStart<'_> {
    /// Records the run as started (by `pid`, if it got that far). The first call writes the
    /// row; a later one with the pid records the pid.
    pub fn send(&mut self, pid: Option<i32>) {
        match self.row.take() {
            Some(mut row) => {
                row.pid = pid.map(i64::from);
                self.store.write(RunWrite::Start(Box::new(row)));
            }
            None => {
                if let Some(pid) = pid {
                    self.store.write(RunWrite::Pid(pid));
                }
            }
        }
    }
}

/// A caller's `AUTO_APPROVAL` reaches the tool only when it is a real decision for this
/// command (`monitor worker` sets it with the approval's id); a bare one is removed, so no
/// agent can approve itself by setting a variable.
fn check_auto_approval(ctx: &mut RunContext, store: &StoreHandle, value: &str) {
    let approval_id = env(ENV_APPROVAL_ID).map(|v| v.to_string_lossy().into_owned());
    let resumed_from = env(ENV_RESUMED_FROM).map(|v| v.to_string_lossy().into_owned());
    let checked = store.ask(|reply| StoreMsg::AutoApproval {
        approval_id,
        value: value.to_owned(),
        resumed_from,
        reply,
    });
    if let Err(why) = checked {
        eprintln!(
            "headless-run: warning: AUTO_APPROVAL ignored and not passed to {} ({why}); only `monitor worker` resumes with a decision",
            ctx.tool_label
        );
        ctx.env_remove.push(ENV_AUTO_APPROVAL);
    }
}

/// The run's row as it ends, for the spool.
fn final_row(mut row: ToolRun, change: &StatusChange) -> ToolRun {
    row.status = change.status;
    row.reason = change.reason.clone();
    row.exit_code = change.exit_code.or(row.exit_code);
    // A tool's own `error` event stays unless the end says otherwise.
    if change.error.is_some() {
        row.last_error_msg = change.error.clone();
    }
    if change.finished {
        row.completed_at = change.at.clone();
    }
    row.updated_at = change.at.clone().unwrap_or_else(time::now_rfc3339);
    row
}

fn run_row(ctx: &RunContext, interactive: bool) -> ToolRun {
    let now = time::now_rfc3339();
    let shim_pid = std::process::id() as i32;
    ToolRun {
        tool_run_id: ctx.tool_run_id.clone(),
        tool_name: ctx.tool_name.clone(),
        execution_id: Some(ctx.execution_id.clone()),
        status: RunStatus::Running,
        reason: None,
        exit_code: None,
        started_at: now.clone(),
        completed_at: None,
        last_output_at: None,
        last_heartbeat_at: None,
        supervisor_heartbeat_at: Some(now.clone()),
        last_error_msg: None,
        pid: None,
        shim_pid: Some(i64::from(shim_pid)),
        shim_start_time: proc::read_stat(shim_pid).map(|s| s.start_time as i64),
        host: Some(proc::hostname()),
        argv_json: ctx.argv(),
        cwd: Some(ctx.cwd.to_string_lossy().into_owned()),
        resumed_from: env(ENV_RESUMED_FROM)
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| id::has_shape(v, id::RUN_PREFIX)),
        metadata: Some({
            let mut m = serde_json::json!({
                "mode": if interactive { "interactive" } else { "pty" },
                "tool_path": ctx.tool_path.to_string_lossy(),
                // SAFETY: geteuid cannot fail.
                "uid": unsafe { libc::geteuid() },
            });
            // A coding agent's conversation waits for decisions though nobody asked for
            // wait mode: the run says so, for the operator who wonders why it did not end 90.
            if ctx.conversation_waits {
                m["on_prompt"] = serde_json::json!({
                    "mode": "wait",
                    "why": "a coding agent's conversation cannot be re-run (--on-prompt exit ends it instead)",
                });
            }
            if let Some(pool) = env(hr_shared::mode::ENV_POOL)
                .and_then(|v| hr_shared::mode::pool_name(&v.to_string_lossy()))
            {
                m["pool"] = serde_json::Value::String(pool);
            }
            // A pipeline's step: its runner takes its outcome; no worker re-runs it alone.
            if let Some(step) = env(hr_shared::event::ENV_PIPELINE_STEP) {
                let mut step = hr_shared::sanitize::sanitize_line(&step.to_string_lossy());
                step.truncate(256);
                m["pipeline"] = serde_json::Value::String(step);
            }
            // What the worker could not give the resume of what was withheld when it asked
            // (and what it gave from its own environment): for the operator, on this run.
            if let Some(note) = env(ENV_RESUMED_FROM)
                .is_some_and(|v| id::has_shape(&v.to_string_lossy(), id::RUN_PREFIX))
                .then(|| env(mode::ENV_RESUME_ENV))
                .flatten()
                .and_then(|v| mode::ResumeEnv::parse(&v.to_string_lossy()))
                .filter(|r| !r.is_empty())
                && let Ok(value) = serde_json::to_value(note)
            {
                m["resume_env"] = value;
            }
            if let Some(of) = env(ENV_RESTART_OF)
                .map(|v| v.to_string_lossy().into_owned())
                .filter(|v| id::has_shape(v, id::RUN_PREFIX))
            {
                m["restart_of"] = serde_json::Value::String(of);
            }
            m
        }),
        updated_at: now,
        owner: None,
    }
}

/// One plain line on stderr for the outcomes a caller must understand.
fn outcome_note(ctx: &RunContext, outcome: &RunOutcome) -> Option<String> {
    let tool = &ctx.tool_label;
    let fmt = |d: Option<Duration>| d.map(time::short_duration).unwrap_or_default();
    match outcome {
        RunOutcome::TimedOut => Some(format!(
            "{tool}: hard timeout ({}) reached; the tool and its process group were ended (exit 124, run {})",
            fmt(ctx.settings.timeout),
            ctx.tool_run_id
        )),
        RunOutcome::Stalled => Some(format!(
            "{tool}: no output and no heartbeat for {}; the tool was ended as stalled (exit 92, run {})",
            fmt(ctx.settings.stall_timeout),
            ctx.tool_run_id
        )),
        RunOutcome::SecretRefused {
            prompt,
            alternative,
        } => Some(format!(
            "{tool} asks for a secret ({prompt:?}); headless-run never types or stores secrets: refused (exit 93, run {}). Instead: {alternative}",
            ctx.tool_run_id
        )),
        RunOutcome::Unrecorded { prompt, why } => Some(format!(
            "{tool} asks {prompt:?} but the approval could not be recorded ({why}); the tool was ended (exit 125, run {})",
            ctx.tool_run_id
        )),
        RunOutcome::Cancelled { .. } => Some(format!(
            "{tool}: cancelled; the tool and its process group were ended (run {})",
            ctx.tool_run_id
        )),
        _ => None,
    }
}

/// Maps an error from spawning the tool to the shim's exit code.
pub fn spawn_failure(ctx: &RunContext, e: std::io::Error) -> Failure {
    let path = ctx.tool_path.display();
    match e.raw_os_error() {
        // The file was found, so ENOENT here is its interpreter or loader: not executable.
        Some(libc::ENOENT) => Failure::new(
            shim::NOT_EXECUTABLE,
            format!("{path}: cannot run: bad interpreter or missing loader ({e})"),
        ),
        Some(libc::EACCES) | Some(libc::ENOEXEC) | Some(libc::EISDIR) | Some(libc::ETXTBSY) => {
            Failure::new(shim::NOT_EXECUTABLE, format!("{path}: cannot run: {e}"))
        }
        _ => Failure::new(
            shim::SHIM_FAILED,
            format!("{path}: cannot start the tool: {e}"),
        ),
    }
}

/// The store's view of a status change from a running run.
pub fn live_status(status: RunStatus, reason: Option<String>) -> RunWrite {
    RunWrite::Status(StatusChange::to(status, reason), Replace::Live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pager_variables_the_caller_set_are_left_alone() {
        let set = pager_env(|v| v == "PAGER" || v == "GIT_PAGER", || false);
        let names: Vec<&str> = set.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "MANPAGER",
                "SYSTEMD_PAGER",
                "GH_PAGER",
                "AWS_PAGER",
                "PSQL_PAGER"
            ]
        );
        assert!(set.iter().all(|(_, v)| *v == "cat"));
        assert_eq!(pager_env(|_| false, || true).len(), PAGER_VARS.len());
        assert!(pager_env(|_| true, || panic!("col is looked for only for MANPAGER")).is_empty());
    }

    #[test]
    fn man_gets_col_to_strip_overstrike_where_there_is_one() {
        let man = |has_col| {
            pager_env(|_| false, move || has_col)
                .into_iter()
                .find(|(k, _)| *k == "MANPAGER")
                .map(|(_, v)| v.to_owned())
        };
        assert_eq!(man(true).as_deref(), Some(OsStr::new(MAN_PAGER)));
        assert_eq!(man(false).as_deref(), Some(OsStr::new("cat")));
        // The other pagers stay `cat`: `col` would hold back and rewrite their output.
        assert!(
            pager_env(|_| false, || true)
                .iter()
                .filter(|(k, _)| *k != "MANPAGER")
                .all(|(_, v)| *v == "cat")
        );
    }
}

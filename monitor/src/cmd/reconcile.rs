//! `monitor reconcile`: one reconciliation pass, as the worker does on every pass.

use crate::cli::Ctx;
use crate::error::CliResult;
use hr_shared::rules::LocalHost;
use hr_shared::sanitize::sanitize_line;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
A running, stalled or waiting_approval run whose headless-run process is gone becomes
failed with reason `supervisor vanished`: on this host when its pid is not running or now
belongs to another process (its start time differs), on another host when its supervisor
heartbeat is stale. A run parked on an approval (headless-run exited 90 on purpose) is not
touched. Pending approvals past their expires_at expire (rejected, or answered with the
default where the config says on_expire = \"default\").

Examples:
  monitor reconcile                      # after a reboot or a killed shim")]
pub struct Args {}

pub fn run(ctx: &Ctx, _args: Args) -> CliResult {
    let mut store = ctx.open_local("reconciling")?;
    let actor = format!("reconcile:{}", hr_shared::proc::current_user());
    let report = ctx.logged(store.reconcile(&actor, &LocalHost::new())?);
    for (run, why) in &report.vanished {
        crate::outln!("{run} failed: {}", sanitize_line(why));
    }
    for a in &report.expired {
        crate::outln!(
            "{} expired{} (run {})",
            a.approval_id,
            a.chosen_value
                .as_deref()
                .map(|v| format!(", answered with the default `{}`", sanitize_line(v)))
                .unwrap_or_else(|| " without a decision".into()),
            a.tool_run_id
        );
    }
    if report.vanished.is_empty() && report.expired.is_empty() {
        crate::outln!("nothing to reconcile");
    }
    Ok(())
}

//! Builders for the big test literals (`ToolRun`, `Approval`), shared by the unit tests,
//! the store contract suite and the monitor's tests: a complete, plausible row to change
//! the few fields a test is about.

#[cfg(feature = "postgres")]
#[path = "testing_pg.rs"]
pub mod pg;

use crate::approvals::{Approval, PromptKind};
use crate::event::ApprovalOption;
use crate::runs::ToolRun;
use crate::status::{ApprovalStatus, RunStatus};
use crate::time;

/// A run of `tool` with status `status`: started now on host `h`, argv `[tool, --flag]`.
pub fn run(id: &str, tool: &str, status: RunStatus) -> ToolRun {
    let now = time::now_rfc3339();
    ToolRun {
        tool_run_id: id.into(),
        tool_name: tool.into(),
        execution_id: Some("EX-1".into()),
        status,
        reason: None,
        exit_code: None,
        started_at: now.clone(),
        completed_at: None,
        last_output_at: None,
        last_heartbeat_at: None,
        supervisor_heartbeat_at: None,
        last_error_msg: None,
        pid: Some(10),
        shim_pid: Some(9),
        shim_start_time: Some(1234),
        host: Some("h".into()),
        argv_json: vec![tool.into(), "--flag".into()],
        cwd: Some("/tmp".into()),
        resumed_from: None,
        metadata: None,
        updated_at: now,
        owner: None,
    }
}

/// A pending approval `id` of run `TR-1` (`rm`): options y/n, default n, no expiry.
pub fn approval(id: &str, kind: PromptKind) -> Approval {
    let opt = |v: &str, l: &str| ApprovalOption {
        value: v.into(),
        label: l.into(),
        keys: Some(format!("{v}\r")),
    };
    Approval {
        approval_id: id.into(),
        tool_run_id: "TR-1".into(),
        tool_name: "rm".into(),
        execution_id: Some("EX-1".into()),
        question: "rm: remove regular file 'a'?".into(),
        context: Some("ctx".into()),
        options_json: vec![opt("y", "Yes"), opt("n", "No")],
        default_value: Some("n".into()),
        allows_text: false,
        status: ApprovalStatus::Pending,
        chosen_value: None,
        created_at: time::now_rfc3339(),
        decided_at: None,
        expires_at: None,
        decided_by: None,
        decision_channel: None,
        comment: None,
        request_fingerprint: Some("req".into()),
        prompt_fingerprint: Some("prm".into()),
        consumed_at: None,
        consumed_by: None,
        prompt_kind: Some(kind),
        prompt_line: Some("rm: remove regular file 'a'?".into()),
        rule_name: Some("builtin:rm".into()),
        expire_action: "reject".into(),
        claimed_by: None,
        claimed_at: None,
        resumed_run_id: None,
        screen_digest: None,
        tool_digest: None,
        superseded_by: None,
        supersedes: None,
        kept_for: None,
        consumed_reason: None,
        reviews_required: 1,
        reviewer_group: None,
        wait_seconds: 0,
        reviews: Vec::new(),
        usable_at: None,
    }
}

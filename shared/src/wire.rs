//! The bodies of `monitor serve`'s API, in one place: the server serializes these types and
//! the HTTP clients (`store::remote` for `monitor --server`, `store::http` for a runner)
//! deserialize the same ones, so the two cannot drift apart. With the `openapi` feature
//! (monitor's) each also describes itself for the server's OpenAPI document.
//!
//! Optional fields are sent as `null`, not left out, unless a field says otherwise: the
//! bytes on the wire are the ones the API has always sent.

use crate::approvals::Approval;
use crate::config::OnExpire;
use crate::event::CooperativeRequest;
use crate::pipeline::engine::{Step, StepStatus};
use crate::pipeline::execution::{Execution, ExecutionState};
use crate::rules::Liveness;
use crate::runs::ToolRun;
use crate::status::RunStatus;
use crate::store::{Asker, Counts, PromptRequest, RunWrite};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// Every error answer: what went wrong in `error`, and more fields where they help (409: the
/// decision already made, `outcome`, `approval` or `run`; 422: the `valid` values and a
/// `note`; 429: the `limit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Error))]
pub struct ErrorBody {
    pub error: String,
    /// The fields beside `error`.
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            more: Map::new(),
        }
    }

    /// The error answer in `body`, if it is one.
    pub fn read(body: &Value) -> Option<Self> {
        Self::deserialize(body).ok()
    }

    /// Field `key` beside `error`, when it is there and of type `T`.
    pub fn field<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.more.get(key).and_then(|v| T::deserialize(v).ok())
    }
}

/// An approval as the operator API shows it: its row, and its run's command line, directory
/// and host (`null` when the run is not in the store).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Approval))]
pub struct ApprovalView {
    #[serde(flatten)]
    pub approval: Approval,
    /// The run's command line, program first.
    pub command: Option<Vec<String>>,
    /// The run's working directory.
    pub cwd: Option<String>,
    /// The host the run ran on.
    pub host: Option<String>,
    /// Where it stands on its required reviewers and wait timer (`1 of 2 approvals
    /// (alice); 1 more needed …`, `approved by …; held … until T`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_status: Option<String>,
    /// In the answer to a decision only: `decided`, `reviewed` (counted; more reviewers, or
    /// a wait timer, still needed) or `unchanged` (the same decision again: a no-op, as on
    /// the command line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl ApprovalView {
    /// `approval` with what its run `run` says.
    pub fn new(approval: Approval, run: Option<&ToolRun>) -> Self {
        ApprovalView {
            command: run.map(|r| r.argv_json.clone()),
            cwd: run.and_then(|r| r.cwd.clone()),
            host: run.and_then(|r| r.host.clone()),
            review_status: crate::reviews::summary(&approval),
            approval,
            outcome: None,
        }
    }

    /// As the answer to a decision that ended in `outcome`.
    pub fn answering(mut self, outcome: &str) -> Self {
        self.outcome = Some(outcome.to_owned());
        self
    }
}

/// `GET /api/v1/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalsBody {
    pub approvals: Vec<ApprovalView>,
}

/// `POST /api/v1/approvals/{id}/decide`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecideRequest {
    /// The answer: `approve`, `reject`, an option's value, or text where the approval takes
    /// it.
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub value: String,
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub comment: Option<String>,
    /// The version of the approval the client showed (its `screen_digest`): a decision on
    /// any other version, or on an approval a changed screen superseded, is refused with 409
    /// (outcome `changed` or `superseded`, naming `superseded_by`). Without it, the approval
    /// as its id names it (an approval never changes once asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub version: Option<String>,
}

/// `POST /api/v1/approvals/{id}/approve` and `…/reject`, and the same of an execution; the
/// body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecisionRequest {
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub comment: Option<String>,
    /// The version of the approval the client showed (its `screen_digest`): a decision on
    /// any other version, or on an approval a changed screen superseded, is refused with 409
    /// (outcome `changed` or `superseded`, naming `superseded_by`). Without it, the approval
    /// as its id names it (an approval never changes once asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub version: Option<String>,
}

/// `GET /api/v1/runs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunsBody {
    pub runs: Vec<ToolRun>,
}

/// `GET /api/v1/runs/{id}`: the run's row and its output tail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: ToolRun,
    /// The last lines of the run's output (`tail` of them; empty for `tail=0`).
    pub output_tail: String,
}

/// `POST /api/v1/runs/{id}/cancel`; the body may be left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelRequest {
    #[cfg_attr(feature = "openapi", schema(max_length = 4096))]
    pub reason: Option<String>,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CancelKind {
    /// The server signalled the run's headless-run on its own host.
    Signalled,
    /// The run was only marked cancelled: its headless-run learns of it from the store.
    Marked,
}

/// The answer of `POST /api/v1/runs/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelBody {
    pub outcome: CancelKind,
    pub run: ToolRun,
    /// The headless-run the server signalled (only when `signalled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shim_pid: Option<i64>,
}

/// One audit row: a status change or a decision, chained to the one before by its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRow {
    pub id: i64,
    pub at: String,
    pub event: String,
    pub tool_run_id: Option<String>,
    pub approval_id: Option<String>,
    pub actor: String,
    /// The event's fields, as JSON text.
    pub data: String,
    pub prev_hash: String,
    pub hash: String,
}

impl From<crate::audit::AuditRow> for AuditRow {
    fn from(a: crate::audit::AuditRow) -> Self {
        AuditRow {
            id: a.id,
            at: a.at,
            event: a.event,
            tool_run_id: a.tool_run_id,
            approval_id: a.approval_id,
            actor: a.actor,
            data: a.data,
            prev_hash: a.prev_hash,
            hash: a.hash,
        }
    }
}

impl From<AuditRow> for crate::audit::AuditRow {
    fn from(a: AuditRow) -> Self {
        crate::audit::AuditRow {
            id: a.id,
            at: a.at,
            event: a.event,
            tool_run_id: a.tool_run_id,
            approval_id: a.approval_id,
            actor: a.actor,
            data: a.data,
            prev_hash: a.prev_hash,
            hash: a.hash,
        }
    }
}

/// `GET /api/v1/runs/{id}/audit`, `GET /api/v1/approvals/{id}/audit`: oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditBody {
    pub audit: Vec<AuditRow>,
}

/// `GET /api/v1/ids`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IdsBody {
    pub ids: Vec<String>,
}

/// How many runs are in one status.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusCount {
    pub status: RunStatus,
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub count: i64,
}

/// `GET /api/v1/counts`: runs by status and pending approvals (the store's `Counts`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CountsBody {
    /// Every run by status.
    pub totals: Vec<StatusCount>,
    /// Runs that have not ended, by status.
    pub live: Vec<StatusCount>,
    /// Failed runs since `since` (all time without it).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub failed_recent: i64,
    /// Runs ended by the stall timeout since `since`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub stalled_recent: i64,
    /// Pending approvals.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub pending: i64,
    /// Of those, how many expire within `soon`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub expiring: i64,
}

fn counted(list: &[(RunStatus, i64)]) -> Vec<StatusCount> {
    list.iter()
        .map(|&(status, count)| StatusCount { status, count })
        .collect()
}

impl From<Counts> for CountsBody {
    fn from(c: Counts) -> Self {
        CountsBody {
            totals: counted(&c.totals),
            live: counted(&c.live),
            failed_recent: c.failed_recent,
            stalled_recent: c.stalled_recent,
            pending: c.pending.0,
            expiring: c.pending.1,
        }
    }
}

impl From<CountsBody> for Counts {
    fn from(b: CountsBody) -> Self {
        let pairs = |l: Vec<StatusCount>| l.into_iter().map(|s| (s.status, s.count)).collect();
        Counts {
            totals: pairs(b.totals),
            live: pairs(b.live),
            failed_recent: b.failed_recent,
            stalled_recent: b.stalled_recent,
            pending: (b.pending, b.expiring),
        }
    }
}

/// The store's change mark (`GET /api/v1/mark`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Mark {
    pub mark: u64,
}

/// A step of an execution as a listing shows it: its state only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepState {
    pub node: String,
    pub iteration: u32,
    pub status: StepStatus,
}

/// An execution of a pipeline as `GET /api/v1/executions` lists it: its steps' states only
/// (a step's result and environment are in `GET /api/v1/executions/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionSummary {
    pub execution_id: String,
    pub name: String,
    pub status: ExecutionState,
    pub reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub steps: Vec<StepState>,
}

impl From<Execution> for ExecutionSummary {
    fn from(p: Execution) -> Self {
        ExecutionSummary {
            steps: p
                .steps
                .iter()
                .map(|s| StepState {
                    node: s.node.clone(),
                    iteration: s.iteration,
                    status: s.status,
                })
                .collect(),
            execution_id: p.execution_id,
            name: p.name,
            status: p.status,
            reason: p.reason,
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

/// `GET /api/v1/executions`: newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionsBody {
    pub executions: Vec<ExecutionSummary>,
}

/// The pipeline of an execution, as `GET /api/v1/executions/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineView {
    pub name: String,
    /// The file it was loaded from, as given.
    pub file: Option<String>,
    pub status: ExecutionState,
    pub reason: Option<String>,
    /// Who drives it now: `HOST PID START` (none: nobody).
    pub runner: Option<String>,
    pub heartbeat_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The pipeline's variables.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub vars: Value,
    pub steps: Vec<Step>,
}

impl From<Execution> for PipelineView {
    fn from(p: Execution) -> Self {
        PipelineView {
            name: p.name,
            file: p.file,
            status: p.status,
            reason: p.reason,
            runner: p.runner,
            heartbeat_at: p.heartbeat_at,
            created_at: p.created_at,
            updated_at: p.updated_at,
            vars: p.vars,
            steps: p.steps,
        }
    }
}

/// `GET /api/v1/executions/{id}`: an execution's runs and approvals, newest first, and its
/// pipeline when it is one (`monitor pipeline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionDetail {
    pub execution_id: String,
    /// The pipeline, or `null` for an execution that is not one.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub pipeline: Option<PipelineView>,
    pub runs: Vec<ToolRun>,
    pub approvals: Vec<Approval>,
}

/// `POST /api/v1/runner/record`: `RunnerStore::record`'s arguments.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordCall {
    pub run_id: String,
    /// The run's changes, written in one transaction.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub writes: Vec<RunWrite>,
    pub actor: String,
    pub row_may_exist: bool,
}

/// What this host says about one of its processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Fact {
    pub pid: i32,
    pub start_time: Option<u64>,
    pub liveness: Liveness,
}

/// `POST /api/v1/runner/prompt`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromptCall {
    #[cfg_attr(feature = "openapi", schema(schema_with = asker))]
    pub who: Asker,
    /// The prompt request.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub req: PromptRequest,
    /// The asking host's name, as its runs record it.
    pub host: String,
    /// Its word on the processes of the runs `GET /api/v1/runner/live` listed.
    pub facts: Vec<Fact>,
}

/// `POST /api/v1/runner/cooperative`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CooperativeCall {
    #[cfg_attr(feature = "openapi", schema(schema_with = asker))]
    pub who: Asker,
    pub req: CooperativeRequest,
    /// How long the approval may wait (`{"secs": …, "nanos": …}`), or `null`: it does not
    /// expire.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>, required))]
    pub ttl: Option<Duration>,
    pub on_expire: OnExpire,
}

/// `POST /api/v1/runner/auto-approval`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AutoApprovalCall {
    #[cfg_attr(feature = "openapi", schema(schema_with = asker))]
    pub who: Asker,
    pub approval_id: String,
    pub value: String,
    pub resumed_from: Option<String>,
}

/// `POST /api/v1/runner/expire`: no arguments.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExpireCall {}

/// `POST /api/v1/runner/deliver`: a final row from the host's spool; `gone`: its shim no
/// longer runs (else the server leaves a live row alone).
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliverCall {
    pub run: ToolRun,
    pub gone: bool,
}

/// One of the token's live runs on a host (`GET /api/v1/runner/live?host=`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveRun {
    pub tool_run_id: String,
    pub shim_pid: Option<i64>,
    pub shim_start_time: Option<i64>,
}

/// The asking run of a runner call ([`Asker`]) as the document describes it: the run's id
/// is what the server checks (the token's own run); the other fields are the shim's.
#[cfg(feature = "openapi")]
fn asker() -> utoipa::openapi::Object {
    use utoipa::openapi::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("the asking run, as its shim knows it"))
        .property(
            "tool_run_id",
            ObjectBuilder::new().schema_type(Type::String),
        )
        .required("tool_run_id")
        .build()
}

/// A runner call's answer as the document describes it: the outcome the store returned
/// (`Done` of the call's own type, which the server sends and the runner reads), with
/// events only about the token's own runs.
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
pub struct RunnerOutcome {
    /// The call's value, as `RunnerStore`'s method returned it.
    pub value: Value,
    /// Events for the runner's log, the run's new status, warnings.
    #[schema(value_type = Object)]
    pub effects: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_go_through_json_unchanged() {
        let c = Counts {
            totals: vec![(RunStatus::Completed, 3), (RunStatus::Failed, 1)],
            live: vec![(RunStatus::Running, 2)],
            failed_recent: 1,
            stalled_recent: 0,
            pending: (4, 1),
        };
        let json = serde_json::to_string(&CountsBody::from(c.clone())).unwrap();
        let back: CountsBody = serde_json::from_str(&json).unwrap();
        assert_eq!(Counts::from(back), c);
    }

    /// The fields the API has always sent, `null` included, and nothing more.
    #[test]
    fn views_send_what_the_api_always_sent() {
        let a = crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice);
        let v = serde_json::to_value(ApprovalView::new(a.clone(), None)).unwrap();
        let mut want = serde_json::to_value(&a).unwrap();
        want["command"] = Value::Null;
        want["cwd"] = Value::Null;
        want["host"] = Value::Null;
        assert_eq!(v, want);
        let back: ApprovalView = serde_json::from_value(v).unwrap();
        assert_eq!(back.approval, a);

        let run = crate::testing::run("TR-1", "rm", RunStatus::Running);
        let cancelled = CancelBody {
            outcome: CancelKind::Marked,
            run: run.clone(),
            shim_pid: None,
        };
        let v = serde_json::to_value(&cancelled).unwrap();
        assert_eq!(v["outcome"], "marked");
        assert!(v.get("shim_pid").is_none(), "{v}");
        let detail = RunDetail {
            run: run.clone(),
            output_tail: String::new(),
        };
        let v = serde_json::to_value(&detail).unwrap();
        let mut want = serde_json::to_value(&run).unwrap();
        want["output_tail"] = "".into();
        assert_eq!(v, want);
        assert_eq!(serde_json::from_value::<RunDetail>(v).unwrap(), detail);

        // A decision's body: `comment` always, `version` only when there is one.
        let d = DecideRequest {
            value: "y".into(),
            comment: None,
            version: None,
        };
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"value":"y","comment":null}"#
        );
    }

    #[test]
    fn an_error_body_keeps_its_other_fields() {
        let body = serde_json::json!({"error": "no", "valid": ["y", "n"], "note": ""});
        let e = ErrorBody::read(&body).unwrap();
        assert_eq!(e.error, "no");
        assert_eq!(e.field::<Vec<String>>("valid").unwrap(), ["y", "n"]);
        assert_eq!(e.field::<String>("note").as_deref(), Some(""));
        assert!(e.field::<String>("valid").is_none());
        assert_eq!(serde_json::to_value(&e).unwrap(), body);
        assert!(ErrorBody::read(&serde_json::json!(["x"])).is_none());
    }
}

/// What a decision link says (`GET /api/v1/links/{token}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkInfo {
    pub approval_id: String,
    /// The operator it is for: decisions through it are recorded as this token's name.
    pub operator: String,
    /// Whether the link alone decides (else the operator's login is needed too).
    pub link_only: bool,
    /// When it ends (RFC 3339).
    pub expires_at: String,
}

/// `GET /api/v1/links/{token}`: the link and its approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkBody {
    pub link: LinkInfo,
    pub approval: ApprovalView,
}

//! `/metrics`: Prometheus text.

use super::openapi::*;
use super::*;

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    summary = "Prometheus metrics",
    responses(
        (status = 200, description = "Prometheus text", body = String, content_type = "text/plain"),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn metrics(
    State(s): State<Arc<Server>>,
    Reader(c): Reader,
) -> Result<Response, ApiError> {
    let (counts, decided) = s
        .with_store(|st| {
            let counts = match st.counts(&hr_shared::time::now_rfc3339(), Duration::from_secs(3600))
            {
                Err(hr_shared::db::StoreError::Missing(_)) => Default::default(),
                other => other.map_err(ApiError::store)?,
            };
            let decided = or_none(st.approvals(&ApprovalFilter {
                statuses: vec![
                    ApprovalStatus::Approved,
                    ApprovalStatus::Rejected,
                    ApprovalStatus::Expired,
                ],
                ..Default::default()
            }))?;
            Ok((counts, decided))
        })
        .await?;
    let mut out = String::new();
    out.push_str("# HELP headless_run_runs Runs by status.\n# TYPE headless_run_runs gauge\n");
    for (status, n) in &counts.totals {
        out.push_str(&format!("headless_run_runs{{status=\"{status}\"}} {n}\n"));
    }
    out.push_str(&format!(
        "# HELP headless_run_pending_approvals Approvals waiting for a decision.\n# TYPE headless_run_pending_approvals gauge\nheadless_run_pending_approvals {}\n",
        counts.pending.0
    ));
    let mut by_channel: std::collections::BTreeMap<String, u64> = Default::default();
    for a in &decided {
        let ch = a.decision_channel.as_deref().unwrap_or("unknown");
        // Policy channels name the policy: counted by kind, not by name.
        let ch = ch.split(':').next().unwrap_or(ch).to_owned();
        *by_channel.entry(ch).or_default() += 1;
    }
    out.push_str("# HELP headless_run_decided_approvals Approvals decided, by channel.\n# TYPE headless_run_decided_approvals gauge\n");
    for (ch, n) in &by_channel {
        out.push_str(&format!(
            "headless_run_decided_approvals{{channel=\"{}\"}} {n}\n",
            ch.replace(['"', '\\', '\n'], "_")
        ));
    }
    out.push_str(&resume_histogram(&decided));
    out.push_str(&format!(
        "# HELP headless_run_store_errors_total Store errors answered since the server started.\n# TYPE headless_run_store_errors_total counter\nheadless_run_store_errors_total {}\n",
        s.store_errors.load(Ordering::Relaxed)
    ));
    out.push_str(&format!(
        "# HELP headless_run_connections_open Connections open now.\n# TYPE headless_run_connections_open gauge\nheadless_run_connections_open {}\n",
        s.connections.open.load(Ordering::Relaxed)
    ));
    out.push_str(&format!(
        "# HELP headless_run_connections_refused_total Connections refused beyond --max-connections since the server started.\n# TYPE headless_run_connections_refused_total counter\nheadless_run_connections_refused_total {}\n",
        s.connections.refused.load(Ordering::Relaxed)
    ));
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
        .into_response();
    resp.extensions_mut().insert(c);
    Ok(resp)
}

/// The upper bounds (seconds) of the decision-to-resume histogram's buckets.
pub(super) const RESUME_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

/// `headless_run_decision_to_resume_seconds`: for every answer a run used (typed by a
/// waiting shim, or taken by a re-run), the time from its decision to its use, over the
/// approvals in the store.
pub(super) fn resume_histogram(decided: &[Approval]) -> String {
    let secs: Vec<f64> = decided
        .iter()
        // A person's decisions: a policy's or the system's are used the moment they are made.
        .filter(|a| {
            a.channel()
                .is_some_and(hr_shared::approvals::Channel::is_person)
        })
        .filter_map(|a| {
            let at = hr_shared::time::parse_rfc3339(a.decided_at.as_deref()?)?;
            let used = hr_shared::time::parse_rfc3339(a.consumed_at.as_deref()?)?;
            Some(used.duration_since(at).unwrap_or_default().as_secs_f64())
        })
        .collect();
    let name = "headless_run_decision_to_resume_seconds";
    let mut out = format!(
        "# HELP {name} From a decision to its use by the run (keys typed, or the re-run answered).\n# TYPE {name} histogram\n"
    );
    for le in RESUME_BUCKETS {
        let n = secs.iter().filter(|s| **s <= le).count();
        out.push_str(&format!("{name}_bucket{{le=\"{le}\"}} {n}\n"));
    }
    out.push_str(&format!(
        "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {:.3}\n{name}_count {}\n",
        secs.len(),
        secs.iter().sum::<f64>(),
        secs.len()
    ));
    out
}

//! The `approvals` table on the embedded store: each statement behind the store traits
//! for approvals (`crate::approvals` has the type and its pure rules). Deciding is
//! first-writer-wins (`UPDATE … WHERE status = 'pending'`), a decision answers only the run
//! it is offered to (`super::chain`), and every change leaves an audit row.

use crate::approvals::*;
use crate::audit::AuditEntry;
use crate::db::Result;
use crate::event::ApprovalOption;
use crate::reviews::{Review, Verdict, Voter, judge};
use crate::status::ApprovalStatus;
use crate::time;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

const COLUMNS: &str = "approval_id, tool_run_id, tool_name, execution_id, question, context, \
    options_json, default_value, allows_text, status, chosen_value, created_at, decided_at, \
    expires_at, decided_by, decision_channel, comment, request_fingerprint, prompt_fingerprint, \
    consumed_at, consumed_by, prompt_kind, prompt_line, rule_name, expire_action, claimed_by, \
    claimed_at, resumed_run_id, screen_digest, tool_digest, superseded_by, supersedes, kept_for, \
    consumed_reason, reviews_required, reviewer_group, wait_seconds, reviews, usable_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let options: String = r.get(6)?;
    let status: String = r.get(9)?;
    let kind: Option<String> = r.get(21)?;
    Ok(Approval {
        approval_id: r.get(0)?,
        tool_run_id: r.get(1)?,
        tool_name: r.get(2)?,
        execution_id: r.get(3)?,
        question: r.get(4)?,
        context: r.get(5)?,
        options_json: serde_json::from_str(&options).unwrap_or_default(),
        default_value: r.get(7)?,
        allows_text: r.get::<_, i64>(8)? != 0,
        // A status written by a newer build reads as expired: never answerable.
        status: status.parse().unwrap_or(ApprovalStatus::Expired),
        chosen_value: r.get(10)?,
        created_at: r.get(11)?,
        decided_at: r.get(12)?,
        expires_at: r.get(13)?,
        decided_by: r.get(14)?,
        decision_channel: r.get(15)?,
        comment: r.get(16)?,
        request_fingerprint: r.get(17)?,
        prompt_fingerprint: r.get(18)?,
        consumed_at: r.get(19)?,
        consumed_by: r.get(20)?,
        prompt_kind: kind.as_deref().and_then(PromptKind::parse),
        prompt_line: r.get(22)?,
        rule_name: r.get(23)?,
        expire_action: r.get(24)?,
        claimed_by: r.get(25)?,
        claimed_at: r.get(26)?,
        resumed_run_id: r.get(27)?,
        screen_digest: r.get(28)?,
        tool_digest: r.get(29)?,
        superseded_by: r.get(30)?,
        supersedes: r.get(31)?,
        kept_for: r.get(32)?,
        consumed_reason: r.get(33)?,
        reviews_required: r.get::<_, i64>(34)?.clamp(1, u32::MAX as i64) as u32,
        reviewer_group: r.get(35)?,
        wait_seconds: r.get::<_, i64>(36)?.max(0) as u64,
        // Reviews a newer build wrote in another shape read as none: the approval then
        // needs them again, the safe direction.
        reviews: serde_json::from_str(&r.get::<_, String>(37)?).unwrap_or_default(),
        usable_at: r.get(38)?,
    })
}

fn reviews_json(reviews: &[crate::reviews::Review]) -> String {
    serde_json::to_string(reviews).unwrap_or_else(|_| "[]".into())
}

/// Inserts a new approval and its `approval_needed` audit row.
pub(crate) fn insert(tx: &Transaction<'_>, a: &Approval, actor: &str) -> Result<()> {
    let options: Vec<ApprovalOption> = a
        .options_json
        .iter()
        .map(|o| ApprovalOption {
            keys: None,
            ..o.clone()
        })
        .collect();
    tx.execute(
        &format!(
            "INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
             ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, \
             ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38, ?39)"
        ),
        params![
            a.approval_id,
            a.tool_run_id,
            a.tool_name,
            a.execution_id,
            a.question,
            a.context,
            serde_json::to_string(&options).unwrap_or_else(|_| "[]".into()),
            a.default_value,
            a.allows_text,
            a.status.as_str(),
            a.chosen_value,
            a.created_at,
            a.decided_at,
            a.expires_at,
            a.decided_by,
            a.decision_channel,
            a.comment,
            a.request_fingerprint,
            a.prompt_fingerprint,
            a.consumed_at,
            a.consumed_by,
            a.prompt_kind.map(PromptKind::as_str),
            a.prompt_line,
            a.rule_name,
            a.expire_action,
            a.claimed_by,
            a.claimed_at,
            a.resumed_run_id,
            a.screen_digest,
            a.tool_digest,
            a.superseded_by,
            a.supersedes,
            a.kept_for,
            a.consumed_reason,
            a.reviews_required.max(1),
            a.reviewer_group,
            a.wait_seconds.min(i64::MAX as u64) as i64,
            reviews_json(&a.reviews),
            a.usable_at,
        ],
    )?;
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_needed",
            tool_run_id: Some(&a.tool_run_id),
            approval_id: Some(&a.approval_id),
            actor,
            data: serde_json::json!({
                "question": a.question,
                "options": options,
                "default": a.default_value,
                "allows_text": a.allows_text,
                "prompt_kind": a.prompt_kind,
                "rule": a.rule_name,
                "expires_at": a.expires_at,
                "status": a.status,
            }),
        },
    )?;
    if a.status != ApprovalStatus::Pending {
        audit_status(tx, a, actor)?;
    }
    Ok(())
}

fn audit_status(tx: &Transaction<'_>, a: &Approval, actor: &str) -> Result<()> {
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_status_change",
            tool_run_id: Some(&a.tool_run_id),
            approval_id: Some(&a.approval_id),
            actor,
            data: serde_json::json!({
                "status": a.status,
                "chosen_value": a.logged_value(),
                "decided_by": a.decided_by,
                "decision_channel": a.decision_channel,
                "comment": a.comment,
            }),
        },
    )?;
    Ok(())
}

/// One approval by id.
pub(crate) fn get(conn: &Connection, approval_id: &str) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM approvals WHERE approval_id = ?1"),
            [approval_id],
            from_row,
        )
        .optional()?)
}

/// Approvals matching the filter, in its order (pending ones oldest first).
pub(crate) fn list(conn: &Connection, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
    let (clause, args) = crate::db::Conditions::default()
        .any_of("status", filter.statuses.iter().map(|s| s.as_str()))
        .equals("tool_name", filter.tool.as_ref())
        .equals("tool_run_id", filter.tool_run_id.as_ref())
        .equals("execution_id", filter.execution_id.as_ref())
        .equals("request_fingerprint", filter.request_fingerprint.as_ref())
        .at_least("created_at", filter.since.as_ref())
        .into_parts();
    let mut sql = format!(
        "SELECT {COLUMNS} FROM approvals{clause} ORDER BY approval_id {}",
        filter.order()
    );
    if let Some(limit) = filter.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Decides approval `id` with `value`, first writer wins. Run inside a write transaction.
/// A pending approval past its expiry is expired first (and the decider told so).
pub(crate) fn decide(
    tx: &Transaction<'_>,
    id: &str,
    value: &str,
    who: &Decider<'_>,
) -> Result<DecideOutcome> {
    let Some(mut current) = get(tx, id)? else {
        return Ok(DecideOutcome::NotFound);
    };
    let now = time::now_rfc3339();
    // A held decision whose time has come is used first: this one then finds it decided.
    if release_one(tx, &current, &now)? {
        current = get(tx, id)?.unwrap_or(current);
    }
    if current.is_overdue(&now) {
        expire_one(tx, &current, &now)?;
        let expired = get(tx, id)?.unwrap_or(current);
        return Ok(DecideOutcome::Conflict(Box::new(expired)));
    }
    if let Some(outcome) = version_refusal(&current, who) {
        return Ok(outcome);
    }
    let resolution = match value_decision(&current, value) {
        Ok(r) => r,
        Err(e) => {
            // A finished approval reports who decided it, whatever the value.
            if current.status != ApprovalStatus::Pending {
                return Ok(DecideOutcome::Conflict(Box::new(current)));
            }
            return Ok(DecideOutcome::Invalid(e));
        }
    };
    if current.status != ApprovalStatus::Pending {
        let same = current.status == resolution.status
            && (resolution.status == ApprovalStatus::Rejected
                || current.chosen_value == resolution.chosen_value);
        return Ok(if same {
            DecideOutcome::AlreadySame(Box::new(current))
        } else {
            DecideOutcome::Conflict(Box::new(current))
        });
    }
    let owner = super::runs::get(tx, &current.tool_run_id)?.and_then(|r| r.owner);
    let voter = Voter {
        by: who.by,
        channel: who.channel,
        comment: who.comment,
        groups: who.groups,
        owner: owner.as_deref(),
    };
    let (reviews, decided_by) =
        match judge(&current, &resolution, &voter, std::time::SystemTime::now()) {
            Verdict::Refused(why) => return Ok(DecideOutcome::Refused(why)),
            Verdict::Recorded { reviews, new } => {
                if new {
                    review(tx, &current, &reviews, None, who.by)?;
                }
                let after = get(tx, id)?.unwrap_or(current);
                return Ok(DecideOutcome::Reviewed(Box::new(after)));
            }
            Verdict::Hold { reviews, until } => {
                review(tx, &current, &reviews, Some(&until), who.by)?;
                let after = get(tx, id)?.unwrap_or(current);
                return Ok(DecideOutcome::Reviewed(Box::new(after)));
            }
            Verdict::Decide {
                reviews,
                decided_by,
            } => (reviews, decided_by),
        };
    let changed = tx.execute(
        "UPDATE approvals SET status = ?2, chosen_value = ?3, decided_at = ?4, decided_by = ?5,
            decision_channel = ?6, comment = ?7, reviews = ?8, usable_at = NULL
         WHERE approval_id = ?1 AND status = 'pending'",
        params![
            id,
            resolution.status.as_str(),
            resolution.chosen_value,
            now,
            decided_by,
            who.channel,
            who.comment,
            reviews_json(&reviews),
        ],
    )?;
    let after = get(tx, id)?.unwrap_or(current);
    if changed == 0 {
        return Ok(DecideOutcome::Conflict(Box::new(after)));
    }
    audit_status(tx, &after, who.by)?;
    Ok(DecideOutcome::Decided(Box::new(after)))
}

/// Closes pending approval `id` of a run being cancelled, as `by` through `channel`:
/// expired when it is overdue, else rejected — whatever it needs (reviewers are for using
/// a decision, not for ending a run), and a decision its wait timer holds is not used.
/// Returns it as it is now, when this changed it.
pub(crate) fn close_for_cancel(
    tx: &Transaction<'_>,
    id: &str,
    by: &str,
    channel: &str,
) -> Result<Option<Approval>> {
    tx.execute(
        "UPDATE approvals SET usable_at = NULL WHERE approval_id = ?1 AND status = 'pending'",
        [id],
    )?;
    let Some(current) = get(tx, id)? else {
        return Ok(None);
    };
    let now = time::now_rfc3339();
    if current.is_overdue(&now) {
        return Ok(if expire_one(tx, &current, &now)? {
            get(tx, id)?
        } else {
            None
        });
    }
    let changed = tx.execute(
        "UPDATE approvals SET status = 'rejected', chosen_value = NULL, decided_at = ?2,
            decided_by = ?3, decision_channel = ?4, comment = 'the run was cancelled'
         WHERE approval_id = ?1 AND status = 'pending'",
        params![id, now, by, channel],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let after = get(tx, id)?;
    if let Some(a) = &after {
        audit_status(tx, a, by)?;
    }
    Ok(after)
}

/// Stores the approvals an approval has so far (and, once they are all there with a wait
/// timer, when its decision will be used), with an audit row; it stays pending.
fn review(
    tx: &Transaction<'_>,
    a: &Approval,
    reviews: &[Review],
    until: Option<&str>,
    actor: &str,
) -> Result<()> {
    tx.execute(
        "UPDATE approvals SET reviews = ?2, usable_at = ?3
         WHERE approval_id = ?1 AND status = 'pending'",
        params![a.approval_id, reviews_json(reviews), until],
    )?;
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_reviewed",
            tool_run_id: Some(&a.tool_run_id),
            approval_id: Some(&a.approval_id),
            actor,
            data: serde_json::json!({
                "reviews": reviews.iter().map(|r| &r.by).collect::<Vec<_>>(),
                "required": a.reviews_required,
                "usable_at": until,
            }),
        },
    )?;
    Ok(())
}

/// Uses the decision of a held approval whose wait timer ran out: it becomes `approved`
/// with what its reviewers chose. True when it did.
fn release_one(tx: &Transaction<'_>, a: &Approval, now: &str) -> Result<bool> {
    let Some(r) = crate::reviews::release(a, now) else {
        return Ok(false);
    };
    let changed = tx.execute(
        "UPDATE approvals SET status = 'approved', chosen_value = ?2, decided_at = ?3,
            decided_by = ?4, decision_channel = ?5, comment = ?6, usable_at = NULL
         WHERE approval_id = ?1 AND status = 'pending'",
        params![
            a.approval_id,
            r.chosen_value,
            r.decided_at,
            r.decided_by,
            r.channel,
            r.comment
        ],
    )?;
    if changed > 0
        && let Some(after) = get(tx, &a.approval_id)?
    {
        audit_status(tx, &after, &r.decided_by)?;
    }
    Ok(changed > 0)
}

fn expire_one(tx: &Transaction<'_>, a: &Approval, now: &str) -> Result<bool> {
    if release_one(tx, a, now)? {
        return Ok(true);
    }
    let Some(crate::rules::Expiry {
        chosen_value: chosen,
        comment,
    }) = crate::rules::expiry(a, now)
    else {
        return Ok(false);
    };
    let changed = tx.execute(
        "UPDATE approvals SET status = 'expired', chosen_value = ?2, decided_at = ?3,
            decided_by = 'system:expiry', decision_channel = 'system:expiry', comment = ?4
         WHERE approval_id = ?1 AND status = 'pending'",
        params![a.approval_id, chosen, now, comment],
    )?;
    if changed > 0
        && let Some(after) = get(tx, &a.approval_id)?
    {
        audit_status(tx, &after, "system:expiry")?;
    }
    Ok(changed > 0)
}

/// Expires every pending approval past its `expires_at`; returns them as they are now.
pub(crate) fn expire_due(tx: &Transaction<'_>) -> Result<Vec<Approval>> {
    expire_due_of(tx, None)
}

/// Expires the pending approvals past their `expires_at` — all of them, or only those of
/// the command with this request fingerprint; returns them as they are now.
pub(crate) fn expire_due_of(
    tx: &Transaction<'_>,
    request_fingerprint: Option<&str>,
) -> Result<Vec<Approval>> {
    let now = time::now_rfc3339();
    let due: Vec<Approval> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT {COLUMNS} FROM approvals
             WHERE status = 'pending'
               AND ((expires_at IS NOT NULL AND expires_at <= ?1)
                    OR (usable_at IS NOT NULL AND usable_at <= ?1))
               AND (?2 IS NULL OR request_fingerprint = ?2)"
        ))?;
        stmt.query_map(params![&now, request_fingerprint], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut out = Vec::new();
    for a in due {
        if expire_one(tx, &a, &now)?
            && let Some(after) = get(tx, &a.approval_id)?
        {
            out.push(after);
        }
    }
    Ok(out)
}

/// Ends pending approval `old` as replaced by `new_id` (a retry showed another screen):
/// `expired`, decided by [`SUPERSEDED`], pointing to the new one. Its question, context and
/// options stay as the operator saw them. Returns the row as it is now, if it was pending.
pub(crate) fn supersede(
    tx: &Transaction<'_>,
    old: &Approval,
    new_id: &str,
    actor: &str,
) -> Result<Option<Approval>> {
    let now = time::now_rfc3339();
    let changed = tx.execute(
        "UPDATE approvals SET status = 'expired', decided_at = ?2, decided_by = ?3,
            decision_channel = ?3, comment = ?4, superseded_by = ?5
         WHERE approval_id = ?1 AND status = 'pending'",
        params![
            old.approval_id,
            now,
            SUPERSEDED,
            format!("the screen changed: asked again as {new_id}"),
            new_id
        ],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let after = get(tx, &old.approval_id)?;
    if let Some(a) = &after {
        audit_status(tx, a, actor)?;
    }
    Ok(after)
}

/// The approvals of run `tool_run_id` still pending, newest first.
pub(crate) fn pending_of(conn: &Connection, tool_run_id: &str) -> Result<Vec<Approval>> {
    list(
        conn,
        &ApprovalFilter {
            statuses: vec![ApprovalStatus::Pending],
            tool_run_id: Some(tool_run_id.to_owned()),
            ..Default::default()
        },
    )
}

/// Closes the approvals still pending for a run that has ended without their decision (the
/// tool was killed, timed out, or a cooperative tool went on without waiting): `expired`,
/// decided by `system:run-ended`, so nobody decides for a run that no longer waits.
pub(crate) fn abandon_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    why: &str,
) -> Result<Vec<Approval>> {
    let mut out = Vec::new();
    for a in pending_of(tx, tool_run_id)? {
        out.extend(close_pending(
            tx,
            tool_run_id,
            &a.approval_id,
            Channel::CLOSED,
            why,
        )?);
    }
    Ok(out)
}

/// Closes run `tool_run_id`'s pending approval `approval_id`, whose question nothing waits
/// for any more (`RunWrite::Withdraw`): as [`abandon_pending`] does, decided by
/// `system:withdrawn`. None when it is not this run's or not pending (decided meanwhile:
/// the decision stands).
pub(crate) fn withdraw_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    approval_id: &str,
    why: &str,
) -> Result<Option<Approval>> {
    close_pending(tx, tool_run_id, approval_id, WITHDRAWN, why)
}

/// Closes one pending approval of a run that nobody is to decide: `expired` by `by`, on the
/// closing channel (`system:run-ended`: a closed question answers nothing, ever), audited.
fn close_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    approval_id: &str,
    by: &str,
    why: &str,
) -> Result<Option<Approval>> {
    let changed = tx.execute(
        concat!(
            "UPDATE approvals SET status = 'expired', decided_at = ?3, decided_by = ?4,
                decision_channel = '",
            closed_channel!(),
            "', comment = ?5
             WHERE approval_id = ?1 AND tool_run_id = ?2 AND status = 'pending'"
        ),
        params![approval_id, tool_run_id, time::now_rfc3339(), by, why],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let after = get(tx, approval_id)?;
    if let Some(a) = &after {
        audit_status(tx, a, by)?;
    }
    Ok(after)
}

/// The live decisions of this command for this prompt (`rules::live`), in the order they
/// were asked: whom each is offered to is `rules::offered`'s to say.
pub(crate) fn live_answers(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND {LIVE}
         ORDER BY approval_id LIMIT 200"
    ))?;
    let rows = stmt
        .query_map(params![request_fingerprint, prompt_fingerprint], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// SQL: not closed with nobody to answer ([`Channel::Closed`]).
pub(crate) const NOT_CLOSED: &str = concat!("decision_channel IS NOT '", closed_channel!(), "'");

/// SQL for `rules::live`: a decision that can still answer.
const LIVE: &str = concat!(
    "status != 'pending' AND decision_channel IS NOT '",
    closed_channel!(),
    "' AND (consumed_at IS NULL OR kept_for IS NOT NULL)"
);

/// The decided, unused approvals of this command, newest decision first: what parked runs
/// of it wait to be resumed with (`crate::store::sqlite::chain::bind_at_start`).
pub(crate) fn fresh_decisions_of_command(
    conn: &Connection,
    request_fingerprint: &str,
) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE request_fingerprint = ?1 AND status != 'pending' AND consumed_at IS NULL
           AND {NOT_CLOSED}
         ORDER BY decided_at DESC, approval_id DESC LIMIT 50"
    ))?;
    let rows = stmt
        .query_map([request_fingerprint], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The live decisions held for run `run`'s resume: those it used and keeps (`kept_for`),
/// and its own decided ones nobody used yet.
pub(crate) fn held_for(conn: &Connection, run: &str) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE kept_for = ?1
            OR (tool_run_id = ?1 AND status != 'pending' AND consumed_at IS NULL
                AND {NOT_CLOSED})
         ORDER BY approval_id"
    ))?;
    let rows = stmt
        .query_map([run], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The approval of this command for this prompt that run `run` consumed, if any (a
/// cooperative tool re-run with its decision asks again).
pub(crate) fn find_used_by(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
    run: &str,
) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM approvals
                 WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND consumed_by = ?3
                 ORDER BY approval_id DESC LIMIT 1"
            ),
            params![request_fingerprint, prompt_fingerprint, run],
            from_row,
        )
        .optional()?)
}

/// A pending approval for this prompt of this command (a retry asking again), if any.
pub(crate) fn find_pending(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM approvals
                 WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND status = 'pending'
                 ORDER BY approval_id DESC LIMIT 1"
            ),
            params![request_fingerprint, prompt_fingerprint],
            from_row,
        )
        .optional()?)
}

/// The first use of a decided approval, by run `by_run`: consumed by it, and kept for its
/// resume while its chain is live (`kept_for`). False when it was used before or is not
/// decided. A free-text answer stays on the row until the chain ends ([`spend`]): the
/// chain's next resume types it again.
pub(crate) fn consume(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET consumed_at = ?2, consumed_by = ?3, kept_for = ?3
         WHERE approval_id = ?1 AND consumed_at IS NULL AND status != 'pending'",
        params![approval_id, time::now_rfc3339(), by_run],
    )?;
    if changed > 0 {
        audit_consumed(tx, approval_id, by_run, actor)?;
    }
    Ok(changed > 0)
}

/// A decision kept for run `by_run`'s chain used again, by `by_run` (the resume it was
/// kept for): now kept for `by_run`'s own resume. False when it is not kept (spent), or
/// kept for `by_run` already (it used it).
pub(crate) fn take_kept(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET kept_for = ?2
         WHERE approval_id = ?1 AND kept_for IS NOT NULL AND kept_for != ?2",
        params![approval_id, by_run],
    )?;
    if changed > 0 {
        audit_consumed(tx, approval_id, by_run, actor)?;
    }
    Ok(changed > 0)
}

fn audit_consumed(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<()> {
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_consumed",
            tool_run_id: Some(by_run),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "consumed_by": by_run }),
        },
    )?;
    Ok(())
}

/// Spends a decision for good (`why` recorded as `consumed_reason`): it answers nothing any
/// more, and a free-text answer is dropped from the row. False when it was not live.
pub(crate) fn spend(
    tx: &Transaction<'_>,
    approval_id: &str,
    why: &str,
    actor: &str,
) -> Result<bool> {
    let Some(a) = get(tx, approval_id)? else {
        return Ok(false);
    };
    if !crate::rules::live(&a) {
        return Ok(false);
    }
    let keep_value = !a.chose_free_text();
    tx.execute(
        "UPDATE approvals SET consumed_at = COALESCE(consumed_at, ?2), kept_for = NULL,
            consumed_reason = ?3, chosen_value = CASE WHEN ?4 THEN chosen_value END
         WHERE approval_id = ?1",
        params![approval_id, time::now_rfc3339(), why, keep_value],
    )?;
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_spent",
            tool_run_id: a.kept_for.as_deref().or(Some(&a.tool_run_id)),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "reason": why }),
        },
    )?;
    Ok(true)
}

/// Gives back decision `approval_id` that run `by_run` took but could not type (the prompt
/// went away first), to `by_run` again: unused, if `by_run` was its first user; else kept
/// for the run `by_run` resumes (`resumed`), as before `by_run` took it — offered to
/// `by_run` either way when the prompt comes back. False when `by_run` did not hold it.
pub(crate) fn give_back(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    resumed: Option<&str>,
    why: &str,
    actor: &str,
) -> Result<bool> {
    let Some(a) = get(tx, approval_id)? else {
        return Ok(false);
    };
    if a.kept_for.as_deref() != Some(by_run) {
        return Ok(false);
    }
    match (a.consumed_by.as_deref() == Some(by_run), resumed) {
        (true, _) => tx.execute(
            "UPDATE approvals SET consumed_at = NULL, consumed_by = NULL, kept_for = NULL
             WHERE approval_id = ?1",
            [approval_id],
        )?,
        (false, Some(from)) => tx.execute(
            "UPDATE approvals SET kept_for = ?2 WHERE approval_id = ?1",
            params![approval_id, from],
        )?,
        (false, None) => return Ok(false),
    };
    super::audit::append(
        tx,
        &AuditEntry {
            event: "approval_released",
            tool_run_id: Some(by_run),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "released_by": by_run, "why": why }),
        },
    )?;
    Ok(true)
}

/// Claims an approved approval for a resume by `worker`; false when another worker has it,
/// or a run already resumes its run (a re-run by hand started first: `store::sqlite::chain`).
pub(crate) fn claim(tx: &Transaction<'_>, approval_id: &str, worker: &str) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET claimed_by = ?2, claimed_at = ?3
         WHERE approval_id = ?1 AND claimed_at IS NULL AND consumed_at IS NULL
           AND status != 'pending' AND resumed_run_id IS NULL",
        params![approval_id, worker, time::now_rfc3339()],
    )?;
    Ok(changed > 0)
}

/// Records the run that resumed an approval.
pub(crate) fn set_resumed_run(tx: &Transaction<'_>, approval_id: &str, run: &str) -> Result<()> {
    tx.execute(
        "UPDATE approvals SET resumed_run_id = ?2 WHERE approval_id = ?1",
        params![approval_id, run],
    )?;
    Ok(())
}

/// Moves a pending approval to another run (a retry of the same command asking the same
/// question takes it over).
pub(crate) fn move_to_run(tx: &Transaction<'_>, approval_id: &str, run: &str) -> Result<()> {
    tx.execute(
        "UPDATE approvals SET tool_run_id = ?2 WHERE approval_id = ?1",
        params![approval_id, run],
    )?;
    Ok(())
}

/// How many approvals are pending, and how many of those expire within `soon`.
pub(crate) fn pending_counts(conn: &Connection, soon: std::time::Duration) -> Result<(i64, i64)> {
    let cutoff = time::to_rfc3339(std::time::SystemTime::now() + soon);
    Ok(conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(expires_at IS NOT NULL AND expires_at <= ?1), 0)
         FROM approvals WHERE status = 'pending'",
        [cutoff],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, OpenMode};
    use crate::testing::approval as sample;

    fn who(by: &str) -> Decider<'_> {
        Decider {
            by,
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        }
    }

    fn setup(a: &Approval) -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        db::write(&mut conn, |tx| insert(tx, a, "shim")).unwrap();
        (tmp, conn)
    }

    #[test]
    fn first_decider_wins_and_repeats_are_no_ops() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        let first = db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("alice"))).unwrap();
        let DecideOutcome::Decided(a) = first else {
            panic!("{first:?}")
        };
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert_eq!(a.decided_by.as_deref(), Some("alice"));
        let again = db::write(&mut conn, |tx| decide(tx, "AP-1", "approve", &who("bob"))).unwrap();
        assert!(matches!(again, DecideOutcome::AlreadySame(_)), "{again:?}");
        let other = db::write(&mut conn, |tx| decide(tx, "AP-1", "reject", &who("bob"))).unwrap();
        let DecideOutcome::Conflict(c) = other else {
            panic!("{other:?}")
        };
        assert_eq!(c.decided_by.as_deref(), Some("alice"));
        let missing = db::write(&mut conn, |tx| decide(tx, "AP-9", "y", &who("bob"))).unwrap();
        assert_eq!(missing, DecideOutcome::NotFound);
        // Audit: needed, then one status change.
        let events = crate::store::sqlite::audit::for_run(&conn, "TR-1").unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["approval_needed", "approval_status_change"]);
        assert!(crate::store::sqlite::audit::verify(&conn).unwrap().intact());
    }

    #[test]
    fn invalid_value_on_pending_is_reported() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        let out = db::write(&mut conn, |tx| decide(tx, "AP-1", "maybe", &who("a"))).unwrap();
        assert!(matches!(out, DecideOutcome::Invalid(_)), "{out:?}");
        assert_eq!(
            get(&conn, "AP-1").unwrap().unwrap().status,
            ApprovalStatus::Pending
        );
    }

    #[test]
    fn expiry_rejects_or_takes_the_default() {
        let mut a = sample("AP-1", PromptKind::Choice);
        a.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        let mut b = sample("AP-2", PromptKind::Choice);
        b.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        b.expire_action = "default".into();
        let mut c = sample("AP-3", PromptKind::Choice);
        c.expires_at = Some("2999-01-01T00:00:00.000Z".into());
        let (_tmp, mut conn) = setup(&a);
        db::write(&mut conn, |tx| {
            insert(tx, &b, "shim")?;
            insert(tx, &c, "shim")
        })
        .unwrap();
        let expired = db::write(&mut conn, expire_due).unwrap();
        assert_eq!(expired.len(), 2);
        let a = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(a.status, ApprovalStatus::Expired);
        assert_eq!(a.decided_by.as_deref(), Some("system:expiry"));
        assert!(!a.answers());
        let b = get(&conn, "AP-2").unwrap().unwrap();
        assert_eq!(b.chosen_value.as_deref(), Some("n"));
        assert!(b.answers());
        assert_eq!(
            get(&conn, "AP-3").unwrap().unwrap().status,
            ApprovalStatus::Pending
        );
    }

    #[test]
    fn deciding_an_overdue_approval_expires_it() {
        let mut a = sample("AP-1", PromptKind::Choice);
        a.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        let (_tmp, mut conn) = setup(&a);
        let out = db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("late"))).unwrap();
        let DecideOutcome::Conflict(c) = out else {
            panic!("{out:?}")
        };
        assert_eq!(c.status, ApprovalStatus::Expired);
    }

    #[test]
    fn a_decision_is_used_once_kept_for_its_chain_and_spent_with_a_reason() {
        let mut a = sample("AP-1", PromptKind::Unknown);
        a.allows_text = true;
        let (_tmp, mut conn) = setup(&a);
        assert!(
            live_answers(&conn, "req", "prm").unwrap().is_empty(),
            "pending is not an answer"
        );
        assert!(find_pending(&conn, "req", "prm").unwrap().is_some());
        db::write(&mut conn, |tx| decide(tx, "AP-1", "free text", &who("a"))).unwrap();
        assert_eq!(live_answers(&conn, "req", "prm").unwrap().len(), 1);
        // The first use consumes it, kept for the resume of the run that used it.
        assert!(db::write(&mut conn, |tx| consume(tx, "AP-1", "TR-2", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| consume(tx, "AP-1", "TR-3", "shim")).unwrap());
        let used = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(used.kept_for.as_deref(), Some("TR-2"));
        assert_eq!(
            used.chosen_value.as_deref(),
            Some("free text"),
            "kept for the chain"
        );
        // TR-3 resumed TR-2: it takes the kept decision on; not twice.
        assert!(db::write(&mut conn, |tx| take_kept(tx, "AP-1", "TR-3", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| take_kept(tx, "AP-1", "TR-3", "shim")).unwrap());
        // Given back (not typed after all): kept for TR-2's resume again.
        assert!(
            db::write(&mut conn, |tx| give_back(
                tx,
                "AP-1",
                "TR-3",
                Some("TR-2"),
                "test",
                "shim"
            ))
            .unwrap()
        );
        assert_eq!(
            get(&conn, "AP-1").unwrap().unwrap().kept_for.as_deref(),
            Some("TR-2")
        );
        assert_eq!(live_answers(&conn, "req", "prm").unwrap().len(), 1);
        // Spent: no longer live, the text gone, the reason kept.
        assert!(db::write(&mut conn, |tx| spend(tx, "AP-1", "the chain ended", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| spend(tx, "AP-1", "again", "shim")).unwrap());
        let spent = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(spent.kept_for, None);
        assert_eq!(spent.chosen_value, None);
        assert_eq!(spent.consumed_reason.as_deref(), Some("the chain ended"));
        assert!(live_answers(&conn, "req", "prm").unwrap().is_empty());
        assert!(crate::store::sqlite::audit::verify(&conn).unwrap().intact());
    }

    #[test]
    fn claims_are_exclusive() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        assert!(
            !db::write(&mut conn, |tx| claim(tx, "AP-1", "w1")).unwrap(),
            "pending cannot be claimed"
        );
        db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("a"))).unwrap();
        assert!(db::write(&mut conn, |tx| claim(tx, "AP-1", "w1")).unwrap());
        assert!(!db::write(&mut conn, |tx| claim(tx, "AP-1", "w2")).unwrap());
    }

    #[test]
    fn keys_are_never_stored_and_json_fields_are_the_columns() {
        let (_tmp, conn) = setup(&sample("AP-1", PromptKind::Choice));
        let raw: String = conn
            .query_row("SELECT options_json FROM approvals", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            raw,
            r#"[{"value":"y","label":"Yes"},{"value":"n","label":"No"}]"#
        );
        let a = get(&conn, "AP-1").unwrap().unwrap();
        let v = serde_json::to_value(&a).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut cols: Vec<&str> = COLUMNS.split(',').map(str::trim).collect();
        keys.sort();
        cols.sort();
        assert_eq!(keys, cols);
        let listed = list(
            &conn,
            &ApprovalFilter {
                statuses: vec![ApprovalStatus::Pending],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            pending_counts(&conn, std::time::Duration::ZERO).unwrap(),
            (1, 0)
        );
    }
}

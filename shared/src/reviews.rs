//! Required reviewers and wait timers, as GitHub environments have them: an approval may
//! need N distinct people (optionally members of a named group, never the run's own user)
//! before it counts, and an approved decision may be held for a while before anything
//! uses it. The requirement is set when the approval is asked (`[[reviewers]]` in the user
//! config, [`crate::config::ReviewersConfig`]) and stored on the row; every store judges a
//! decision by [`judge`] in the decision's own transaction and releases a held one by
//! [`release`] when its time comes, as it expires one.
//!
//! While reviews are still missing, or the decision is held, the approval stays `pending`:
//! nothing that uses decisions (a waiting shim, a re-run, `monitor worker`, a pipeline)
//! can act on it, and any allowed reviewer can still reject it.

use crate::approvals::{Approval, Channel, ValueDecision};
use crate::sanitize::sanitize_line;
use crate::status::ApprovalStatus;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// One person's approval of an approval that needs several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Review {
    /// Who approved, as the store authenticated them (OS user, login or token).
    pub by: String,
    /// The answer approved (every review of an approval approves the same one).
    pub value: String,
    /// When (the store's clock).
    pub at: String,
    /// How: `cli`, `tui`, `http`, `http:TOKEN`.
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The most people an approval may ask for.
pub const MAX_REQUIRED: u32 = 20;

/// The longest a decision may be held (30 days).
pub const MAX_WAIT_SECS: u64 = 30 * 86_400;

/// What an approval needs before its decision is used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    /// Distinct people who must approve (0 and 1: one).
    pub required: u32,
    /// They must be members of this group: an OS group for the CLI and dashboard, a
    /// PostgreSQL role for logins, a token's groups on `monitor serve`.
    pub group: Option<String>,
    /// How long an approved decision is held before it is used.
    pub wait_seconds: u64,
}

impl Requirement {
    /// The requirement an approval row carries.
    pub fn of(a: &Approval) -> Requirement {
        Requirement {
            required: a.reviews_required,
            group: a.reviewer_group.clone(),
            wait_seconds: a.wait_seconds,
        }
    }

    /// Whether it asks for reviewers (more than one, or of a group): then no policy, and
    /// not the run's own user, may approve.
    pub fn needs_reviewers(&self) -> bool {
        self.required > 1 || self.group.is_some()
    }

    /// Whether it asks for anything beyond one decision used at once.
    pub fn is_plain(&self) -> bool {
        !self.needs_reviewers() && self.wait_seconds == 0
    }

    /// The stricter of the two, item by item (the most people, the longest wait, this
    /// one's group unless it has none).
    pub fn stricter(&self, other: &Requirement) -> Requirement {
        Requirement {
            required: self.required.max(other.required),
            group: self.group.clone().or_else(|| other.group.clone()),
            wait_seconds: self.wait_seconds.max(other.wait_seconds),
        }
    }

    /// Within bounds, whoever sent it (a runner over the API): at most [`MAX_REQUIRED`]
    /// people, a wait of at most [`MAX_WAIT_SECS`], and a group only by a valid name.
    pub fn bounded(&self) -> Requirement {
        Requirement {
            required: self.required.clamp(1, MAX_REQUIRED),
            group: self.group.clone().filter(|g| valid_group(g)),
            wait_seconds: self.wait_seconds.min(MAX_WAIT_SECS),
        }
    }

    /// Whether it asks for at least what `other` does (no fewer people, no shorter wait,
    /// the same group or none asked by `other`).
    pub fn covers(&self, other: &Requirement) -> bool {
        self.required.max(1) >= other.required.max(1)
            && self.wait_seconds >= other.wait_seconds
            && (other.group.is_none() || self.group == other.group)
    }

    /// Puts it on an approval being asked.
    pub fn apply(&self, a: &mut Approval) {
        let b = self.bounded();
        a.reviews_required = b.required;
        a.reviewer_group = b.group;
        a.wait_seconds = b.wait_seconds;
    }
}

/// A group name: letters, digits, `.`, `_`, `-`, `@`, at most 64.
pub fn valid_group(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 64
        && g.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// Who is deciding, as the store sees them.
#[derive(Debug, Clone)]
pub struct Voter<'a> {
    pub by: &'a str,
    pub channel: &'a str,
    pub comment: Option<&'a str>,
    /// The groups the authenticated decider is a member of.
    pub groups: &'a [String],
    /// The run's own user (its `owner`), when the store knows it.
    pub owner: Option<&'a str>,
}

/// What a decision on a pending approval does, given what it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Decide it now, recorded as decided by `decided_by`, with these reviews (none for a
    /// plain approval; those so far for a rejection).
    Decide {
        reviews: Vec<Review>,
        decided_by: String,
    },
    /// Approved, and held by its wait timer until `until`: store the reviews and the time;
    /// it stays pending until [`release`].
    Hold { reviews: Vec<Review>, until: String },
    /// This approval counts, but more are needed (or it is already held): store the
    /// reviews; it stays pending. `new`: this decider's approval was not there before.
    Recorded { reviews: Vec<Review>, new: bool },
    /// This decider may not decide it: why. Nothing changes.
    Refused(String),
}

/// Judges a decision `res` by `voter` on pending approval `a` at `now`. The one rule every
/// store applies.
pub fn judge(a: &Approval, res: &ValueDecision, voter: &Voter<'_>, now: SystemTime) -> Verdict {
    let req = Requirement::of(a);
    if req.is_plain() && a.reviews.is_empty() {
        return Verdict::Decide {
            reviews: Vec::new(),
            decided_by: voter.by.to_owned(),
        };
    }
    if req.needs_reviewers() {
        if !Channel::of(voter.channel).is_person() {
            return Verdict::Refused(format!(
                "{} needs {}: {} is not a person",
                a.approval_id,
                needed(&req),
                sanitize_line(voter.channel)
            ));
        }
        if voter.owner == Some(voter.by) {
            return Verdict::Refused(format!(
                "{} needs {}, and {} started its run: someone else must approve it",
                a.approval_id,
                needed(&req),
                sanitize_line(voter.by)
            ));
        }
        if let Some(g) = &req.group
            && !voter.groups.iter().any(|m| m == g)
        {
            return Verdict::Refused(format!(
                "{} needs {}, and {} is not a member of `{}`",
                a.approval_id,
                needed(&req),
                sanitize_line(voter.by),
                sanitize_line(g)
            ));
        }
    }
    if res.status != ApprovalStatus::Approved {
        return Verdict::Decide {
            reviews: a.reviews.clone(),
            decided_by: voter.by.to_owned(),
        };
    }
    let value = res.chosen_value.clone().unwrap_or_default();
    if let Some(first) = a.reviews.first()
        && first.value != value
    {
        return Verdict::Refused(format!(
            "{} approved `{}`: every approval of {} must choose the same answer (reject it to start over)",
            sanitize_line(&first.by),
            sanitize_line(&first.value),
            a.approval_id
        ));
    }
    if a.usable_at.is_some() || a.reviews.iter().any(|r| r.by == voter.by) {
        return Verdict::Recorded {
            reviews: a.reviews.clone(),
            new: false,
        };
    }
    let mut reviews = a.reviews.clone();
    reviews.push(Review {
        by: voter.by.to_owned(),
        value,
        at: crate::time::to_rfc3339(now),
        channel: voter.channel.to_owned(),
        comment: voter.comment.map(str::to_owned),
    });
    if (reviews.len() as u32) < req.required.max(1) {
        return Verdict::Recorded { reviews, new: true };
    }
    if req.wait_seconds > 0 {
        let wait = Duration::from_secs(req.wait_seconds.min(MAX_WAIT_SECS));
        let until = crate::time::to_rfc3339(now.checked_add(wait).unwrap_or(now));
        return Verdict::Hold { reviews, until };
    }
    Verdict::Decide {
        decided_by: decided_by(&reviews, voter.by),
        reviews,
    }
}

/// Whether pending approval `a` is held and its time has come.
pub fn is_releasable(a: &Approval, now: &str) -> bool {
    a.status == ApprovalStatus::Pending && a.usable_at.as_deref().is_some_and(|u| u <= now)
}

/// A held approval's decision, once its time has come: what the store writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub chosen_value: String,
    /// When the people decided (the last approval's time), not when the timer let it go:
    /// a run started after that may use it, as after any decision.
    pub decided_at: String,
    pub decided_by: String,
    pub channel: String,
    pub comment: Option<String>,
}

/// What held approval `a` becomes at `now` (RFC 3339), if its time has come.
pub fn release(a: &Approval, now: &str) -> Option<Released> {
    if !is_releasable(a, now) {
        return None;
    }
    let last = a.reviews.last()?;
    Some(Released {
        chosen_value: last.value.clone(),
        decided_at: last.at.clone(),
        decided_by: decided_by(&a.reviews, &last.by),
        channel: last.channel.clone(),
        comment: Some(format!(
            "held {}s by its wait timer{}",
            a.wait_seconds,
            last.comment
                .as_deref()
                .map(|c| format!("; {c}"))
                .unwrap_or_default()
        )),
    })
}

/// The `decided_by` of a decision with these reviews (`alice, bob`), or `who` alone.
pub fn decided_by(reviews: &[Review], who: &str) -> String {
    if reviews.is_empty() {
        return who.to_owned();
    }
    reviews
        .iter()
        .map(|r| r.by.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn needed(req: &Requirement) -> String {
    let people = match req.required.max(1) {
        1 => "one approval".to_owned(),
        n => format!("{n} approvals from different people"),
    };
    match &req.group {
        Some(g) => format!("{people} from group `{}`", sanitize_line(g)),
        None => people,
    }
}

/// Where an approval stands on its requirement, for every view: `1 of 2 approvals (alice);
/// 1 more needed from group ops`, `approved by alice, bob; held until T`. `None` for an
/// approval without one.
pub fn summary(a: &Approval) -> Option<String> {
    let req = Requirement::of(a);
    if req.is_plain() && a.reviews.is_empty() {
        return None;
    }
    let required = req.required.max(1) as usize;
    let names = a
        .reviews
        .iter()
        .map(|r| sanitize_line(&r.by))
        .collect::<Vec<_>>()
        .join(", ");
    let wait = crate::time::short_duration(Duration::from_secs(req.wait_seconds));
    if a.status != ApprovalStatus::Pending {
        return (!a.reviews.is_empty() && a.status == ApprovalStatus::Approved)
            .then(|| format!("{} of {required} approvals ({names})", a.reviews.len()));
    }
    if let Some(until) = &a.usable_at {
        return Some(format!(
            "approved by {names}; held by its {wait} wait timer until {} (reject to stop it)",
            sanitize_line(until)
        ));
    }
    let got = a.reviews.len();
    let mut s = format!("{got} of {required} approvals");
    if got > 0 {
        s.push_str(&format!(" ({names})"));
    }
    let missing = required.saturating_sub(got);
    if missing > 0 && req.needs_reviewers() {
        s.push_str(&format!("; {missing} more needed"));
        if let Some(g) = &req.group {
            s.push_str(&format!(" from group {}", sanitize_line(g)));
        }
        s.push_str(", not the run's own user");
    }
    if req.wait_seconds > 0 {
        s.push_str(&format!("; then held {wait}"));
    }
    Some(s)
}

/// The same in a few characters, for a table's column: `1/2`, `1/2 ops`, `held`, `2/2`.
pub fn short(a: &Approval) -> Option<String> {
    let req = Requirement::of(a);
    if req.is_plain() && a.reviews.is_empty() {
        return None;
    }
    if a.status == ApprovalStatus::Pending && a.usable_at.is_some() {
        return Some("held".into());
    }
    let mut s = format!("{}/{}", a.reviews.len(), req.required.max(1));
    if let Some(g) = &req.group {
        s.push(' ');
        s.push_str(&sanitize_line(g));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::approval;

    fn approve(v: &str) -> ValueDecision {
        ValueDecision {
            status: ApprovalStatus::Approved,
            chosen_value: Some(v.into()),
        }
    }

    fn reject() -> ValueDecision {
        ValueDecision {
            status: ApprovalStatus::Rejected,
            chosen_value: None,
        }
    }

    fn voter<'a>(by: &'a str, groups: &'a [String]) -> Voter<'a> {
        Voter {
            by,
            channel: "cli",
            comment: None,
            groups,
            owner: Some("carol"),
        }
    }

    fn needing(n: u32, group: Option<&str>, wait: u64) -> Approval {
        let mut a = approval("AP-1", crate::approvals::PromptKind::Confirm);
        Requirement {
            required: n,
            group: group.map(str::to_owned),
            wait_seconds: wait,
        }
        .apply(&mut a);
        a
    }

    fn with(a: &Approval, v: Verdict) -> Approval {
        let mut a = a.clone();
        match v {
            Verdict::Recorded { reviews, .. } => a.reviews = reviews,
            Verdict::Hold { reviews, until } => {
                a.reviews = reviews;
                a.usable_at = Some(until);
            }
            other => panic!("not recorded: {other:?}"),
        }
        a
    }

    #[test]
    fn a_plain_approval_is_decided_at_once_by_anyone() {
        let a = needing(1, None, 0);
        let v = judge(&a, &approve("y"), &voter("carol", &[]), SystemTime::now());
        assert_eq!(
            v,
            Verdict::Decide {
                reviews: vec![],
                decided_by: "carol".into()
            }
        );
        assert_eq!(summary(&a), None);
    }

    #[test]
    fn two_people_are_needed_and_the_same_one_twice_counts_once() {
        let a = needing(2, None, 0);
        let now = SystemTime::now();
        let first = judge(&a, &approve("y"), &voter("alice", &[]), now);
        assert!(matches!(&first, Verdict::Recorded { new: true, reviews } if reviews.len() == 1));
        let a = with(&a, first);
        assert_eq!(
            summary(&a).unwrap(),
            "1 of 2 approvals (alice); 1 more needed, not the run's own user"
        );
        assert_eq!(short(&a).unwrap(), "1/2");
        let again = judge(&a, &approve("y"), &voter("alice", &[]), now);
        assert!(matches!(again, Verdict::Recorded { new: false, .. }));
        match judge(&a, &approve("y"), &voter("bob", &[]), now) {
            Verdict::Decide {
                reviews,
                decided_by,
            } => {
                assert_eq!(reviews.len(), 2);
                assert_eq!(decided_by, "alice, bob");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn never_the_runs_own_user_nor_a_policy() {
        let a = needing(2, None, 0);
        let v = judge(&a, &approve("y"), &voter("carol", &[]), SystemTime::now());
        assert!(
            matches!(&v, Verdict::Refused(w) if w.contains("carol started its run")),
            "{v:?}"
        );
        let policy = Voter {
            channel: "policy:trusted",
            by: "policy:trusted",
            ..voter("x", &[])
        };
        let v = judge(&a, &approve("y"), &policy, SystemTime::now());
        assert!(
            matches!(&v, Verdict::Refused(w) if w.contains("not a person")),
            "{v:?}"
        );
        // Rejecting is refused to them too: they are not reviewers.
        let v = judge(&a, &reject(), &voter("carol", &[]), SystemTime::now());
        assert!(matches!(v, Verdict::Refused(_)));
    }

    #[test]
    fn a_group_admits_only_its_members() {
        let a = needing(1, Some("ops"), 0);
        let ops = vec!["ops".to_owned()];
        let v = judge(&a, &approve("y"), &voter("dave", &[]), SystemTime::now());
        assert!(matches!(&v, Verdict::Refused(w) if w.contains("not a member of `ops`")));
        let v = judge(&a, &approve("y"), &voter("erin", &ops), SystemTime::now());
        assert!(matches!(v, Verdict::Decide { .. }), "{v:?}");
    }

    #[test]
    fn reviews_must_agree_and_one_rejection_ends_it() {
        let a = needing(3, None, 0);
        let now = SystemTime::now();
        let a = with(&a, judge(&a, &approve("a"), &voter("alice", &[]), now));
        let v = judge(&a, &approve("b"), &voter("bob", &[]), now);
        assert!(
            matches!(&v, Verdict::Refused(w) if w.contains("same answer")),
            "{v:?}"
        );
        let v = judge(&a, &reject(), &voter("bob", &[]), now);
        assert!(
            matches!(&v, Verdict::Decide { reviews, decided_by } if reviews.len() == 1 && decided_by == "bob")
        );
    }

    #[test]
    fn a_wait_timer_holds_the_decision_then_releases_it() {
        let a = needing(1, None, 600);
        let now = SystemTime::now();
        let held = with(&a, judge(&a, &approve("y"), &voter("carol", &[]), now));
        let until = held.usable_at.clone().unwrap();
        assert!(
            summary(&held)
                .unwrap()
                .contains("held by its 10m00s wait timer")
        );
        // Held: a second approval changes nothing, a rejection still decides.
        let v = judge(&held, &approve("y"), &voter("bob", &[]), now);
        assert!(matches!(v, Verdict::Recorded { new: false, .. }));
        assert!(matches!(
            judge(&held, &reject(), &voter("bob", &[]), now),
            Verdict::Decide { .. }
        ));
        assert_eq!(release(&held, &crate::time::to_rfc3339(now)), None);
        let r = release(&held, &until).unwrap();
        assert_eq!(r.chosen_value, "y");
        assert_eq!(r.decided_by, "carol");
        assert_eq!(r.comment.unwrap(), "held 600s by its wait timer");
    }

    #[test]
    fn a_decided_approval_says_how_many_approved() {
        let mut a = needing(2, None, 0);
        let now = SystemTime::now();
        a = with(&a, judge(&a, &approve("y"), &voter("alice", &[]), now));
        if let Verdict::Decide { reviews, .. } = judge(&a, &approve("y"), &voter("bob", &[]), now) {
            a.reviews = reviews;
        }
        a.status = ApprovalStatus::Approved;
        assert_eq!(summary(&a).unwrap(), "2 of 2 approvals (alice, bob)");
    }
}

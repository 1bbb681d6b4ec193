//! Garbage collection of finished runs: their rows and their decided approvals go; the
//! audit table `events` stays whole (it is append-only and hash-chained: deleting from it
//! would break the chain that `monitor doctor` verifies), and a `gc` row records what went.

/// What a collection removed (or would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// The runs deleted, so that their run logs can go too.
    pub runs: Vec<String>,
    /// How many approvals were deleted.
    pub approvals: usize,
}

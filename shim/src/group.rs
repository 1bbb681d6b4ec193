//! Ending a tool and everything it started: signals to its process group and to every
//! process left in its session, found through `/proc`.

use hr_shared::proc;

/// Sends `sig` to process group `pgid`; false when the group no longer exists.
pub fn signal_group(pgid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) with a negative pid addresses a process group.
    pgid > 0 && unsafe { libc::kill(-pgid, sig) } == 0
}

/// Pids of every live process in session `sid` (the tool's session: it is the leader).
pub fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc::read_stat(pid).is_some_and(|st| st.session == sid && st.state != 'Z'))
        .collect()
}

/// Sends `sig` to the tool's group and to every process still in its session (children
/// that moved to groups of their own included). Returns how many were signalled.
pub fn signal_session(sid: i32, sig: i32) -> usize {
    let mut n = usize::from(signal_group(sid, sig));
    for pid in session_members(sid) {
        // SAFETY: plain kill(2) of a pid we just read from /proc.
        if unsafe { libc::kill(pid, sig) } == 0 {
            n += 1;
        }
    }
    n
}

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

/// Every live process descended from `root` by parent links in `/proc`, at any depth,
/// with its start time — except `root`, processes in session `sid` (ended with it anyway)
/// and the subtrees of `except` (the notify hooks' watchdogs) and of nested runs'
/// finishers (`crate::finish::is_finisher`). With the shim as child
/// subreaper, a daemon that left the tool's session (`setsid`, a double fork) is re-parented
/// to the shim rather than to init, so it is still found here.
pub fn strays(root: i32, sid: i32, except: &[i32]) -> Vec<(i32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let stats: Vec<proc::ProcStat> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc::read_stat)
        .filter(|st| st.state != 'Z')
        .collect();
    let mut found: Vec<(i32, u64)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for st in stats.iter().filter(|st| st.ppid == parent) {
            if except.contains(&st.pid)
                || found.iter().any(|&(p, _)| p == st.pid)
                || crate::finish::is_finisher(st.pid)
            {
                continue;
            }
            frontier.push(st.pid);
            if st.session != sid {
                found.push((st.pid, st.start_time));
            }
        }
    }
    found
}

/// Sends `sig` to each of `pids` that is still the same process (pid and start time).
pub fn signal_strays(pids: &[(i32, u64)], sig: i32) {
    for &(pid, start) in pids {
        if proc::same_process(pid, Some(start)) {
            // SAFETY: kill(2) of a pid just checked against its start time.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Reaps this process's exited children that came to it as orphans of the tool: zombies
/// whose parent is now this process — not `tool` (its own child, reaped by its exit
/// status), nor the `except` watchdogs, nor children in this process's own process group
/// (which it started and waits for itself).
pub fn reap_orphans(tool: i32, except: &[i32]) {
    let me = std::process::id() as i32;
    // SAFETY: getpgrp cannot fail.
    let my_group = unsafe { libc::getpgrp() };
    // Only this process's children, as the kernel lists them (cheap, no walk of /proc).
    let Ok(children) = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")) else {
        return;
    };
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let Some(st) = proc::read_stat(pid) else {
            continue;
        };
        if st.ppid == me
            && st.state == 'Z'
            && pid != tool
            && st.pgrp != my_group
            && !except.contains(&pid)
        {
            let mut status = 0;
            // SAFETY: waitpid of a child of ours that has exited; WNOHANG never blocks.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// Makes this process the child subreaper of its descendants: orphans are re-parented to
/// it, not to init, so [`strays`] can find daemons the tool started.
pub fn become_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes plain integers; failure leaves the
    // default (orphans go to init) and only makes strays harder to find.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
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

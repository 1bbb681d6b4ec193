//! Facts about processes and users from the kernel: `/proc/PID/stat`, liveness, start
//! times (to tell a reused pid apart), the real user behind a uid, and the host name.

use std::ffi::{CStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The fields of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) that we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub comm: String,
    /// `R` running, `S` sleeping, `D` disk sleep, `T` stopped, `Z` zombie, …
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub tty_nr: i32,
    /// User and system CPU time in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Start time after boot in clock ticks: with the pid, identifies a process uniquely.
    pub start_time: u64,
    /// Where the process's arguments are in its memory, start and end (what
    /// `/proc/PID/cmdline` shows); None on kernels before 3.5, which do not say.
    pub arg_area: Option<(u64, u64)>,
}

impl ProcStat {
    /// CPU time used, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// Parses the text of a `stat` file. The command name may hold spaces and parentheses, so
/// the fields are counted from its last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    let field = |i: usize| rest.get(i).copied();
    Some(ProcStat {
        pid,
        comm,
        state: field(0)?.chars().next()?,
        ppid: field(1)?.parse().ok()?,
        pgrp: field(2)?.parse().ok()?,
        session: field(3)?.parse().ok()?,
        tty_nr: field(4)?.parse().ok()?,
        utime: field(11)?.parse().ok()?,
        stime: field(12)?.parse().ok()?,
        start_time: field(19)?.parse().ok()?,
        arg_area: field(45)
            .and_then(|a| a.parse().ok())
            .zip(field(46).and_then(|e| e.parse().ok())),
    })
}

/// Reads `/proc/PID/stat`.
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is a headless-run (its executable's name, through `/proc/PID/exe`) whose
/// real user is `uid` when given: the only process a cancellation may signal, so that a
/// forged run row cannot point `monitor cancel` at another program.
pub fn is_shim(pid: i32, uid: Option<u64>) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    // A binary replaced while it ran reads as `headless-run (deleted)`.
    let named = name.as_deref().is_some_and(|n| {
        n == "headless-run" || n.strip_suffix(" (deleted)") == Some("headless-run")
    });
    let owner = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next()?.parse::<u64>().ok())
        });
    named && uid.is_none_or(|u| owner == Some(u))
}

/// Whether a process with this pid exists (ours or not).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether `pid` is still the process that had `start_time` (not a reused pid). Where
/// `/proc` cannot say, liveness alone decides.
pub fn same_process(pid: i32, start_time: Option<u64>) -> bool {
    if !pid_alive(pid) {
        return false;
    }
    match (start_time, read_stat(pid)) {
        (Some(expected), Some(stat)) => stat.start_time == expected && stat.state != 'Z',
        (_, Some(stat)) => stat.state != 'Z',
        _ => true,
    }
}

/// The pids of `pid`'s ancestors, nearest first (stops at pid 1 or an unreadable parent).
pub fn ancestors(pid: i32) -> Vec<ProcStat> {
    let mut out = Vec::new();
    let mut next = read_stat(pid).map(|s| s.ppid);
    while let Some(ppid) = next {
        if ppid <= 1 || out.len() > 64 {
            break;
        }
        match read_stat(ppid) {
            Some(stat) => {
                next = Some(stat.ppid);
                out.push(stat);
            }
            None => break,
        }
    }
    out
}

/// The real uid of this process (who really runs it, whatever `$USER` says).
pub fn real_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The effective uid of this process: whom the files it creates belong to, and so the
/// identity of an embedded store it may write.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

struct Passwd {
    name: OsString,
    home: OsString,
}

fn passwd(uid: u32) -> Option<Passwd> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: pwd, buf and result are valid for the call; getpwuid_r fills pwd with
        // pointers into buf, which outlives their use below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: on success pw_name and pw_dir are NUL-terminated strings inside buf.
        let (name, home) = unsafe {
            (
                CStr::from_ptr(pwd.pw_name).to_bytes().to_vec(),
                CStr::from_ptr(pwd.pw_dir).to_bytes().to_vec(),
            )
        };
        return Some(Passwd {
            name: OsString::from_vec(name),
            home: OsString::from_vec(home),
        });
    }
}

/// The home directory of `uid` from the password database.
pub fn passwd_home(uid: u32) -> Option<PathBuf> {
    passwd(uid).map(|p| PathBuf::from(p.home))
}

/// The user name of `uid`: from `/etc/passwd` directly (cheap, and what NSS would answer
/// for local users), else from the password database through NSS, else `uid:N`.
pub fn user_name(uid: u32) -> String {
    if let Some(name) = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| passwd_file_name(&t, uid))
    {
        return name;
    }
    passwd(uid)
        .map(|p| p.name.to_string_lossy().into_owned())
        .or_else(|| getent_name(uid))
        .unwrap_or_else(|| format!("uid:{uid}"))
}

/// The name of `uid` as `getent passwd UID` reports it: the system's own NSS (LDAP, sssd,
/// extrausers …), which a statically linked binary may not be able to load itself.
fn getent_name(uid: u32) -> Option<String> {
    let out = std::process::Command::new("getent")
        .args(["passwd", &uid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    passwd_file_name(&String::from_utf8_lossy(&out.stdout), uid)
}

/// The name of `uid` in the text of a passwd file (`name:x:uid:gid:…`).
pub fn passwd_file_name(text: &str, uid: u32) -> Option<String> {
    text.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        let id: u32 = f.next()?.parse().ok()?;
        (id == uid && !name.is_empty() && !name.starts_with('+')).then(|| name.to_owned())
    })
}

/// A user as messages name one: `alice (uid 1000)`, or `uid 4242` when the name is unknown
/// (cleaned: a name comes from the password database).
pub fn describe_uid(uid: u32) -> String {
    match user_name(uid) {
        name if name.starts_with("uid:") => format!("uid {uid}"),
        name => format!("{} (uid {uid})", crate::sanitize::sanitize_line(&name)),
    }
}

/// The names of the OS groups this process is in (its real gid and supplementary groups,
/// as the kernel holds them): what a decider's membership of a reviewers group is checked
/// against on the embedded store. Names from `/etc/group`, else `getent group`; a group
/// without a name is left out.
pub fn current_groups() -> Vec<String> {
    // SAFETY: getgroups with 0 returns the count; then fills a buffer of that length.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut gids = vec![0 as libc::gid_t; n.max(0) as usize];
    // SAFETY: gids is writable for its length.
    let got = unsafe { libc::getgroups(gids.len() as libc::c_int, gids.as_mut_ptr()) };
    gids.truncate(got.max(0) as usize);
    // SAFETY: getgid cannot fail.
    gids.push(unsafe { libc::getgid() });
    gids.sort_unstable();
    gids.dedup();
    let file = std::fs::read_to_string("/etc/group").unwrap_or_default();
    gids.into_iter()
        .filter_map(|gid| group_file_name(&file, gid).or_else(|| getent_group(gid)))
        .collect()
}

fn getent_group(gid: u32) -> Option<String> {
    let out = std::process::Command::new("getent")
        .args(["group", &gid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(())?;
    group_file_name(&String::from_utf8_lossy(&out.stdout), gid)
}

/// The name of `gid` in the text of a group file (`name:x:gid:members`).
pub fn group_file_name(text: &str, gid: u32) -> Option<String> {
    passwd_file_name(text, gid)
}

/// The OS user running this process, by real uid.
pub fn current_user() -> String {
    user_name(real_uid())
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let text = "4242 (my (odd) tool) S 100 4242 4242 34816 4242 4194304 100 0 0 0 7 3 0 0 20 0 1 0 98765 1000 100 0";
        let st = parse_stat(text).unwrap();
        assert_eq!(st.pid, 4242);
        assert_eq!(st.comm, "my (odd) tool");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 100);
        assert_eq!(st.pgrp, 4242);
        assert_eq!(st.session, 4242);
        assert_eq!(st.cpu_ticks(), 10);
        assert_eq!(st.start_time, 98765);
        assert_eq!(
            st.arg_area, None,
            "a short line (an old kernel) says nothing of it"
        );
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S").is_none());
    }

    #[test]
    fn a_processs_own_stat_says_where_its_arguments_are() {
        let st = read_stat(std::process::id() as i32).unwrap();
        let (start, end) = st.arg_area.unwrap();
        let len: usize = std::env::args_os().map(|a| a.len() + 1).sum();
        assert_eq!(end - start, len as u64);
    }

    #[test]
    fn passwd_file_lookup() {
        let text = "root:x:0:0:root:/root:/bin/bash\n+nis::::::\nbad line\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(passwd_file_name(text, 0).as_deref(), Some("root"));
        assert_eq!(passwd_file_name(text, 1000).as_deref(), Some("alice"));
        assert_eq!(passwd_file_name(text, 7), None);
    }

    #[test]
    fn reads_our_own_process() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(same_process(me.pid, Some(me.start_time)));
        assert!(!same_process(me.pid, Some(me.start_time + 1)));
        assert!(!pid_alive(0));
        assert!(!current_user().is_empty());
        assert!(!hostname().is_empty());
    }
}

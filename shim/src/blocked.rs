//! Is the tool blocked reading its terminal? Looks at every thread of every process in the
//! pty's foreground process group through `/proc/PID/task/TID/{stat,syscall}`: a thread
//! asleep in `read` on a descriptor that is the pty (or `/dev/tty`), or in
//! `poll`/`select`/`epoll` with such a descriptor in its read set, is waiting for input.
//! A shell in `wait4`, a `sleep`, a busy loop or a read on a pipe are not. Also: which
//! program reads (a pager is no prompt), and the readers outside the tool's session that a
//! daemon started on the tool's terminal (gpg-agent's pinentry).

use hr_shared::proc::{self, ProcStat};
use std::fs;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};

/// What the kernel says a thread is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Syscall {
    /// On a CPU.
    Running,
    /// Asleep in syscall `nr` with these arguments.
    Blocked { nr: i64, args: [u64; 6] },
    /// Asleep outside a syscall (`-1`), or the line did not parse.
    Other,
}

/// Parses `/proc/PID/task/TID/syscall`.
pub fn parse_syscall(text: &str) -> Syscall {
    let mut fields = text.split_ascii_whitespace();
    match fields.next() {
        Some("running") => Syscall::Running,
        Some(nr) => {
            let Ok(nr) = nr.parse::<i64>() else {
                return Syscall::Other;
            };
            if nr < 0 {
                return Syscall::Other;
            }
            let mut args = [0u64; 6];
            for slot in &mut args {
                match fields
                    .next()
                    .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                {
                    Some(v) => *slot = v,
                    None => return Syscall::Other,
                }
            }
            Syscall::Blocked { nr, args }
        }
        None => Syscall::Other,
    }
}

/// The descriptors an epoll instance watches for input, from `/proc/PID/fdinfo/EPFD`
/// (`tfd:        5 events:       19 data: …`).
pub fn parse_epoll_fdinfo(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("tfd:")?;
            let mut it = rest.split_ascii_whitespace();
            let fd: i32 = it.next()?.parse().ok()?;
            let events = match (it.next(), it.next()) {
                (Some("events:"), Some(ev)) => u32::from_str_radix(ev, 16).ok()?,
                _ => return None,
            };
            (events & libc::EPOLLIN as u32 != 0).then_some(fd)
        })
        .collect()
}

/// How a syscall number reads input, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputWait {
    /// `read(fd, …)` and friends: the descriptor is argument 0.
    Read,
    /// `poll`/`ppoll(fds, nfds, …)`.
    Poll,
    /// `select`/`pselect6(nfds, readfds, …)`.
    Select,
    /// `epoll_wait`/`epoll_pwait(epfd, …)`.
    Epoll,
}

fn input_wait(nr: i64) -> Option<InputWait> {
    #[cfg(target_arch = "x86_64")]
    {
        if nr == libc::SYS_poll {
            return Some(InputWait::Poll);
        }
        if nr == libc::SYS_select {
            return Some(InputWait::Select);
        }
        if nr == libc::SYS_epoll_wait {
            return Some(InputWait::Epoll);
        }
    }
    if nr == libc::SYS_read || nr == libc::SYS_readv || nr == libc::SYS_pread64 {
        Some(InputWait::Read)
    } else if nr == libc::SYS_ppoll {
        Some(InputWait::Poll)
    } else if nr == libc::SYS_pselect6 {
        Some(InputWait::Select)
    } else if nr == libc::SYS_epoll_pwait || nr == libc::SYS_epoll_pwait2 {
        Some(InputWait::Epoll)
    } else {
        None
    }
}

/// `/dev/tty`: a process's controlling terminal, whichever it is.
const DEV_TTY: (u32, u32) = (5, 0);

/// Whether descriptor `fd` of `pid` is the tool's terminal; `/dev/tty` counts only for
/// processes whose controlling terminal it is (`own_tty`).
fn fd_is_terminal(pid: i32, fd: i32, tty_rdev: u64, own_tty: bool) -> bool {
    let Ok(meta) = fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
        return false;
    };
    if !meta.file_type().is_char_device() {
        return false;
    }
    let rdev = meta.rdev();
    rdev == tty_rdev || (own_tty && (libc::major(rdev), libc::minor(rdev)) == DEV_TTY)
}

fn read_mem(pid: i32, addr: u64, len: usize) -> Option<Vec<u8>> {
    if addr == 0 || len == 0 || len > 64 * 1024 {
        return None;
    }
    let f = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, addr).ok()?;
    Some(buf)
}

/// The descriptors a blocked syscall waits to read, as far as `/proc` lets us see.
fn watched_fds(pid: i32, kind: InputWait, args: &[u64; 6]) -> Vec<i32> {
    match kind {
        InputWait::Read => vec![args[0] as i32],
        InputWait::Poll => {
            let nfds = (args[1] as usize).min(4096);
            let Some(raw) = read_mem(pid, args[0], nfds * 8) else {
                return Vec::new();
            };
            raw.chunks_exact(8)
                .filter_map(|p| {
                    let fd = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
                    let events = i16::from_ne_bytes([p[4], p[5]]);
                    (fd >= 0 && events & libc::POLLIN != 0).then_some(fd)
                })
                .collect()
        }
        InputWait::Select => {
            let nfds = (args[0] as usize).min(libc::FD_SETSIZE);
            let Some(raw) = read_mem(pid, args[1], nfds.div_ceil(8)) else {
                return Vec::new();
            };
            (0..nfds)
                .filter(|&fd| raw[fd / 8] & (1 << (fd % 8)) != 0)
                .map(|fd| fd as i32)
                .collect()
        }
        InputWait::Epoll => fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", args[0] as i32))
            .map(|t| parse_epoll_fdinfo(&t))
            .unwrap_or_default(),
    }
}

/// One thread's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    pub state: char,
    /// `Some(true)`: blocked waiting for terminal input; `None`: `/proc` would not say.
    pub reads_tty: Option<bool>,
}

/// The foreground group at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupSample {
    pub threads: Vec<ThreadSample>,
    /// CPU time of the whole group, in clock ticks.
    pub cpu_ticks: u64,
    pub pids: Vec<i32>,
    /// The processes with a thread waiting on the terminal.
    pub readers: Vec<ProcStat>,
}

impl GroupSample {
    /// Who reads the terminal, as one number (a digest of the readers' pids and start
    /// times): the same process still blocked at the same read gives the same one.
    pub fn reader_id(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if self.readers.is_empty() {
            return None;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for r in &self.readers {
            (r.pid, r.start_time).hash(&mut h);
        }
        Some(h.finish())
    }
}

/// Programs that show text a screen at a time and wait for a key to go on: a pager's
/// prompt (`:`, `(END)`, `--More--`) asks nothing. `pager` is Debian's alternative that
/// `man` and others run.
pub const PAGERS: [&str; 6] = ["less", "more", "most", "pg", "pager", "moar"];

/// What a sample says about waiting for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// A thread is blocked on the terminal and none is running.
    Yes,
    /// Nothing waits on the terminal, or something is running.
    No,
    /// `/proc` refused to say (setuid or non-dumpable tools); every thread is asleep.
    Unknown,
}

impl GroupSample {
    /// Whether what waits on the terminal is a pager.
    pub fn pager(&self) -> bool {
        !self.readers.is_empty()
            && self
                .readers
                .iter()
                .all(|p| PAGERS.contains(&p.comm.as_str()))
    }

    /// Whether no thread is on a CPU or in an uninterruptible wait.
    pub fn all_asleep(&self) -> bool {
        !self.threads.is_empty()
            && self
                .threads
                .iter()
                .all(|t| !matches!(t.state, 'R' | 'D' | 'T' | 't'))
    }

    /// Adds the threads of process `st`; `own_tty`: the terminal is its controlling one.
    fn add(&mut self, st: &ProcStat, tty_rdev: u64, own_tty: bool) {
        self.pids.push(st.pid);
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", st.pid)) else {
            return;
        };
        let mut reads = false;
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<i32>().ok())
            else {
                continue;
            };
            let base = format!("/proc/{}/task/{tid}", st.pid);
            let Some(tstat) = fs::read_to_string(format!("{base}/stat"))
                .ok()
                .and_then(|t| proc::parse_stat(&t))
            else {
                continue;
            };
            self.cpu_ticks += tstat.cpu_ticks();
            let reads_tty = match fs::read_to_string(format!("{base}/syscall")) {
                Err(_) => None,
                Ok(text) => Some(match parse_syscall(&text) {
                    Syscall::Blocked { nr, args } => input_wait(nr).is_some_and(|kind| {
                        watched_fds(st.pid, kind, &args)
                            .into_iter()
                            .any(|fd| fd_is_terminal(st.pid, fd, tty_rdev, own_tty))
                    }),
                    _ => false,
                }),
            };
            reads |= reads_tty == Some(true);
            self.threads.push(ThreadSample {
                state: tstat.state,
                reads_tty,
            });
        }
        if reads {
            self.readers.push(st.clone());
        }
    }

    /// Whether the group waits for terminal input.
    pub fn reading(&self) -> Reading {
        if self.threads.is_empty()
            || self
                .threads
                .iter()
                .any(|t| matches!(t.state, 'R' | 'D' | 'T' | 't'))
        {
            return Reading::No;
        }
        if self.threads.iter().any(|t| t.reads_tty == Some(true)) {
            Reading::Yes
        } else if self.threads.iter().any(|t| t.reads_tty.is_none()) {
            Reading::Unknown
        } else {
            Reading::No
        }
    }
}

/// Samples the processes of foreground group `pgrp` among `root`'s descendants (falling back
/// to a scan of `root`'s session when the group is not found that way). Without `/proc`
/// (macOS, a restricted mount) nothing can be seen: the sample says "unknown", and only a
/// steady, prompt-shaped screen counts.
pub fn sample(root: i32, pgrp: i32, tty_rdev: u64) -> GroupSample {
    if fs::metadata("/proc/self/stat").is_err() {
        return GroupSample {
            threads: vec![ThreadSample {
                state: 'S',
                reads_tty: None,
            }],
            pids: vec![pgrp],
            ..GroupSample::default()
        };
    }
    let mut members: Vec<ProcStat> = descendants(root)
        .into_iter()
        .filter(|s| s.pgrp == pgrp)
        .collect();
    if members.is_empty() {
        members = session_scan(root, pgrp);
    }
    let mut out = GroupSample::default();
    for st in &members {
        out.add(st, tty_rdev, true);
    }
    out
}

/// Processes outside the tool's session `sid` that have the tool's terminal open (by its
/// device, not as `/dev/tty`) — the helper a daemon starts on the terminal the tool names,
/// as gpg-agent does with pinentry, which is in neither the tool's group nor its session.
/// Only processes of the shim's own user. Walks all of `/proc`: called only when the
/// foreground group is asleep on something else while the terminal's modes say that
/// someone reads keys.
pub fn outside_openers(tty_rdev: u64, sid: i32) -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let me = std::process::id() as i32;
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            (pid != me && e.metadata().ok()?.uid() == uid).then_some(pid)
        })
        .filter(|&pid| {
            fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    fs::metadata(fd.path())
                        .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == tty_rdev)
                })
            })
        })
        .filter_map(proc::read_stat)
        .filter(|st| st.session != sid && st.state != 'Z')
        .collect()
}

/// Samples processes outside the tool's session (see [`outside_openers`]): only the tool's
/// terminal itself counts as it, not their own `/dev/tty`.
pub fn sample_outside(procs: &[ProcStat], tty_rdev: u64) -> GroupSample {
    let mut out = GroupSample::default();
    for st in procs {
        out.add(st, tty_rdev, false);
    }
    out
}

fn descendants(root: i32) -> Vec<ProcStat> {
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if out.len() > 4096 {
            break;
        }
        let Some(st) = proc::read_stat(pid) else {
            continue;
        };
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                if let Ok(children) = fs::read_to_string(task.path().join("children")) {
                    queue.extend(
                        children
                            .split_ascii_whitespace()
                            .filter_map(|c| c.parse::<i32>().ok()),
                    );
                }
            }
        }
        out.push(st);
    }
    out
}

fn session_scan(sid: i32, pgrp: i32) -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc::read_stat)
        .filter(|s| s.session == sid && s.pgrp == pgrp)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_syscall_lines() {
        assert_eq!(parse_syscall("running\n"), Syscall::Running);
        assert_eq!(parse_syscall("-1 0x7ffd 0x0\n"), Syscall::Other);
        assert_eq!(
            parse_syscall("0 0x0 0x7ffc1000 0x1 0x0 0x0 0x0 0x7ffc0ff8 0x7f00aa\n"),
            Syscall::Blocked {
                nr: 0,
                args: [0, 0x7ffc1000, 1, 0, 0, 0]
            }
        );
        assert_eq!(parse_syscall("7 0x1"), Syscall::Other);
        assert_eq!(parse_syscall(""), Syscall::Other);
    }

    #[test]
    fn parses_epoll_fdinfo() {
        let text = "pos:\t0\nflags:\t02\nmnt_id:\t15\ntfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:17\ntfd:        7 events:        4 data: 7 pos:0 ino:1 sdev:2\n";
        assert_eq!(parse_epoll_fdinfo(text), vec![0]);
    }

    #[test]
    fn reading_needs_a_tty_wait_and_nothing_running() {
        let t = |state, reads_tty| ThreadSample { state, reads_tty };
        let s = |threads| GroupSample {
            threads,
            ..GroupSample::default()
        };
        assert_eq!(s(vec![t('S', Some(true))]).reading(), Reading::Yes);
        // A Python main thread in a futex while another thread reads.
        assert_eq!(
            s(vec![t('S', Some(false)), t('S', Some(true))]).reading(),
            Reading::Yes
        );
        assert_eq!(
            s(vec![t('R', Some(false)), t('S', Some(true))]).reading(),
            Reading::No
        );
        assert_eq!(s(vec![t('S', Some(false))]).reading(), Reading::No);
        assert_eq!(s(vec![t('S', None)]).reading(), Reading::Unknown);
        assert_eq!(s(vec![]).reading(), Reading::No);
    }

    #[test]
    fn a_pager_is_a_group_whose_only_readers_are_pagers() {
        let reader = |comm: &str| ProcStat {
            pid: 1,
            comm: comm.into(),
            state: 'S',
            ppid: 0,
            pgrp: 1,
            session: 1,
            tty_nr: 0,
            utime: 0,
            stime: 0,
            start_time: 0,
            arg_area: None,
        };
        let s = |readers: Vec<ProcStat>| GroupSample {
            readers,
            ..GroupSample::default()
        };
        assert!(s(vec![reader("less")]).pager());
        assert!(s(vec![reader("pager")]).pager(), "Debian's alternative");
        assert!(!s(vec![reader("python3")]).pager());
        assert!(!s(vec![reader("less"), reader("bash")]).pager());
        assert!(!s(vec![]).pager(), "nothing reads");
    }

    #[test]
    fn syscall_numbers_come_from_libc() {
        assert_eq!(input_wait(libc::SYS_read), Some(InputWait::Read));
        assert_eq!(input_wait(libc::SYS_ppoll), Some(InputWait::Poll));
        assert_eq!(input_wait(libc::SYS_pselect6), Some(InputWait::Select));
        assert_eq!(input_wait(libc::SYS_epoll_pwait), Some(InputWait::Epoll));
        assert_eq!(input_wait(libc::SYS_wait4), None);
        assert_eq!(input_wait(libc::SYS_nanosleep), None);
    }
}

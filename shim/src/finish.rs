//! The finisher: a run's last writes, handed over by a shim that exits with its tool's code
//! without waiting for the database (`StoreHandle::hand_off`; `hr_shared::finishing` for
//! the lock readers wait on). It is the shim itself started again as `headless-run-finish`
//! in a session of its own (no terminal signal of the caller's reaches it), reading the
//! hand-off from a pipe on its stdin, and holding the shim's finishing lock, inherited as
//! descriptor 3, until it exits.
//!
//! It writes as the store thread would have, in one transaction, with the combined log's
//! status events: should the database be locked, the run's row goes to the spool after a
//! moment (so that a finisher killed while it waits still leaves the run behind for
//! reconciliation), and writes that cannot land within the busy timeout leave the run's
//! final row in the spool, as a shim does.

use crate::spawn::{check, with_spawn_objects};
use crate::store::reopen;
use hr_shared::paths::StatePaths;
use hr_shared::runs::ToolRun;
use hr_shared::store::{Asker, RunWrite};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The name the shim is started under to finish a run (argv[0]).
pub const FINISHER_NAME: &str = "headless-run-finish";

/// The largest hand-off: what a pipe takes without blocking the exiting shim.
const MAX_HANDOFF: usize = 60 * 1024;

/// The descriptor the finisher holds the finishing lock on.
const LOCK_FD: libc::c_int = 3;

/// What a shim hands to its finisher.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Handoff {
    /// The state dir and the database (the embedded store only).
    pub root: PathBuf,
    pub db: PathBuf,
    /// The run.
    pub ident: Asker,
    /// Every write of the run, in order (none has been written: the shim never opened the
    /// store).
    pub writes: Vec<RunWrite>,
    /// The run's final row, spooled when the writes cannot land.
    pub fallback: ToolRun,
}

/// Whether `pid` is a finisher: the shim's own executable under [`FINISHER_NAME`]. A
/// supervised tool's run ends what the tool left behind, but a finisher of a nested run
/// (re-parented to the outer shim, its subreaper) is that run's record, not the tool's.
pub fn is_finisher(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).next() == Some(FINISHER_NAME.as_bytes()))
        && std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .zip(std::env::current_exe().ok())
            .is_some_and(|(theirs, ours)| theirs == ours)
}

/// Starts a finisher for `handoff`, giving it `lock` (the finishing lock, held shared).
/// False when it could not be started: the caller waits for its store thread instead.
pub fn start(handoff: &Handoff, lock: OwnedFd) -> bool {
    let Ok(json) = serde_json::to_vec(handoff) else {
        return false;
    };
    if json.len() > MAX_HANDOFF {
        return false;
    }
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, both close-on-exec.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // SAFETY: both were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Written before the finisher exists, so never blocking: a pipe smaller than the
    // hand-off (a user over `pipe-user-pages-soft` gets one page) means no hand-off.
    // SAFETY: fcntl on a descriptor owned here.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let mut write = std::fs::File::from(write);
    if write.write_all(&json).is_err() {
        return false;
    }
    drop(write);
    // Above the descriptors the finisher gets them at (a shim started with 0–2 closed has
    // its own at low numbers).
    let (Ok(read), Ok(lock)) = (above_targets(&read), above_targets(&lock)) else {
        return false;
    };
    spawn(read.as_raw_fd(), lock.as_raw_fd()).is_ok()
}

/// A close-on-exec copy of `fd` numbered above 3.
fn above_targets(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, LOCK_FD + 1) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `copy` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// `posix_spawn`s `/proc/self/exe` as the finisher: a new session, stdin the hand-off,
/// stdout /dev/null, stderr the shim's (a warning still reaches the caller's log), the lock
/// at descriptor 3, signals at their defaults and unblocked.
fn spawn(stdin: libc::c_int, lock: libc::c_int) -> std::io::Result<()> {
    let exe = CString::new(b"/proc/self/exe".to_vec()).map_err(std::io::Error::other)?;
    let argv0 = CString::new(FINISHER_NAME).map_err(std::io::Error::other)?;
    let devnull = CString::new(b"/dev/null".to_vec()).map_err(std::io::Error::other)?;
    let argv = [argv0.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let mut envp: Vec<*mut libc::c_char> = env.iter().map(|c| c.as_ptr() as *mut _).collect();
    envp.push(std::ptr::null_mut());
    // SAFETY: every pointer handed to posix_spawn outlives the call.
    with_spawn_objects(|attr, actions| unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut defaults);
        check(libc::posix_spawnattr_setsigdefault(attr, &defaults))?;
        check(libc::posix_spawnattr_setflags(
            attr,
            libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short,
        ))?;
        // Both sources are above every target (`start`), so neither dup2 overwrites the
        // other's source.
        check(libc::posix_spawn_file_actions_adddup2(
            actions, lock, LOCK_FD,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            actions,
            stdin,
            libc::STDIN_FILENO,
        ))?;
        check(libc::posix_spawn_file_actions_addopen(
            actions,
            libc::STDOUT_FILENO,
            devnull.as_ptr(),
            libc::O_WRONLY,
            0,
        ))?;
        let mut pid: libc::pid_t = 0;
        check(libc::posix_spawn(
            &mut pid,
            exe.as_ptr(),
            actions,
            attr,
            argv.as_ptr(),
            envp.as_ptr(),
        ))
    })
}

/// The finisher's main: reads the hand-off and writes it. Its exit code is for nobody (the
/// shim is gone), but says how it went: 0 landed, 1 spooled or lost.
pub fn main() -> u8 {
    // Bookkeeping that takes milliseconds: a service manager ending what its main process
    // left (systemd's SIGTERM to the cgroup) or a terminal's hang-up does not cut it short.
    // SAFETY: setting dispositions to ignore; no handler runs.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // Nothing but the hand-off, stdout, stderr and the lock: a descriptor the shim was
    // given without close-on-exec (a jobserver's pipe) is not kept open here.
    // SAFETY: close_range on this process's own descriptors above the lock.
    unsafe { libc::syscall(libc::SYS_close_range, LOCK_FD as u32 + 1, u32::MAX, 0) };
    let mut json = Vec::new();
    if std::io::stdin()
        .take(MAX_HANDOFF as u64 + 1)
        .read_to_end(&mut json)
        .is_err()
    {
        return 1;
    }
    let Ok(handoff) = serde_json::from_slice::<Handoff>(&json) else {
        eprintln!("headless-run-finish: not a hand-off from headless-run on stdin");
        return 1;
    };
    if finish(handoff) { 0 } else { 1 }
}

/// Writes a hand-off; whether it landed.
fn finish(handoff: Handoff) -> bool {
    let paths = StatePaths {
        db: handoff.db,
        ..StatePaths::at(handoff.root)
    };
    // Written as the store thread writes a run's first batch: should it wait on a lock,
    // the row goes to the spool meanwhile, so that a finisher killed while it waits still
    // leaves the run behind.
    let mut thread = reopen(paths.clone(), handoff.ident);
    let landed = thread.finish(handoff.writes);
    if !landed {
        // As the shim does when its store stays locked: the final state for a later writer.
        let _ = hr_shared::spool::write(&paths, &handoff.fallback);
    }
    landed
}

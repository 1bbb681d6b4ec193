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

use crate::spawn::{check, new_session, with_spawn_objects};
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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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

impl Handoff {
    /// The state dir's paths, with the database the shim used.
    fn paths(&self) -> StatePaths {
        StatePaths {
            db: self.db.clone(),
            ..StatePaths::at(self.root.clone())
        }
    }
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

/// Finishes `handoff` in a child forked from this process, when it has a single thread (the
/// supervision's other threads have ended by the run's end): the child has the run in memory
/// already, so nothing is encoded, piped or exec'd, and the shim's `fork` returns sooner than
/// a `posix_spawn` waiting for its exec. Otherwise, or where the child could not be told
/// from the shim in `ps` (an argument area shorter than [`FINISHER_NAME`]), the finisher is
/// started as its own program ([`start`]).
pub fn fork_or_start(handoff: &Handoff, lock: OwnedFd) -> bool {
    match fork(handoff, &lock) {
        Some(forked) => forked,
        None => start(handoff, lock),
    }
}

/// The fork itself: None when this process cannot fork its finisher (see [`fork_or_start`]).
fn fork(handoff: &Handoff, lock: &OwnedFd) -> Option<bool> {
    let title = ArgArea::find().filter(|a| a.len > FINISHER_NAME.len())?;
    // A process that is not dumpable (the shim drops that when it holds a server token)
    // stays so across a fork: its `/proc/PID/exe` would be unreadable to an outer run
    // looking for finishers. An exec resets it.
    // SAFETY: PR_GET_DUMPABLE takes no pointer.
    if unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } != 1 || !single_threaded() {
        return None;
    }
    // Above the descriptors the child gets things at.
    let lock = above_targets(lock).ok()?;
    // SAFETY: this process has one thread (checked just above; only it starts threads), so
    // the child is a consistent copy of it and may do what the shim does.
    match unsafe { libc::fork() } {
        -1 => Some(false),
        0 => {
            // Whatever happens in the child ends it here (a panic included, where panics
            // unwind): never back into the shim's own code.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: in the child just forked from a single-threaded shim.
                unsafe { in_child(handoff, lock, title) }
            }))
            .unwrap_or_else(|_| {
                let _ = hr_shared::spool::write(&handoff.paths(), &handoff.fallback);
                1
            });
            // SAFETY: ends the child without the shim's exit handlers (buffers are the shim's).
            unsafe { libc::_exit(code) }
        }
        _ => Some(true),
    }
}

/// The forked finisher: made the process a finisher started as one would be (its name, a
/// session of its own, every signal at its default but the ones a finisher ignores, stdin
/// and stdout `/dev/null`, stderr the shim's, the lock at descriptor 3 and nothing else),
/// then the writes.
///
/// # Safety
///
/// Only in a child just forked from a single-threaded shim.
unsafe fn in_child(handoff: &Handoff, lock: OwnedFd, title: ArgArea) -> i32 {
    // SAFETY: the argument area is this process's own memory, `len` bytes long (checked
    // against the kernel's record of it), and nothing reads it as arguments any more.
    unsafe {
        let area = std::slice::from_raw_parts_mut(title.start, title.len);
        area.fill(0);
        area[..FINISHER_NAME.len()].copy_from_slice(FINISHER_NAME.as_bytes());
        // `comm` too, which `pidof`, `pkill -x` and `killall` match (the shim's is the
        // tool's name when it runs as a link named after the tool).
        libc::prctl(
            libc::PR_SET_NAME,
            c"hr-finish".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::setsid();
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
        // As a spawned finisher gets them: every signal at its default (glibc's internal
        // ones refuse, and stay as they are), then the ending ones ignored.
        for sig in 1..=libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        ignore_ending_signals();
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, libc::STDIN_FILENO);
            libc::dup2(null, libc::STDOUT_FILENO);
        }
        // Without the lock at 3 the run is still written (readers just do not wait for it).
        if libc::dup2(lock.as_raw_fd(), LOCK_FD) == LOCK_FD {
            drop(lock);
        } else {
            std::mem::forget(lock);
        }
        close_from(LOCK_FD + 1);
    }
    if finish(handoff.clone()) { 0 } else { 1 }
}

/// Closes every descriptor from `first` on: `close_range`, or where the kernel has none
/// (before 5.9) each one `/proc/self/fd` lists.
fn close_from(first: libc::c_int) {
    // SAFETY: close_range on this process's own descriptors.
    if unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0) } == 0 {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<libc::c_int> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= first)
        .collect();
    for fd in fds {
        // SAFETY: closing descriptors of this process nothing else uses (one thread).
        unsafe { libc::close(fd) };
    }
}

/// The finisher's bookkeeping takes milliseconds: a service manager ending what its main
/// process left (systemd's SIGTERM to the cgroup), a terminal's hang-up or a closed stderr
/// does not cut it short.
fn ignore_ending_signals() {
    // SAFETY: setting dispositions to ignore; no handler runs.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Whether this process has one thread (as the kernel lists its tasks).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

/// The process's argument area (what `/proc/PID/cmdline` shows): `argv[0]` onwards, the
/// arguments back to back, each ended by a NUL.
struct ArgArea {
    start: *mut u8,
    len: usize,
}

impl ArgArea {
    /// The area, where glibc's `argv[0]` and the arguments' lengths agree with the kernel's
    /// record of it (`arg_start` and `arg_end` in `/proc/self/stat`): what `cmdline` shows.
    fn find() -> Option<ArgArea> {
        unsafe extern "C" {
            /// glibc's `argv[0]`, as given to `main`.
            static program_invocation_name: *mut libc::c_char;
        }
        // SAFETY: glibc sets it before `main` and this process never changes it.
        let start = unsafe { program_invocation_name }.cast::<u8>();
        if start.is_null() {
            return None;
        }
        let len: usize = std::env::args_os().map(|a| a.len() + 1).sum();
        let (arg_start, arg_end) =
            hr_shared::proc::read_stat(std::process::id() as i32)?.arg_area?;
        (arg_start == start as u64 && arg_end == arg_start + len as u64)
            .then_some(ArgArea { start, len })
    }
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
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut defaults);
        new_session(attr, &defaults)?;
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
    ignore_ending_signals();
    // Nothing but the hand-off, stdout, stderr and the lock: a descriptor the shim was
    // given without close-on-exec (a jobserver's pipe) is not kept open here.
    close_from(LOCK_FD + 1);
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
    let paths = handoff.paths();
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

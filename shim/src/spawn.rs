//! Starting the tool in its pty with `posix_spawn` (vfork-based in glibc): a `fork()` of
//! the multi-threaded shim copies its page tables and cost most of its start-up time.
//! `POSIX_SPAWN_SETSID` makes the tool a session leader; the first file action then opens
//! the pty slave *without* `O_NOCTTY`, which on Linux makes it the session's controlling
//! terminal — everything `setsid(); ioctl(TIOCSCTTY)` in a `pre_exec` hook would do. The
//! run's event pipe is `dup2`ed to its number before that (see `event_fd`).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// What to start.
pub struct SpawnSpec<'a> {
    pub program: &'a Path,
    pub argv0: &'a OsStr,
    pub args: &'a [OsString],
    /// Variables to set (or replace) in the inherited environment.
    pub env: &'a [(&'a str, &'a OsStr)],
    /// Variables to remove from it.
    pub remove: &'a [&'static str],
    /// The pty slave.
    pub tty: &'a Path,
    /// The tool keeps the shim's stdin instead of reading the pty.
    pub pass_stdin: bool,
    /// The event pipe's write end and the number the tool gets it at (the write end is
    /// close-on-exec and never at that number, so the tool has it there only).
    pub event_fd: Option<(RawFd, RawFd)>,
    /// A pipe's write end the tool gets as its stdout instead of the pty (a pager run
    /// directly, which writes its text as without a terminal): close-on-exec, above 2 and
    /// never at the event descriptor's number, so the stdio actions leave it alone.
    pub stdout: Option<RawFd>,
}

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
}

/// Spawns the tool; returns its pid.
pub fn spawn(spec: &SpawnSpec<'_>) -> io::Result<i32> {
    let mut argv: Vec<CString> = Vec::with_capacity(spec.args.len() + 1);
    argv.push(cstr(spec.argv0.as_bytes())?);
    for a in spec.args {
        argv.push(cstr(a.as_bytes())?);
    }
    let mut env: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if spec.env.iter().any(|(name, _)| OsStr::new(name) == k)
            || spec.remove.iter().any(|name| OsStr::new(name) == k)
        {
            continue;
        }
        let mut kv = k.into_vec();
        kv.push(b'=');
        kv.extend(v.into_vec());
        if let Ok(c) = CString::new(kv) {
            env.push(c);
        }
    }
    for (k, v) in spec.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        env.push(cstr(&kv)?);
    }
    let program = cstr(spec.program.as_os_str().as_bytes())?;
    match spawn_raw(&program, &argv, &env, spec) {
        // No `#!` line and not a binary: run it with sh, as execvp (and shells) would.
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let mut sh_argv = vec![cstr(b"sh")?, program.clone()];
            sh_argv.extend(argv.into_iter().skip(1));
            spawn_raw(&cstr(b"/bin/sh")?, &sh_argv, &env, spec)
        }
        other => other,
    }
}

fn spawn_raw(
    program: &CString,
    argv: &[CString],
    env: &[CString],
    spec: &SpawnSpec<'_>,
) -> io::Result<i32> {
    let tty = cstr(spec.tty.as_os_str().as_bytes())?;
    let mut argv_ptrs: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut env_ptrs: Vec<*mut libc::c_char> = env.iter().map(|a| a.as_ptr() as *mut _).collect();
    env_ptrs.push(std::ptr::null_mut());

    // SAFETY: every pointer handed to posix_spawn outlives the call.
    with_spawn_objects(|attr, actions| unsafe {
        // The Rust runtime ignores SIGPIPE; the tool must get the default back.
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        libc::sigaddset(&mut defaults, libc::SIGPIPE);
        new_session(attr, &defaults)?;
        // First, while the write end cannot have been replaced by the stdio actions
        // (a shim started with a closed stdout may hold it at 0–2).
        if let Some((source, target)) = spec.event_fd {
            check(libc::posix_spawn_file_actions_adddup2(
                actions, source, target,
            ))?;
        }
        // The first open of a terminal by a new session leader makes it the controlling
        // terminal: open the slave on stdout first, then dup it where needed.
        check(libc::posix_spawn_file_actions_addopen(
            actions,
            libc::STDOUT_FILENO,
            tty.as_ptr(),
            libc::O_RDWR,
            0,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            actions,
            libc::STDOUT_FILENO,
            libc::STDERR_FILENO,
        ))?;
        if !spec.pass_stdin {
            check(libc::posix_spawn_file_actions_adddup2(
                actions,
                libc::STDOUT_FILENO,
                libc::STDIN_FILENO,
            ))?;
        }
        // Last: the terminal is the controlling one by now, stderr and stdin keep it.
        if let Some(out) = spec.stdout {
            check(libc::posix_spawn_file_actions_adddup2(
                actions,
                out,
                libc::STDOUT_FILENO,
            ))?;
        }
        let mut pid: libc::pid_t = 0;
        check(libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            actions,
            attr,
            argv_ptrs.as_ptr(),
            env_ptrs.as_ptr(),
        ))?;
        Ok(pid)
    })
}

/// Sets `attr` so the child starts a session of its own, with no signal blocked and the
/// signals in `defaults` back at their default actions.
pub fn new_session(
    attr: &mut libc::posix_spawnattr_t,
    defaults: &libc::sigset_t,
) -> io::Result<()> {
    // SAFETY: `attr` is an initialised attribute object; the sets are plain values.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
        check(libc::posix_spawnattr_setsigdefault(attr, defaults))?;
        check(libc::posix_spawnattr_setflags(
            attr,
            libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short,
        ))
    }
}

/// Runs `f` with a `posix_spawn` attribute object and file-action list, initialised before
/// and destroyed after, whatever `f` returns.
pub fn with_spawn_objects<T>(
    f: impl FnOnce(&mut libc::posix_spawnattr_t, &mut libc::posix_spawn_file_actions_t) -> io::Result<T>,
) -> io::Result<T> {
    // SAFETY: both objects are initialised before `f` sees them and destroyed once, after.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        check(libc::posix_spawnattr_init(&mut attr))?;
        if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut actions)) {
            libc::posix_spawnattr_destroy(&mut attr);
            return Err(e);
        }
        let result = f(&mut attr, &mut actions);
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        result
    }
}

pub fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// `waitpid(pid, WNOHANG)`: the raw wait status once the process has ended.
pub fn try_wait(pid: i32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: status is a valid int for waitpid to fill.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (rc == pid).then_some(status)
}

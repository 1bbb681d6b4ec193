//! The gate a pipeline runner holds a step's headless-run at (`HEADLESS_RUN_GATE_FD`,
//! [`hr_shared::pipeline::ENV_GATE_FD`]): the runner starts headless-run itself, records
//! its pid, and only then says go; a runner killed before that closes the gate, and
//! headless-run exits without starting the tool, so a resume that finds no pid may start
//! the step without running it twice.

use hr_shared::pipeline::ENV_GATE_FD;
use std::os::fd::RawFd;

/// Waits at the gate, if this headless-run was started at one: true to go on, false when
/// the gate closed without a go (exit 125, `hr_shared::exit::shim::SHIM_FAILED`). A variable
/// that names no pipe is no gate. The variable is taken out of the environment either way.
/// Called while the process has one thread (it edits the environment).
pub fn pass() -> bool {
    let Some(value) = std::env::var_os(ENV_GATE_FD) else {
        return true;
    };
    // SAFETY: single-threaded (the caller's promise): nothing reads the environment meanwhile.
    unsafe { std::env::remove_var(ENV_GATE_FD) };
    let Some(fd) = value
        .to_str()
        .and_then(|s| s.parse::<RawFd>().ok())
        .filter(|&fd| fd > 2)
    else {
        return true;
    };
    // SAFETY: st is a valid stat buffer; fstat only reads this descriptor's metadata.
    let is_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
    };
    if !is_pipe {
        return true;
    }
    let mut said = Vec::with_capacity(2);
    let mut buf = [0u8; 2];
    while said.len() < 2 {
        // SAFETY: reads into a buffer with room for what is asked.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 2 - said.len()) };
        match n {
            n if n > 0 => said.extend_from_slice(&buf[..n as usize]),
            0 => break,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    // SAFETY: the gate is this process's alone from here; nothing else uses the descriptor.
    unsafe { libc::close(fd) };
    said == b"g\n"
}

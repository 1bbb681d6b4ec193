//! Signals as bytes on a self-pipe, so the supervision loop sees them in the same `poll`
//! as the tool's output.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Handlers for a set of signals, each writing its number to a non-blocking pipe.
pub struct SignalPipe {
    read: OwnedFd,
    write: RawFd,
    ids: Vec<signal_hook::SigId>,
}

impl SignalPipe {
    /// Installs handlers for `signals`.
    pub fn install(signals: &[i32]) -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 returns.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned this descriptor and nothing else owns it.
        let read = unsafe { OwnedFd::from_raw_fd(fds[0]) };
        let write = fds[1];
        let mut ids = Vec::with_capacity(signals.len());
        for &sig in signals {
            let byte = sig as u8;
            // SAFETY: the handler only calls write(2), which is async-signal-safe, on a
            // descriptor that stays open until the handler is unregistered.
            let id = unsafe {
                signal_hook::low_level::register(sig, move || {
                    libc::write(write, (&byte as *const u8).cast(), 1);
                })
            }?;
            ids.push(id);
        }
        Ok(SignalPipe { read, write, ids })
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// The signals received since the last call, in order (duplicates kept).
    pub fn drain(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend(buf[..n as usize].iter().map(|&b| i32::from(b)));
        }
        out
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        // SAFETY: no handler refers to the write end any more.
        unsafe { libc::close(self.write) };
    }
}

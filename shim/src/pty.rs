//! The pseudo-terminal the tool runs in: opened through portable-pty, output
//! post-processing switched off so line output passes byte for byte, and the tool spawned
//! as a session leader with the pty as its controlling terminal (see `spawn`).

use crate::spawn::{self, SpawnSpec};
use portable_pty::{MasterPty, PtySize, native_pty_system};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The size used when the shim has no terminal of its own.
pub const DEFAULT_SIZE: (u16, u16) = (50, 200);

/// An open pty pair's master side, and how to reach the slave.
pub struct Pty {
    master: Box<dyn MasterPty + Send>,
    fd: RawFd,
    slave_path: PathBuf,
    slave_rdev: u64,
}

/// The (rows, cols) of the shim's own terminal and the descriptor it was read from.
pub fn own_terminal_size() -> Option<(u16, u16, RawFd)> {
    [libc::STDOUT_FILENO, libc::STDERR_FILENO, libc::STDIN_FILENO]
        .into_iter()
        .find_map(|fd| size_of(fd).map(|(r, c)| (r, c, fd)))
}

/// The (rows, cols) of the terminal on `fd`.
pub fn size_of(fd: RawFd) -> Option<(u16, u16)> {
    // SAFETY: ws is a valid winsize for TIOCGWINSZ to fill.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

impl Pty {
    /// Opens a pty of `rows` × `cols`.
    pub fn open(rows: u16, cols: u16) -> io::Result<Pty> {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| io::Error::other(format!("cannot open a pty: {e}")))?;
        let fd = pair
            .master
            .as_raw_fd()
            .ok_or_else(|| io::Error::other("pty master has no descriptor"))?;
        let slave_path = pair
            .master
            .tty_name()
            .ok_or_else(|| io::Error::other("pty slave has no name"))?;
        let slave_rdev = std::fs::metadata(&slave_path)?.rdev();
        // portable-pty's own slave handle is dropped: we open the slave ourselves so that the
        // tool's stdin can be something else while the pty stays its controlling terminal.
        drop(pair.slave);
        Ok(Pty {
            master: pair.master,
            fd,
            slave_path,
            slave_rdev,
        })
    }

    /// The master descriptor (read the tool's output, write its input).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The device number of the slave, to recognise the tool's terminal in `/proc`.
    pub fn slave_rdev(&self) -> u64 {
        self.slave_rdev
    }

    /// Spawns the tool as a session leader whose stdout, stderr and controlling terminal are
    /// the pty; its stdin is the pty too unless `pass_stdin`, when it keeps the shim's.
    /// `spec.tty` must be [`Pty::slave_path`].
    pub fn spawn(&self, spec: &SpawnSpec<'_>) -> io::Result<i32> {
        // Termios requests on the master act on the slave.
        disable_output_processing(self.fd)?;
        spawn::spawn(spec)
    }

    /// The slave's device path (`/dev/pts/N`).
    pub fn slave_path(&self) -> &std::path::Path {
        &self.slave_path
    }

    /// The terminal's foreground process group.
    pub fn foreground_pgrp(&self) -> Option<i32> {
        self.master.process_group_leader()
    }

    /// The terminal's current modes.
    pub fn termios(&self) -> Option<libc::termios> {
        // SAFETY: t is a valid termios for tcgetattr to fill.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        (unsafe { libc::tcgetattr(self.fd, &mut t) } == 0).then_some(t)
    }

    /// Resizes the terminal (the tool gets SIGWINCH).
    pub fn resize(&self, rows: u16, cols: u16) {
        let _ = self.master.resize(PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        });
    }

    /// Types `bytes` into the tool's terminal.
    pub fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            // SAFETY: bytes is readable for its length.
            let n = unsafe { libc::write(self.fd, bytes.as_ptr().cast(), bytes.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            bytes = &bytes[n as usize..];
        }
        Ok(())
    }
}

/// Clears OPOST so that `\n` is not turned into `\r\n` on the way out.
fn disable_output_processing(fd: RawFd) -> io::Result<()> {
    // SAFETY: t is a valid termios; fd is an open terminal.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    t.c_oflag &= !libc::OPOST;
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the descriptor is a terminal.
pub fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

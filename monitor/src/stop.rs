//! SIGINT and SIGTERM as a request to stop: long-running commands (`worker`, `wait`,
//! `logs -f`) check it between steps instead of dying mid-write.

use std::sync::atomic::{AtomicUsize, Ordering};

static REQUESTS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_sig: libc::c_int) {
    REQUESTS.fetch_add(1, Ordering::SeqCst);
}

/// Counts SIGINT and SIGTERM from now on instead of letting them end the process.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches an atomic (async-signal-safe); the sigaction is
        // fully initialised before the call.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// How many stop requests have arrived.
pub fn requests() -> usize {
    REQUESTS.load(Ordering::SeqCst)
}

/// Whether a stop was requested.
pub fn requested() -> bool {
    requests() > 0
}

/// Sleeps up to `d`, waking early (in 50 ms steps) once more than `seen` stop requests
/// have arrived.
pub fn sleep(d: std::time::Duration, seen: usize) {
    let deadline = std::time::Instant::now() + d;
    while requests() <= seen {
        let now = std::time::Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep((deadline - now).min(std::time::Duration::from_millis(50)));
    }
}

/// Like [`sleep`], but also ends as soon as `bell` rings (the database was written):
/// whether it rang.
pub fn sleep_or_ring(
    d: std::time::Duration,
    seen: usize,
    bell: Option<&hr_shared::store::doorbell::Doorbell>,
) -> bool {
    let Some(bell) = bell else {
        sleep(d, seen);
        return false;
    };
    let deadline = std::time::Instant::now() + d;
    while requests() <= seen {
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        if bell.wait((deadline - now).min(std::time::Duration::from_millis(50))) {
            return true;
        }
    }
    false
}

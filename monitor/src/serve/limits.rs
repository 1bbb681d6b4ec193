//! What one client of `monitor serve` may hold: failed authentications per address (a
//! held-off address gets 429 for bad tokens, never for a good one), and event streams and
//! long polls per token (each holds a connection for as long as it stays open).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The window `--auth-failures` counts in.
pub const FAIL_WINDOW: Duration = Duration::from_secs(60);

/// The most addresses whose failures are remembered: beyond it (an attacker with many
/// addresses), windows that ended are forgotten first, and then new addresses go
/// uncounted rather than the map growing without bound. Such an attacker escapes the
/// limit by changing address anyway.
const MOST_ADDRESSES: usize = 65_536;

/// Failed authentications by address, each counted in a window that starts at its first
/// failure.
pub struct Failures {
    seen: HashMap<IpAddr, (Instant, u32)>,
    limit: u32,
}

/// The address failures are counted under: an IPv4 address as itself (also when it reaches
/// an IPv6 socket as `::ffff:a.b.c.d`); an IPv6 address by its /64, which one host usually
/// holds whole (counting single addresses would give it 2^64 fresh tries).
fn counted_as(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Failures {
    pub fn new(limit: u32) -> Failures {
        Failures {
            seen: HashMap::new(),
            limit,
        }
    }

    /// The failures one address may make in a window.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether `ip` made its `limit` failures in the current window.
    pub fn held_off(&mut self, ip: IpAddr, now: Instant) -> bool {
        let key = counted_as(ip);
        match self.seen.get(&key).copied() {
            Some((since, _)) if now.saturating_duration_since(since) > FAIL_WINDOW => {
                self.seen.remove(&key);
                false
            }
            Some((_, n)) => n >= self.limit,
            None => false,
        }
    }

    /// Counts a failure of `ip`.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        let key = counted_as(ip);
        if !self.seen.contains_key(&key) && self.seen.len() >= MOST_ADDRESSES {
            self.seen
                .retain(|_, (since, _)| now.saturating_duration_since(*since) <= FAIL_WINDOW);
            if self.seen.len() >= MOST_ADDRESSES {
                return;
            }
        }
        let entry = self.seen.entry(key).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) > FAIL_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// The event streams and long polls open per token (by its name: one name is one token
/// in force at a time).
pub struct Streams {
    open: Mutex<HashMap<String, u32>>,
    most: u32,
}

/// One open stream of a token; its place is given back when it is dropped (the stream
/// ended, or its connection closed and hyper dropped the body or the handler).
pub struct Slot {
    streams: Arc<Streams>,
    name: String,
}

impl Streams {
    pub fn new(most: u32) -> Arc<Streams> {
        Arc::new(Streams {
            open: Mutex::new(HashMap::new()),
            most,
        })
    }

    /// The most streams one token may hold open.
    pub fn most(&self) -> u32 {
        self.most
    }

    /// A place for one more stream of token `name`, unless it holds `most` already.
    pub fn take(self: &Arc<Self>, name: &str) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(name.to_owned()).or_insert(0);
        if *n >= self.most {
            return None;
        }
        *n += 1;
        Some(Slot {
            streams: self.clone(),
            name: name.to_owned(),
        })
    }

    #[cfg(test)]
    fn held(&self, name: &str) -> u32 {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(name).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_hold_an_address_off_for_the_rest_of_its_window_only() {
        let mut f = Failures::new(3);
        let t0 = Instant::now();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        for _ in 0..3 {
            assert!(!f.held_off(ip, t0));
            f.failed(ip, t0);
        }
        assert!(f.held_off(ip, t0));
        assert!(f.held_off(ip, t0 + FAIL_WINDOW));
        assert!(!f.held_off(other, t0), "another address is not held off");
        // The same address reaching an IPv6 socket.
        assert!(f.held_off("::ffff:192.0.2.7".parse().unwrap(), t0));
        // Once the window is over, the address starts again from nothing.
        let later = t0 + FAIL_WINDOW + Duration::from_secs(1);
        assert!(!f.held_off(ip, later));
        f.failed(ip, later);
        assert!(!f.held_off(ip, later));
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64_and_memory_stays_bounded() {
        let mut f = Failures::new(2);
        let t0 = Instant::now();
        f.failed("2001:db8:1:2::1".parse().unwrap(), t0);
        f.failed("2001:db8:1:2:ffff::9".parse().unwrap(), t0);
        assert!(f.held_off("2001:db8:1:2::abcd".parse().unwrap(), t0));
        assert!(!f.held_off("2001:db8:1:3::1".parse().unwrap(), t0));
        // Many addresses: the map stops growing; ended windows make room again.
        for i in 0..(MOST_ADDRESSES as u32 + 10) {
            f.failed(IpAddr::V4(i.into()), t0);
        }
        assert_eq!(f.seen.len(), MOST_ADDRESSES);
        let later = t0 + FAIL_WINDOW + Duration::from_secs(1);
        f.failed("198.51.100.1".parse().unwrap(), later);
        assert_eq!(f.seen.len(), 1);
    }

    #[test]
    fn a_token_holds_at_most_its_streams_and_gets_them_back_when_they_end() {
        let s = Streams::new(2);
        let a = s.take("alice").unwrap();
        let b = s.take("alice").unwrap();
        assert!(s.take("alice").is_none());
        let other = s.take("bob").expect("another token is not affected");
        assert_eq!(s.held("alice"), 2);
        drop(a);
        let c = s.take("alice").expect("a place came free");
        drop((b, c, other));
        assert_eq!(s.held("alice"), 0);
        assert!(s.open.lock().unwrap().is_empty());
    }
}

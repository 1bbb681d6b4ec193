//! How `monitor serve` takes connections: its own accept loop over hyper's HTTP/1.1, so
//! that every way a client can hold the server has a bound. At most `--max-connections`
//! open (one more is answered 503 and closed at once); a TLS handshake, and then each
//! request's headers, must come within `--header-timeout` (hyper's header read timeout:
//! it also ends a connection left idle between requests); a stop ends the idle
//! connections, lets the requests in flight finish, and waits for them at most
//! [`STOP_GRACE`]. Also: where it may listen, and the TLS key it accepts.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, watch};

/// How long a stop waits for the requests in flight.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: u32,
    pub header_timeout: Duration,
}

/// What the accept loop counts, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub open: AtomicU64,
    pub refused: AtomicU64,
}

/// Why `addr` may not be listened on as asked, if it may not: plain HTTP off loopback
/// sends every token (and every decision) across the network in clear.
pub fn refuse_listen(addr: SocketAddr, tls: bool, insecure_plain_http: bool) -> Option<String> {
    if tls || insecure_plain_http || addr.ip().to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "--listen {addr} is not a loopback address and the server would speak plain HTTP: \
         every token and decision would cross the network in clear. Serve HTTPS \
         (--tls-cert PEM --tls-key PEM), listen on 127.0.0.1 behind a TLS proxy on this \
         host, or accept the risk with --insecure-plain-http"
    ))
}

/// The private key's PEM, checked on the open file (what is checked is what is read): a
/// regular file of this user (or root) that nobody else may read or write — also through a
/// link (certbot's `live/…/privkey.pem`), since only the file's owner could put another
/// such file at its end.
pub fn read_private_key(file: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // O_NONBLOCK: a FIFO put in its place would otherwise hold the open until a writer came.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .map_err(|e| format!("--tls-key {}: {e}", file.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("--tls-key {}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("--tls-key {}: not a regular file", file.display()));
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(format!(
            "--tls-key {}: owned by uid {}, neither this user nor root (its owner could \
             replace the key); chown it",
            file.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "--tls-key {}: group or others may read or write it (mode {:o}); chmod 600 it \
             (and think of it as leaked)",
            file.display(),
            meta.mode() & 0o777
        ));
    }
    let mut pem = Vec::new();
    f.take(1024 * 1024)
        .read_to_end(&mut pem)
        .map_err(|e| format!("--tls-key {}: {e}", file.display()))?;
    Ok(pem)
}

/// The TLS configuration of `cert` (a PEM chain) and `key_pem` (from
/// [`read_private_key`]): rustls with ring, HTTP/1.1 only.
pub fn tls_config(
    cert: &Path,
    key: &Path,
    key_pem: &[u8],
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fail = |why: String| {
        format!(
            "cannot use {} and {} for TLS: {why}",
            cert.display(),
            key.display()
        )
    };
    let chain = std::fs::read(cert).map_err(|e| fail(format!("{}: {e}", cert.display())))?;
    let chain = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(fail(format!("no certificate in {}", cert.display())));
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| fail(format!("no private key in {} ({e})", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| fail(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` on `listener` until `stop` completes, then stops gracefully.
pub async fn serve(
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let (stopping, stop_rx) = watch::channel(false);
    let mut last_told: Option<Instant> = None;
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(v) => v,
                // Out of descriptors, or a connection gone before it was taken: the
                // next try a moment later rather than a spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            refuse(tcp, tls.is_none(), limits.max_connections);
            // Told now and then, not once per connection: a flood would flood the log.
            if last_told.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                last_told = Some(Instant::now());
                eprintln!(
                    "{} monitor serve: refusing connections: {} open, the most --max-connections allows",
                    hr_shared::time::now_rfc3339(),
                    limits.max_connections
                );
            }
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (app, tls, stats, stop_rx) = (app.clone(), tls.clone(), stats.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            stats.open.fetch_add(1, Ordering::Relaxed);
            match tls {
                Some(acceptor) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(limits.header_timeout, acceptor.accept(tcp)).await
                    {
                        connection(stream, peer, app, limits.header_timeout, stop_rx).await;
                    }
                }
                None => connection(tcp, peer, app, limits.header_timeout, stop_rx).await,
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    // New connections are refused from here on; open ones are told to end.
    drop(listener);
    let _ = stopping.send(true);
    let _ = tokio::time::timeout(STOP_GRACE, slots.acquire_many(limits.max_connections)).await;
    Ok(())
}

/// One connection beyond the cap: on plain HTTP a 503 that says why (written only if it
/// fits the socket's buffer at once: nothing here waits for the client), then closed.
fn refuse(tcp: tokio::net::TcpStream, plain: bool, most: u32) {
    let Ok(mut tcp) = tcp.into_std() else {
        return;
    };
    if plain {
        // What the client sent already is read first: closing with unread bytes would
        // reset the connection and could lose the answer.
        let mut sink = [0u8; 4096];
        let _ = tcp.read(&mut sink);
        let body = format!(
            "{{\"error\":\"too many connections: the server holds {most} open, the most \
             --max-connections allows; try again later\"}}"
        );
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
            body.len()
        );
        let _ = tcp.write(answer.as_bytes());
        let _ = tcp.shutdown(std::net::Shutdown::Write);
    }
}

/// Serves one connection's requests (HTTP/1.1, keep-alive), each with its peer's address
/// for the handlers; on a stop, ends it once the request in flight is answered.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut app = app.clone();
        async move {
            use tower_service::Service;
            std::future::poll_fn(|cx| {
                Service::<hyper::Request<Incoming>>::poll_ready(&mut app, cx)
            })
            .await?;
            app.call(req).await
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let stopped = async move {
        // The guard `wait_for` gives is not kept: it may not be held across an await.
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        () = stopped => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn plain_http_is_refused_off_loopback_unless_the_risk_is_taken() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(refuse_listen(at("127.0.0.1:8080"), false, false).is_none());
        assert!(refuse_listen(at("127.3.4.5:8080"), false, false).is_none());
        assert!(refuse_listen(at("[::1]:8080"), false, false).is_none());
        assert!(refuse_listen(at("[::ffff:127.0.0.1]:8080"), false, false).is_none());
        for open in [
            "0.0.0.0:8080",
            "[::]:8080",
            "192.0.2.1:80",
            "[2001:db8::1]:80",
        ] {
            let why = refuse_listen(at(open), false, false).expect(open);
            assert!(why.contains("--insecure-plain-http"), "{why}");
            assert!(why.contains("in clear"), "{why}");
            assert!(
                refuse_listen(at(open), true, false).is_none(),
                "{open} with TLS"
            );
            assert!(
                refuse_listen(at(open), false, true).is_none(),
                "{open} allowed"
            );
        }
    }

    #[test]
    fn a_private_key_must_be_a_private_regular_file_whatever_link_leads_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("server.key");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let chmod = |m| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(m));
        chmod(0o600).unwrap();
        assert!(read_private_key(&key).is_ok());
        chmod(0o400).unwrap();
        assert!(read_private_key(&key).is_ok());
        for mode in [0o644, 0o640, 0o604, 0o620] {
            chmod(mode).unwrap();
            let why = read_private_key(&key).unwrap_err();
            assert!(
                why.contains("chmod 600") && why.contains(&format!("{mode:o}")),
                "{why}"
            );
        }
        // Through a link, the file at its end is what is checked.
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        chmod(0o644).unwrap();
        assert!(read_private_key(&link).unwrap_err().contains("chmod 600"));
        chmod(0o600).unwrap();
        assert!(read_private_key(&link).is_ok());
        let why = read_private_key(dir.path()).unwrap_err();
        assert!(why.contains("not a regular file"), "{why}");
        // A FIFO is refused at once, not waited on.
        let fifo = dir.path().join("fifo.key");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let why = read_private_key(&fifo).unwrap_err();
        assert!(why.contains("not a regular file"), "{why}");
        let why = read_private_key(&dir.path().join("missing.key")).unwrap_err();
        assert!(why.contains("missing.key"), "{why}");
    }
}

//! Webhooks (`[[webhooks]]` in the user's config): each approval asked (`approval_needed`)
//! and each one no longer waiting (`approval_status_change`: decided, expired, withdrawn) is
//! posted to every configured receiver, as JSON or as a Slack-compatible message, signed
//! when the hook has a secret (`hr_shared::webhook`), retried with doubling delays on a
//! connection error, 408, 429 or 5xx. Woken by the store's doorbell; approvals already
//! there when the server starts are not posted again. The receiver's URL (a Slack URL is a
//! secret) is never logged, only its host.

use super::*;
use hr_shared::approvals::{Approval, ApprovalFilter};
use hr_shared::config::{WebhookConfig, WebhookFormat};
use hr_shared::status::ApprovalStatus;
use hr_shared::webhook::{self, Event};
use std::collections::HashSet;
use std::time::SystemTime;

/// One receiver, ready to post to.
#[derive(Clone)]
pub(super) struct Hook {
    url: String,
    /// What the log names it by: scheme and host.
    label: String,
    format: WebhookFormat,
    secret: Option<Vec<u8>>,
    retries: u32,
    link: Option<String>,
    /// Approve and Reject buttons in Slack messages (`[slack]`).
    buttons: bool,
    agent: ureq::Agent,
}

/// The hooks of `configs`, each checked: a URL that is http(s) (plain http on loopback
/// only), a secret variable that is set. An error names the hook by its host.
/// With `buttons` (`[slack]` is set), Slack messages carry Approve and Reject buttons.
pub(super) fn hooks(configs: &[WebhookConfig], buttons: bool) -> Result<Vec<Hook>, String> {
    configs
        .iter()
        .map(|c| {
            let host = host_of(&c.url)
                .ok_or("a webhook's url is not an http(s) URL (its value is not shown: it may hold a secret)")?;
            let label = format!("webhook to {host}");
            let https = c.url.starts_with("https://");
            if !https && !loopback(&host) {
                return Err(format!(
                    "{label}: plain http only to loopback (the body names commands and decisions)"
                ));
            }
            let secret = from_env(&c.secret_env, &label, "secret_env")?.map(String::into_bytes);
            let agent = hr_shared::remote::agent(
                None,
                https,
                Duration::from_secs(10),
                Duration::from_secs(5),
            )?;
            Ok(Hook {
                url: c.url.clone(),
                label,
                format: c.format,
                secret,
                retries: c.retries.unwrap_or(5),
                link: c.link.clone(),
                buttons,
                agent,
            })
        })
        .collect()
}

/// The value of the server's environment variable a setting (`what`) of `label` names, if
/// it names one; an error when that variable is unset or empty.
pub(super) fn from_env(
    name: &Option<String>,
    label: &str,
    what: &str,
) -> Result<Option<String>, String> {
    match name {
        Some(var) => std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Some)
            .ok_or_else(|| format!("{label}: {var} (its {what}) is not set")),
        None => Ok(None),
    }
}

/// `scheme://host[:port]` of an http(s) URL.
fn host_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let host = rest.split(['/', '?', '#']).next()?;
    // Credentials in the URL are not shown either.
    let host = host.rsplit('@').next()?;
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

fn loopback(label: &str) -> bool {
    let host = label.split_once("://").map_or(label, |(_, h)| h);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.split_once(']'))
        .map_or_else(
            || host.rsplit_once(':').map_or(host, |(h, _)| h),
            |(h, _)| h,
        );
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Where the approvals pending at the last look are kept (`STATE/notified.json`).
fn known_file(paths: &StatePaths) -> std::path::PathBuf {
    paths.root.join("notified.json")
}

fn read_known(file: &std::path::Path) -> Option<HashSet<String>> {
    let text = std::fs::read(file).ok()?;
    serde_json::from_slice::<Vec<String>>(&text)
        .ok()
        .map(|v| v.into_iter().collect())
}

/// Written whole, then put in place (0600).
fn write_known(file: &std::path::Path, ids: &HashSet<String>) {
    let mut sorted: Vec<&String> = ids.iter().collect();
    sorted.sort();
    let bytes = serde_json::to_vec(&sorted).unwrap_or_default();
    let written = hr_shared::paths::write_private(file, &bytes, hr_shared::paths::Put::Replace);
    if let Err(e) = written {
        eprintln!(
            "monitor serve: cannot keep {} ({e}): a restart may not post what was asked meanwhile",
            file.display()
        );
    }
}

/// Starts the task that posts to `hooks` and mails with `mailers` (approvals asked) while
/// the server runs.
pub(super) fn spawn(server: Arc<Server>, hooks: Vec<Hook>, mailers: Vec<super::mail::Mailer>) {
    if hooks.is_empty() && mailers.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut bell = server.bell.clone();
        // The approvals pending at the last look, kept in the state dir: a server started
        // again posts what was asked, and what was decided, while none ran. Without that
        // file (the first start), those pending now are taken as known.
        let known = known_file(&server.paths);
        let (mut pending, mut first) = match read_known(&known) {
            Some(set) => (set, false),
            None => (HashSet::new(), true),
        };
        while !server.stopping.load(Ordering::Relaxed) {
            let filter = ApprovalFilter {
                statuses: vec![ApprovalStatus::Pending],
                ..ApprovalFilter::default()
            };
            if let Ok(list) = server
                .with_store(move |st| st.approvals(&filter).map_err(ApiError::store))
                .await
            {
                let now: HashSet<String> = list.iter().map(|a| a.approval_id.clone()).collect();
                let mut events: Vec<(Event, Approval)> = Vec::new();
                if !first {
                    for a in list
                        .into_iter()
                        .filter(|a| !pending.contains(&a.approval_id))
                    {
                        events.push((Event::Pending, a));
                    }
                    // No longer pending: decided, expired or withdrawn; read as it is now.
                    let gone: Vec<String> = pending.difference(&now).cloned().collect();
                    for id in gone {
                        if let Ok(Some(a)) = server
                            .with_store(move |st| st.approval(&id).map_err(ApiError::store))
                            .await
                            && a.status != ApprovalStatus::Pending
                        {
                            events.push((Event::Decided, a));
                        }
                    }
                }
                if first || pending != now {
                    write_known(&known, &now);
                }
                pending = now;
                first = false;
                for (event, a) in events {
                    for hook in &hooks {
                        tokio::spawn(deliver(hook.clone(), event, a.clone()));
                    }
                    if event == Event::Pending {
                        for m in &mailers {
                            let (m, a) = (m.clone(), a.clone());
                            let (label, retries) = (m.label.clone(), m.retries);
                            let delivery = webhook::delivery_id(&a);
                            tokio::spawn(retrying(label, event, delivery, retries, move || {
                                m.send(&a)
                            }));
                        }
                    }
                }
            }
            server.next_ring(&mut bell, Duration::from_secs(1)).await;
        }
    });
}

/// Posts one event to one hook, retrying as configured.
async fn deliver(hook: Hook, event: Event, a: Approval) {
    let link = webhook::approval_link(hook.link.as_deref(), &a);
    let body = match hook.format {
        WebhookFormat::Json => {
            webhook::json_body(event, &a, link.as_deref(), &hr_shared::time::now_rfc3339())
        }
        WebhookFormat::Slack => webhook::slack_body(event, &a, link.as_deref(), hook.buttons),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let delivery = webhook::delivery_id(&a);
    let (label, retries) = (hook.label.clone(), hook.retries);
    let id = delivery.clone();
    retrying(label, event, delivery, retries, move || {
        post(&hook, event, &id, &body)
    })
    .await;
}

/// Makes `attempt` (blocking) until it holds, it says not to try again, or `retries` more
/// attempts failed, waiting 1 s, 2 s, 4 s … 60 s between them; says each failure in the log.
async fn retrying(
    label: String,
    event: Event,
    delivery: String,
    retries: u32,
    attempt: impl Fn() -> Result<(), (bool, String)> + Send + Sync + 'static,
) {
    let attempt = Arc::new(attempt);
    let mut wait = Duration::from_secs(1);
    for n in 0..=retries {
        let once = attempt.clone();
        let sent = tokio::task::spawn_blocking(move || once())
            .await
            .unwrap_or_else(|e| Err((true, e.to_string())));
        match sent {
            Ok(()) => return,
            Err((retry, why)) => {
                let last = !retry || n == retries;
                eprintln!(
                    "monitor serve: {label}: {} {delivery}: {why}{}",
                    event.as_str(),
                    if last {
                        "; given up".to_owned()
                    } else {
                        format!("; again in {}", hr_shared::time::short_duration(wait))
                    }
                );
                if last {
                    return;
                }
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// One attempt: Ok, or whether to try again and why not.
fn post(hook: &Hook, event: Event, delivery: &str, body: &[u8]) -> Result<(), (bool, String)> {
    let mut req = hook
        .agent
        .post(&hook.url)
        .header("Content-Type", "application/json")
        .header(webhook::EVENT_HEADER, event.as_str())
        .header(webhook::DELIVERY_HEADER, delivery);
    if let Some(secret) = &hook.secret {
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        req = req.header(
            webhook::SIGNATURE_HEADER,
            webhook::sign(secret, unix, body).as_str(),
        );
    }
    match req.send(body) {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => {
            let code = r.status().as_u16();
            let what = if (300..400).contains(&code) {
                format!(
                    "answered {code}, a redirect, which is not followed (it would drop the body)"
                )
            } else {
                format!("answered {code}")
            };
            Err((matches!(code, 408 | 429) || code >= 500, what))
        }
        Err(e) => Err((true, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_is_named_by_its_host_and_plain_http_only_to_loopback() {
        assert_eq!(
            host_of("https://hooks.slack.com/services/T0/B0/SECRET").as_deref(),
            Some("https://hooks.slack.com")
        );
        assert_eq!(
            host_of("http://user:pw@127.0.0.1:9/x").as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(host_of("ftp://x/y"), None);
        assert_eq!(host_of("hooks.slack.com"), None);
        for (url, ok) in [
            ("http://127.0.0.1:9/h", true),
            ("http://localhost:9/h", true),
            ("http://[::1]:9/h", true),
            ("http://10.0.0.1:9/h", false),
            ("http://hooks.example/h", false),
            ("https://hooks.example/h", true),
        ] {
            let got = hooks(
                &[WebhookConfig {
                    url: url.into(),
                    format: WebhookFormat::Json,
                    secret_env: None,
                    retries: None,
                    link: None,
                }],
                false,
            );
            assert_eq!(got.is_ok(), ok, "{url}: {:?}", got.err());
        }
        let unset = hooks(
            &[WebhookConfig {
                url: "https://hooks.example/SECRETPATH".into(),
                format: WebhookFormat::Slack,
                secret_env: Some("HR_TEST_WEBHOOK_SECRET_NEVER_SET".into()),
                retries: None,
                link: None,
            }],
            false,
        );
        let err = unset.err().unwrap();
        assert!(
            err.contains("is not set") && !err.contains("SECRETPATH"),
            "{err}"
        );
    }
}

//! E-mail (`[[email]]` in the user's config): each approval asked is mailed to its
//! recipients over SMTP — STARTTLS required on `smtp://`, TLS from the first byte on
//! `smtps://`, never in clear — with the question, the screen around it, the options and
//! a link to decide it on the web page. Sent and retried as webhooks are
//! (`webhooks::spawn`).

use hr_shared::approvals::Approval;
use hr_shared::config::EmailConfig;
use hr_shared::sanitize::{sanitize_line, sanitize_text};
use lettre::Transport;
use lettre::message::{Mailbox, Message, header::ContentType};
use lettre::transport::smtp::SmtpTransport;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use std::time::Duration;

/// One `[[email]]`, ready to send.
#[derive(Clone)]
pub(super) struct Mailer {
    /// What the log names it by: `smtp(s)://host:port`.
    pub(super) label: String,
    pub(super) retries: u32,
    from: Mailbox,
    to: Vec<Mailbox>,
    link: Option<String>,
    /// Signed decision links for one operator, when `operator` is set.
    signer: Option<Signer>,
    transport: SmtpTransport,
}

/// What makes each mail's decision link: the server's state dir (its link key), the
/// operator, whether the link alone decides, how long it lasts.
#[derive(Clone)]
struct Signer {
    paths: hr_shared::paths::StatePaths,
    operator: String,
    link_only: bool,
    ttl: Duration,
}

/// The mailers of `configs`, each checked (addresses, the URL, the login's variables, the
/// CA file) before the server listens.
pub(super) fn mailers(
    configs: &[EmailConfig],
    paths: &hr_shared::paths::StatePaths,
) -> Result<Vec<Mailer>, String> {
    configs.iter().map(|c| mailer(c, paths)).collect()
}

fn mailer(c: &EmailConfig, paths: &hr_shared::paths::StatePaths) -> Result<Mailer, String> {
    let signer = match (&c.operator, c.link.is_some()) {
        (Some(op), true) => {
            if !super::tokens::valid_name(op) {
                return Err(
                    "email: operator is a token's name (letters, digits, `.`, `_`, `-`, `@`)"
                        .into(),
                );
            }
            let ttl = c
                .link_expires
                .and_then(|l| l.0)
                .unwrap_or(Duration::from_secs(3600));
            if ttl.as_secs() == 0 || ttl.as_secs() > hr_shared::links::MAX_TTL_SECS {
                return Err("email: link_expires is between 1s and 7d".into());
            }
            // The key is made now, so that a state dir it cannot be written to stops the
            // server before it listens rather than every mail after.
            super::links::key(paths).map_err(|e| format!("email: the link key: {e}"))?;
            Some(Signer {
                paths: paths.clone(),
                operator: op.clone(),
                link_only: c.link_only,
                ttl,
            })
        }
        (Some(_), false) => {
            return Err("email: operator needs link (the web page's URL) to make links to".into());
        }
        (None, _) if c.link_only => {
            return Err("email: link_only needs operator (whom the link decides as)".into());
        }
        (None, _) => None,
    };
    let (implicit, rest) = match c.smtp.split_once("://") {
        Some(("smtp", rest)) => (false, rest),
        Some(("smtps", rest)) => (true, rest),
        _ => {
            return Err(
                "email: smtp is not smtp://HOST[:PORT] or smtps://HOST[:PORT] (its value is not shown: it may hold a secret)"
                    .into(),
            );
        }
    };
    let authority = rest.trim_end_matches('/');
    if authority.contains('@') {
        return Err(
            "email: the login goes in username_env and password_env, not in the smtp URL (its value is not shown)"
                .into(),
        );
    }
    let bracketed = authority.starts_with('[');
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !bracketed || h.ends_with(']') => (
            h.trim_start_matches('[').trim_end_matches(']').to_owned(),
            p.parse::<u16>()
                .map_err(|_| format!("email: {authority}: not a port"))?,
        ),
        _ => (
            authority
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            if implicit { 465 } else { 587 },
        ),
    };
    if host.is_empty() || host.contains(['/', '?', '#']) {
        return Err(format!("email: {authority}: not a host"));
    }
    if c.ca.is_none() && rustls_native_certs::load_native_certs().certs.is_empty() {
        return Err(format!(
            "email to {host}: no CA certificate found on this system to check it by (install ca-certificates, set SSL_CERT_FILE, or give `ca`)"
        ));
    }
    let label = format!(
        "{}://{host}:{port}",
        if implicit { "smtps" } else { "smtp" }
    );
    let mailbox = |s: &str| {
        s.parse::<Mailbox>()
            .map_err(|e| format!("email to {label}: {s:?} is not an address ({e})"))
    };
    let from = mailbox(&c.from)?;
    let to =
        c.to.iter()
            .map(|t| mailbox(t))
            .collect::<Result<Vec<_>, _>>()?;
    if to.is_empty() {
        return Err(format!("email to {label}: no recipient (to = [])"));
    }
    let mut tls = TlsParameters::builder(host.clone());
    if let Some(ca) = &c.ca {
        let pem =
            std::fs::read(ca).map_err(|e| format!("email to {label}: {}: {e}", ca.display()))?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| format!("email to {label}: {}: {e}", ca.display()))?;
        tls = tls.add_root_certificate(cert);
    }
    let tls = tls
        .build_rustls()
        .map_err(|e| format!("email to {label}: TLS: {e}"))?;
    let mut transport = SmtpTransport::builder_dangerous(host)
        .port(port)
        .tls(if implicit {
            Tls::Wrapper(tls)
        } else {
            Tls::Required(tls)
        })
        .timeout(Some(Duration::from_secs(20)));
    let mail_label = format!("email to {label}");
    let var =
        |name: &Option<String>, what: &str| super::webhooks::from_env(name, &mail_label, what);
    match (
        var(&c.username_env, "username_env")?,
        var(&c.password_env, "password_env")?,
    ) {
        (Some(user), Some(password)) => {
            transport = transport.credentials(Credentials::new(user, password));
        }
        (None, None) => {}
        _ => {
            return Err(format!(
                "email to {label}: give both username_env and password_env, or neither"
            ));
        }
    }
    Ok(Mailer {
        label,
        retries: c.retries.unwrap_or(5),
        from,
        to,
        link: c.link.clone(),
        signer,
        transport: transport.build(),
    })
}

/// The message for approval `a`: its subject and plain-text body.
pub(super) fn message(a: &Approval, link: Option<&str>) -> (String, String) {
    let question = sanitize_text(&a.question);
    let one_line: String = question.split_whitespace().collect::<Vec<_>>().join(" ");
    let tool = sanitize_line(&a.tool_name);
    let subject = format!(
        "[headless-run] {tool} asks: {}",
        one_line.chars().take(120).collect::<String>()
    );
    let mut body = format!(
        "{tool} asks:\n\n    {}\n\n",
        question.replace('\n', "\n    ")
    );
    if let Some(context) = a.context.as_deref().filter(|c| !c.trim().is_empty()) {
        body.push_str("On its screen before the question:\n\n");
        for line in sanitize_text(context).lines() {
            body.push_str(&format!("    {line}\n"));
        }
        body.push('\n');
    }
    if !a.options_json.is_empty() {
        let values: Vec<String> = a
            .options_json
            .iter()
            .map(|o| sanitize_line(&o.value))
            .collect();
        body.push_str(&format!("Options: {}\n", values.join(", ")));
    }
    body.push_str(&format!(
        "Approval {} of run {}, asked {}.\n",
        a.approval_id, a.tool_run_id, a.created_at
    ));
    if let Some(url) = link {
        body.push_str(&format!("\nDecide: {url}\n"));
    }
    (subject, body)
}

impl Mailer {
    /// Mails approval `a` once: Ok, or whether to try again and why not.
    pub(super) fn send(&self, a: &Approval) -> Result<(), (bool, String)> {
        let link = match (&self.signer, self.link.as_deref()) {
            (Some(s), Some(base)) => {
                let token =
                    super::links::make(&s.paths, &a.approval_id, &s.operator, s.ttl, s.link_only)
                        .map_err(|e| (false, e))?;
                Some(hr_shared::links::url(base, &token))
            }
            _ => hr_shared::webhook::approval_link(self.link.as_deref(), a),
        };
        let (subject, body) = message(a, link.as_deref());
        let mut m = Message::builder().from(self.from.clone()).subject(subject);
        for to in &self.to {
            m = m.to(to.clone());
        }
        let m = m
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| (false, format!("cannot build the message: {e}")))?;
        self.transport.send(&m).map(|_| ()).map_err(|e| {
            // A permanent refusal (5xx: a bad recipient, no relaying) is not tried again.
            (!e.is_permanent(), e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nowhere() -> hr_shared::paths::StatePaths {
        hr_shared::paths::StatePaths::at(std::path::PathBuf::from("/nonexistent/state"))
    }

    fn cfg(smtp: &str) -> EmailConfig {
        EmailConfig {
            to: vec!["Ops <ops@example.com>".into()],
            from: "hr@example.com".into(),
            smtp: smtp.into(),
            username_env: None,
            password_env: None,
            ca: None,
            link: None,
            operator: None,
            link_only: false,
            link_expires: None,
            retries: None,
        }
    }

    #[test]
    fn the_smtp_url_says_how_tls_is_had_and_never_in_clear() {
        assert_eq!(
            mailer(&cfg("smtp://mail.example"), &nowhere())
                .unwrap()
                .label,
            "smtp://mail.example:587"
        );
        assert_eq!(
            mailer(&cfg("smtps://mail.example"), &nowhere())
                .unwrap()
                .label,
            "smtps://mail.example:465"
        );
        assert_eq!(
            mailer(&cfg("smtp://127.0.0.1:2525"), &nowhere())
                .unwrap()
                .label,
            "smtp://127.0.0.1:2525"
        );
        for bad in [
            "mail.example",
            "http://mail.example",
            "smtp://",
            "smtp://h:x",
            "smtp://a@b",
        ] {
            assert!(mailer(&cfg(bad), &nowhere()).is_err(), "{bad}");
        }
        // A password in the URL is refused and never echoed.
        let err = mailer(&cfg("smtp://me:hunter2@mail.example"), &nowhere())
            .err()
            .unwrap();
        assert!(
            err.contains("username_env") && !err.contains("hunter2"),
            "{err}"
        );
        let err = mailer(&cfg("ftp://me:hunter2@mail.example"), &nowhere())
            .err()
            .unwrap();
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(
            mailer(&cfg("smtp://[::1]"), &nowhere()).unwrap().label,
            "smtp://::1:587"
        );
        let mut c = cfg("smtp://mail.example");
        c.to = vec!["not an address".into()];
        assert!(
            mailer(&c, &nowhere())
                .err()
                .unwrap()
                .contains("not an address")
        );
        c.to.clear();
        assert!(
            mailer(&c, &nowhere())
                .err()
                .unwrap()
                .contains("no recipient")
        );
        let mut c = cfg("smtp://mail.example");
        c.username_env = Some("HR_TEST_SMTP_USER_NEVER_SET".into());
        assert!(mailer(&c, &nowhere()).err().unwrap().contains("is not set"));
    }

    #[test]
    fn the_message_holds_the_question_as_text_and_the_link() {
        let mut a = hr_shared::testing::approval("AP-9", hr_shared::approvals::PromptKind::Confirm);
        a.question = "Delete\u{1b}[31m prod?\nreally".into();
        let (subject, body) = message(&a, Some("https://hr.example/#/approvals/AP-9"));
        assert_eq!(subject, "[headless-run] rm asks: Delete prod? really");
        assert!(!body.contains('\u{1b}'), "{body}");
        assert!(body.contains("Options: y, n"), "{body}");
        assert!(
            body.contains("Decide: https://hr.example/#/approvals/AP-9"),
            "{body}"
        );
    }
}

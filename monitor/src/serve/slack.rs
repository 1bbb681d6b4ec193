//! Slack's buttons (`[slack]` in the user's config): the Approve and Reject buttons of the
//! messages `[[webhooks]]` with `format = "slack"` post come back as Slack's interaction
//! requests to `POST /api/v1/slack/actions`. Each is checked as Slack signs it (the app's
//! signing secret, a timestamp within five minutes: `hr_shared::webhook::slack_action`),
//! its Slack user is looked up in `[slack] users` — an operator token's name, which must be
//! in force — and the decision is made as that operator, channel `slack`, on the version
//! the message showed. Slack shows the answer's text to the one who pressed.

use super::approvals::{DecisionBody, decide_via};
use super::openapi::*;
use super::*;
use hr_shared::config::SlackConfig;
use hr_shared::webhook::{SlackRefused, slack_action};
use std::collections::BTreeMap;

/// `[slack]`, ready: the signing secret (from the server's environment) and the users.
pub(super) struct Slack {
    secret: Vec<u8>,
    users: BTreeMap<String, String>,
}

/// `[slack]` checked before the server listens: its secret's variable is set, and every
/// user maps to a token name.
pub(super) fn setup(c: Option<&SlackConfig>) -> Result<Option<Slack>, String> {
    let Some(c) = c else {
        return Ok(None);
    };
    let secret = webhooks::from_env(
        &Some(c.signing_secret_env.clone()),
        "[slack]",
        "signing_secret_env",
    )?
    .unwrap_or_default();
    if let Some((user, op)) = c.users.iter().find(|(_, op)| !tokens::valid_name(op)) {
        return Err(format!(
            "[slack] users: {} maps to `{}`, which is not a token name",
            hr_shared::sanitize::sanitize_line(user),
            hr_shared::sanitize::sanitize_line(op)
        ));
    }
    Ok(Some(Slack {
        secret: secret.into_bytes(),
        users: c.users.clone(),
    }))
}

/// What Slack shows the one who pressed (`ephemeral`: only them).
fn say(text: impl Into<String>) -> Response {
    ok(
        StatusCode::OK,
        &json!({"response_type": "ephemeral", "replace_original": false, "text": text.into()}),
    )
}

#[utoipa::path(
    post,
    path = "/api/v1/slack/actions",
    operation_id = "slackActions",
    summary = "Slack's button presses (its interactivity request URL)",
    description = "Slack posts here when someone presses Approve or Reject on a message of a `format = \"slack\"` webhook. Signed by Slack (`X-Slack-Signature`, `X-Slack-Request-Timestamp`); needs `[slack]` in the server's config. The decision is made as the operator `[slack] users` names for the Slack user; the answer is the text Slack shows them.",
    security(()),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`payload=` and Slack's block_actions JSON"),
    responses(
        (status = 200, description = "what Slack shows the one who pressed: decided, counted, or why not", body = Object),
        (status = 400, description = "signed, but not one of our buttons", body = ErrorBody),
        (status = 401, description = "not signed by Slack with the signing secret, or too old", body = ErrorBody),
        (status = 404, description = "the server takes no Slack buttons (no `[slack]`)", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn actions(
    State(s): State<Arc<Server>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(slack) = s.slack.as_ref() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "this server takes no Slack buttons ([slack] is not in its config)",
        ));
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let action = match slack_action(
        &slack.secret,
        &header("x-slack-request-timestamp"),
        &header("x-slack-signature"),
        &body,
        now,
    ) {
        Ok(a) => a,
        Err(SlackRefused::Unsigned) => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "not signed by Slack with this server's signing secret, or too old",
            ));
        }
        Err(SlackRefused::NotOurs(why)) => {
            return Err(ApiError::new(StatusCode::BAD_REQUEST, why));
        }
    };
    let Some(operator) = slack.users.get(&action.user_id) else {
        return Ok(say(format!(
            "You are not an operator of headless-run here (your Slack user {} is not in the server's [slack] users): nothing was decided.",
            hr_shared::sanitize::sanitize_line(&action.user_id)
        )));
    };
    let Some(caller) = s.operator_in_force(operator)? else {
        return Ok(say(format!(
            "{} has no operator token in force: nothing was decided.",
            hr_shared::sanitize::sanitize_line(operator)
        )));
    };
    let id = action.approval_id.clone();
    let answer = decide_via(
        &s,
        &caller,
        "slack",
        action.approval_id,
        action.value.to_owned(),
        DecisionBody {
            value: Some(action.value.to_owned()),
            comment: None,
            version: action.version,
        },
    )
    .await;
    Ok(say(match answer {
        Ok(resp) if resp.status() == StatusCode::ACCEPTED => {
            format!("{id}: your approval is counted; more are needed, or a wait timer holds it.")
        }
        Ok(_) => format!("{id}: {} by {}.", past(action.value), caller.name),
        Err(e) => format!("{id}: not decided: {}", e.message()),
    }))
}

fn past(value: &str) -> &'static str {
    if value == "reject" {
        "rejected"
    } else {
        "approved"
    }
}

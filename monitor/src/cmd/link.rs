//! `monitor link`: a decision link to one approval for one operator, made on the server's
//! host (it signs with the server's link key, `STATE/link.key`).

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::serve::links;
use crate::serve::tokens;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
A link opens the web page of `monitor serve` on that one approval, on a phone as well. It
lasts --expires (default 30m, at most 7d) and decides once. It is for one operator: a
decision through it is recorded as that operator's token, which must be in force. Unless it
is --link-only, the page still asks for that operator's token; a --link-only link decides
by itself, so send it only where that operator alone reads it (their own e-mail, a direct
message), never to a channel others see.

Examples:
  monitor link AP-01KQ… --operator alice --base https://hr.example.com:8443
  monitor link AP-01KQ… --operator alice --link-only --expires 15m")]
pub struct Args {
    /// The approval (AP-…, or a unique prefix)
    id: String,
    /// The operator it is for: an operator token's name
    #[arg(long)]
    operator: String,
    /// How long it lasts (e.g. 15m, 2h; at most 7d)
    #[arg(long, value_name = "DUR", default_value = "30m", value_parser = crate::parse::nonzero)]
    expires: std::time::Duration,
    /// The link alone decides (no login): for a channel only that operator reads
    #[arg(long)]
    link_only: bool,
    /// The web page's public URL (default: the token alone is printed, to append to it as
    /// `URL/#/l/TOKEN`)
    #[arg(long, value_name = "URL")]
    base: Option<String>,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    if args.expires.as_secs() > hr_shared::links::MAX_TTL_SECS {
        return Err(CliError::usage("--expires: a link lasts at most 7d"));
    }
    if let Some(base) = &args.base
        && !(base.starts_with("https://") || base.starts_with("http://"))
    {
        return Err(CliError::usage("--base is the web page's http(s):// URL"));
    }
    let now = hr_shared::time::now_rfc3339();
    let all = tokens::load(&ctx.paths).map_err(CliError::error)?;
    if tokens::operator(&all, &args.operator, &now).is_none() {
        return Err(CliError::usage(format!(
            "{} has no operator token in force here (`monitor token create {} --role operator`): a link decides as its operator's token",
            hr_shared::sanitize::sanitize_line(&args.operator),
            hr_shared::sanitize::sanitize_line(&args.operator)
        )));
    }
    let mut store = ctx.open()?;
    let id = ctx.full_id(store.as_mut(), &args.id)?;
    let Some(a) = store.approval(&id)? else {
        return Err(CliError::not_found(format!("no approval {id}")));
    };
    if a.status != hr_shared::status::ApprovalStatus::Pending {
        return Err(CliError::conflict(format!(
            "{id} is {} already: there is nothing to decide",
            a.status
        )));
    }
    let token = links::make(
        &ctx.paths,
        &id,
        &args.operator,
        args.expires,
        args.link_only,
    )
    .map_err(CliError::error)?;
    match &args.base {
        Some(base) => crate::outln!("{}", hr_shared::links::url(base, &token)),
        None => crate::outln!("{token}"),
    }
    Ok(())
}

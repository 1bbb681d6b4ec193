//! Pipelines: a declarative graph of supervised steps with human gates (`monitor pipeline`).
//! `file` reads and checks a pipeline file; `engine` is the pure state machine that says,
//! from the steps' states and one outcome, what happens next.

pub mod run;

pub use hr_shared::pipeline::{engine, file};

use hr_shared::paths::StatePaths;
use hr_shared::store::OperatorStore;

/// Why `who` may not decide approval `approval_id`, when it is a pipeline's human step that
/// names its deciders and `who` is not one of them; `None` otherwise (any other approval,
/// or a step that names none). Once the approval is known to be a pipeline's human step,
/// not being able to read its pipeline refuses too. Through a server the server checks,
/// not this; on PostgreSQL the database checks the login (`hr.decide`), and `monitor serve`
/// (`by_server`) checks the token's name here as well.
pub fn refuse_decider(
    store: &mut dyn OperatorStore,
    paths: &StatePaths,
    approval_id: &str,
    who: &str,
    by_server: bool,
) -> Option<String> {
    if paths.server.is_some() || (paths.store_url.is_some() && !by_server) {
        return None;
    }
    let a = match store.approval(approval_id) {
        Ok(Some(a)) => a,
        // Unknown: the decision says so itself.
        Ok(None) => return None,
        Err(e) => return Some(format!("cannot check who may decide {approval_id}: {e}")),
    };
    let run = match store.run(&a.tool_run_id) {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => return Some(format!("cannot check who may decide {approval_id}: {e}")),
    };
    if run.tool_name != "pipeline" {
        return None;
    }
    run.pipeline_step()?;
    let unreadable =
        |why: String| Some(format!("cannot read the pipeline of {approval_id}: {why}"));
    let Some((ex, node, _)) = hr_shared::pipeline::step_of(&run) else {
        return unreadable("its step is not named".into());
    };
    let e = match hr_shared::store::pipelines::for_store(paths).and_then(|mut p| p.pipeline(&ex)) {
        Ok(Some(e)) => e,
        Ok(None) => return unreadable(format!("no execution {ex}")),
        Err(e) => return unreadable(e.to_string()),
    };
    let def: file::Definition = match serde_json::from_value(e.definition) {
        Ok(d) => d,
        Err(e) => return unreadable(e.to_string()),
    };
    let file::Kind::Human { deciders, .. } = &def.node(&node)?.kind else {
        return None;
    };
    (!deciders.is_empty() && !deciders.iter().any(|d| d == who)).then(|| {
        format!(
            "only {} may decide this pipeline step ({}), not {}",
            deciders.join(", "),
            hr_shared::sanitize::sanitize_line(&node),
            hr_shared::sanitize::sanitize_line(who)
        )
    })
}

#[cfg(test)]
mod tests;

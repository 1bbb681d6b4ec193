//! Pipelines: a declarative graph of supervised steps with human gates (`monitor pipeline`).
//! `file` reads and checks a pipeline file; `engine` is the pure state machine that says,
//! from the steps' states and one outcome, what happens next.

pub mod engine;
pub mod file;
pub mod run;

use hr_shared::paths::StatePaths;
use hr_shared::store::OperatorStore;

/// Why `who` may not decide approval `approval_id`, when it is a pipeline's human step that
/// names its deciders and `who` is not one of them; `None` otherwise (any other approval,
/// or a step that names none).
pub fn refuse_decider(
    store: &mut dyn OperatorStore,
    paths: &StatePaths,
    approval_id: &str,
    who: &str,
) -> Option<String> {
    let a = store.approval(approval_id).ok()??;
    let run = store.run(&a.tool_run_id).ok()??;
    if run.tool_name != "pipeline" {
        return None;
    }
    let step = run.pipeline_step()?;
    let (ex, rest) = step.split_once('/')?;
    let node = rest.rsplit_once('#').map_or(rest, |(n, _)| n);
    let mut pipes = hr_shared::store::pipelines::for_store(paths).ok()?;
    let e = pipes.pipeline(ex).ok()??;
    let def: file::Definition = serde_json::from_value(e.definition).ok()?;
    let file::Kind::Human { deciders, .. } = &def.node(node)?.kind else {
        return None;
    };
    (!deciders.is_empty() && !deciders.iter().any(|d| d == who)).then(|| {
        format!(
            "only {} may decide this pipeline step ({}), not {}",
            deciders.join(", "),
            hr_shared::sanitize::sanitize_line(node),
            hr_shared::sanitize::sanitize_line(who)
        )
    })
}

#[cfg(test)]
mod tests;

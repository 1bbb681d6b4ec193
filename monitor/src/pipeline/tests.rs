//! The pipeline file's rules, one test each, and the engine on the shapes the issue names.

use super::file::{Definition, FileError, Kind};
use std::path::Path;

fn parse(text: &str) -> Result<Definition, FileError> {
    Definition::parse(Path::new("/p/deploy.yaml"), text)
}

fn error(text: &str) -> FileError {
    parse(text).expect_err("must be refused")
}

const GOOD: &str = "
name: deploy
vars: { target: staging }
inputs: [BUILD]
nodes:
  - { id: build, kind: task, command: [make, build], timeout: 10m }
  - { id: test, kind: gate, command: make test, retries: 2 }
  - id: again
    kind: branch
    condition: { field: steps.test.result.flaky, operator: equals, value: true }
    on_true: test
    on_false: fan
    max_iterations: 3
  - { id: fan, kind: parallel }
  - { id: a, kind: task, command: [echo, a] }
  - { id: b, kind: task, command: [echo, b] }
  - { id: join, kind: merge }
  - { id: ok, kind: human, title: Deploy, question: Deploy to production?, default: reject }
  - { id: ship, kind: task, command: [make, deploy] }
edges:
  - { from: build, to: test }
  - { from: test, to: again }
  - { from: fan, to: a }
  - { from: fan, to: b }
  - { from: a, to: join }
  - { from: b, to: join }
  - { from: join, to: ok }
  - { from: ok, to: ship, map: { BUILD: steps.build.result.id } }
";

#[test]
fn a_good_file_loads_with_every_kind() {
    let d = parse(GOOD).unwrap();
    assert_eq!(d.name, "deploy");
    assert_eq!(d.start, "build");
    assert_eq!(d.nodes.len(), 9);
    assert!(matches!(
        d.node("test").unwrap().kind,
        Kind::Gate { retries: 2, .. }
    ));
    assert_eq!(d.successors("again"), ["test", "fan"]);
    assert_eq!(d.predecessors("join"), ["a", "b"]);
    // The definition round-trips through JSON (it is stored so).
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(serde_json::from_str::<Definition>(&json).unwrap(), d);
}

#[test]
fn an_unknown_kind_is_named_with_its_line() {
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: b, kind: teleport }\nedges: [{from: a, to: b}]\n",
    );
    assert!(e.message.contains("teleport"), "{e}");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.to_string().starts_with("/p/deploy.yaml:3"), "{e}");
}

#[test]
fn broken_yaml_and_unknown_fields_say_where() {
    let e = error("nodes:\n  - { id: a, kind: task, command: [\"true\"]\n");
    assert!(e.line.is_some() && e.column.is_some(), "{e}");
    let e = error("nodes:\n  - { id: a, kind: task, command: [\"true\"] }\nedgez: []\n");
    assert!(e.message.contains("edgez"), "{e}");
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn a_missing_target_is_refused() {
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\nedges:\n  - { from: a, to: nowhere }\n",
    );
    assert!(e.message.contains("no node `nowhere`"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    let e = error(
        "nodes:\n  - id: a\n    kind: branch\n    condition: { field: vars.x, operator: equals, value: 1 }\n    on_true: a\n    on_false: gone\n    max_iterations: 2\n",
    );
    assert!(e.message.contains("no node `gone`"), "{e}");
}

#[test]
fn a_cycle_needs_a_branch_which_bounds_it() {
    let looped = "nodes:
  - { id: a, kind: task, command: [\"true\"] }
  - { id: b, kind: task, command: [\"true\"] }
edges:
  - { from: a, to: b }
  - { from: b, to: a }
";
    let e = error(looped);
    assert!(e.message.contains("a cycle without a branch"), "{e}");
    assert!(e.message.contains("a → b → a"), "{e}");
    // A branch bounds its loop: by its max_iterations, or by the default.
    let branch = "nodes:
  - { id: a, kind: task, command: [\"true\"] }
  - id: again
    kind: branch
    condition: { field: steps.a.exit_code, operator: not_equals, value: 0 }
    on_true: a
    on_false: end
  - { id: end, kind: task, command: [\"true\"] }
edges:
  - { from: a, to: again }
";
    let d = parse(branch).unwrap();
    let Kind::Branch { max_iterations, .. } = &d.node("again").unwrap().kind else {
        panic!("a branch")
    };
    assert_eq!(*max_iterations, None, "the default applies when it runs");
    let bounded = branch.replace(
        "    on_false: end\n",
        "    on_false: end\n    max_iterations: 3\n",
    );
    parse(&bounded).unwrap();
    let zero = branch.replace(
        "    on_false: end\n",
        "    on_false: end\n    max_iterations: 0\n",
    );
    assert!(error(&zero).message.contains("max_iterations is from 1"));
}

#[test]
fn an_unreachable_node_is_refused() {
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: island, kind: task, command: [\"true\"] }\n",
    );
    assert!(
        e.message.contains("`island` cannot be reached from `a`"),
        "{e}"
    );
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn field_names_are_letters_digits_underscores_and_dots() {
    for bad in [
        "steps.a.result.$(rm -rf)",
        "steps..a",
        "steps.a.exit_code;",
        "",
        "env.HOME",
    ] {
        let text = format!(
            "nodes:\n  - {{ id: a, kind: task, command: [\"true\"] }}\n  - {{ id: b, kind: task, command: [\"true\"] }}\nedges:\n  - {{ from: a, to: b, condition: {{ field: {bad:?}, operator: exists }} }}\n"
        );
        let e = error(&text);
        assert!(e.message.contains("field"), "{bad}: {e}");
    }
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: b, kind: task, command: [\"true\"] }\nedges:\n  - { from: a, to: b, condition: { field: steps.zz.status, operator: exists } }\n",
    );
    assert!(e.message.contains("no such step"), "{e}");
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: b, kind: task, command: [\"true\"] }\nedges:\n  - { from: a, to: b, map: { \"1BAD\": steps.a.exit_code } }\n",
    );
    assert!(
        e.message.contains("not an environment variable name"),
        "{e}"
    );
}

#[test]
fn ids_options_durations_and_prompts_are_checked() {
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: a, kind: task, command: [\"true\"] }\n",
    );
    assert!(e.message.contains("used twice"), "{e}");
    let e = error("nodes:\n  - { id: \"a/../b\", kind: task, command: [\"true\"] }\n");
    assert!(e.message.contains("node id"), "{e}");
    let e = error("nodes:\n  - { id: a, kind: task, command: [\"true\"], timeout: soon }\n");
    assert!(e.message.contains("`a`"), "{e}");
    let e = error("nodes:\n  - { id: a, kind: task, command: [\"true\"], on_prompt: maybe }\n");
    assert!(e.message.contains("on_prompt"), "{e}");
    let e = error("nodes:\n  - { id: h, kind: human, title: T, question: Q, default: later }\n");
    assert!(e.message.contains("not an option"), "{e}");
    let e = error("nodes:\n  - { id: a, kind: task, command: [] }\n");
    assert!(e.message.contains("empty command"), "{e}");
    let e = error("nodes: []\n");
    assert!(e.message.contains("no nodes"), "{e}");
}

#[test]
fn a_subgraph_is_inlined_between_its_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("review.yaml"),
        "nodes:\n  - { id: lint, kind: task, command: [\"true\"] }\n  - { id: look, kind: human, title: Review, question: Merge? }\nedges:\n  - { from: lint, to: look }\n",
    )
    .unwrap();
    let main = dir.path().join("main.yaml");
    std::fs::write(
        &main,
        "nodes:\n  - { id: code, kind: task, command: [\"true\"] }\n  - { id: review, kind: subgraph, file: review.yaml }\n  - { id: merge, kind: task, command: [\"true\"] }\nedges:\n  - { from: code, to: review }\n  - { from: review, to: merge }\n",
    )
    .unwrap();
    let d = Definition::load(&main).unwrap();
    let ids: Vec<&str> = d.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["code", "review.lint", "review.look", "merge"]);
    assert_eq!(d.successors("code"), ["review.lint"]);
    assert_eq!(d.successors("review.look"), ["merge"]);
    // A subgraph that includes itself is a cycle of files.
    std::fs::write(
        dir.path().join("self.yaml"),
        "nodes:\n  - { id: again, kind: subgraph, file: self.yaml }\n",
    )
    .unwrap();
    let e = Definition::load(&dir.path().join("self.yaml")).unwrap_err();
    assert!(e.message.contains("again"), "{e}");
}

// ------------------------------------------------------------------------------------------
// The engine.

use super::engine::{self, ExecutionStatus, Outcome, Step, StepData, StepStatus};
use std::collections::BTreeMap;

/// Plays a runner: runs every ready task or gate with the exit code `code(node, run)`
/// (`run` counts that node's runs from 0) and its result, answers every human step with
/// `human`, until nothing is ready. Returns the steps and the order things ran in.
fn play(
    def: &Definition,
    vars: &BTreeMap<String, String>,
    mut code: impl FnMut(&str, u32) -> (i32, Option<serde_json::Value>),
    mut human: impl FnMut(&str) -> Outcome,
) -> (Vec<Step>, Vec<String>) {
    let mut steps = engine::start(def, vars).unwrap();
    let mut ran: Vec<String> = Vec::new();
    for _ in 0..1000 {
        let Some(s) = steps
            .iter()
            .find(|s| s.status == StepStatus::Ready)
            .cloned()
        else {
            return (steps, ran);
        };
        let outcome = match &def.node(&s.node).unwrap().kind {
            Kind::Human { .. } => human(&s.node),
            _ => {
                let n = ran.iter().filter(|r| **r == s.node).count() as u32;
                let (c, result) = code(&s.node, n);
                Outcome::Exited { code: c, result }
            }
        };
        ran.push(s.node.clone());
        steps = engine::advance(def, vars, &steps, &s.node, s.iteration, outcome).unwrap();
    }
    panic!("did not finish: {steps:?}");
}

const FLOW: &str = "
nodes:
  - { id: build, kind: task, command: [make] }
  - { id: test, kind: gate, command: [make, test], retries: 2 }
  - { id: work, kind: task, command: [work] }
  - id: more
    kind: branch
    condition: { field: steps.work.result.left, operator: greater_than, value: 0 }
    on_true: work
    on_false: fan
    max_iterations: 5
  - { id: fan, kind: parallel }
  - { id: a, kind: task, command: [a] }
  - { id: b, kind: task, command: [b] }
  - { id: join, kind: merge }
  - { id: ok, kind: human, title: Ship, question: Ship it? }
  - { id: ship, kind: task, command: [ship] }
edges:
  - { from: build, to: test }
  - { from: test, to: work }
  - { from: work, to: more }
  - { from: fan, to: a }
  - { from: fan, to: b }
  - { from: a, to: join }
  - { from: b, to: join }
  - { from: join, to: ok }
  - { from: ok, to: ship, map: { PIPELINE_LAST: steps.work.result.left } }
";

fn flow_codes(node: &str, run: u32) -> (i32, Option<serde_json::Value>) {
    match node {
        // Fails twice, passes on its second retry.
        "test" if run < 2 => (1, None),
        // Three iterations: 2, 1, then 0 left.
        "work" => (0, Some(serde_json::json!({ "left": 2 - run as i64 }))),
        _ => (0, None),
    }
}

#[test]
fn the_engine_runs_retries_loops_fans_out_merges_and_asks() {
    let def = parse(FLOW).unwrap();
    let vars = BTreeMap::new();
    let (steps, ran) = play(&def, &vars, flow_codes, |_| Outcome::Approved {
        comment: Some("ship it".into()),
        choice: Some("approve".into()),
    });
    assert_eq!(
        ran,
        [
            "build", "test", "test", "test", "work", "work", "work", "a", "b", "ok", "ship"
        ]
    );
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
    let ship = engine::latest(&steps, "ship").unwrap();
    assert_eq!(ship.env["HEADLESS_RUN_APPROVAL_COMMENT"], "ship it");
    assert_eq!(ship.env["PIPELINE_LAST"], "0");
    assert_eq!(engine::latest(&steps, "work").unwrap().iteration, 2);
    assert_eq!(engine::latest(&steps, "test").unwrap().attempt, 2);
    // Every step ran exactly once per visit, and everything ended.
    assert!(
        steps.iter().all(|s| s.status == StepStatus::Completed),
        "{steps:?}"
    );
}

#[test]
fn a_rejection_fails_the_execution_with_its_reason_and_nothing_after_runs() {
    let def = parse(FLOW).unwrap();
    let (steps, ran) = play(&def, &BTreeMap::new(), flow_codes, |_| Outcome::Rejected {
        reason: "rejected by alice: not today".into(),
    });
    assert!(!ran.contains(&"ship".to_string()));
    assert_eq!(
        engine::status(&def, &steps),
        ExecutionStatus::Failed("step `ok` failed: rejected by alice: not today".into())
    );
}

#[test]
fn a_gate_out_of_retries_fails_and_a_loop_stops_at_max_iterations() {
    let def = parse(FLOW).unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |n, _| (if n == "test" { 1 } else { 0 }, None),
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran, ["build", "test", "test", "test"]);
    assert!(
        matches!(engine::status(&def, &steps), ExecutionStatus::Failed(r) if r.contains("after 2 retries"))
    );
    // A loop whose condition never lets go.
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |n, _| (0, (n == "work").then(|| serde_json::json!({ "left": 1 }))),
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran.iter().filter(|r| *r == "work").count(), 6, "{ran:?}");
    assert!(
        matches!(engine::status(&def, &steps), ExecutionStatus::Failed(r) if r.contains("max_iterations (5)")),
        "{:?}",
        engine::status(&def, &steps)
    );
}

#[test]
fn a_false_condition_skips_its_way_and_the_merge_still_comes() {
    let def = parse(
        "
vars: { fast: 'yes' }
nodes:
  - { id: fan, kind: parallel }
  - { id: slow, kind: task, command: [slow] }
  - { id: quick, kind: task, command: [quick] }
  - { id: after_slow, kind: task, command: [x] }
  - { id: join, kind: merge }
  - { id: end, kind: task, command: [end] }
edges:
  - { from: fan, to: slow, condition: { field: vars.fast, operator: equals, value: 'no' } }
  - { from: fan, to: quick }
  - { from: slow, to: after_slow }
  - { from: after_slow, to: join }
  - { from: quick, to: join }
  - { from: join, to: end }
",
    )
    .unwrap();
    let vars = def.vars.clone();
    let (steps, ran) = play(
        &def,
        &vars,
        |_, _| (0, None),
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran, ["quick", "end"]);
    for skipped in ["slow", "after_slow"] {
        assert_eq!(
            engine::latest(&steps, skipped).unwrap().status,
            StepStatus::Skipped
        );
    }
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
}

#[test]
fn an_outcome_for_a_settled_step_is_refused() {
    let def = parse(FLOW).unwrap();
    let vars = BTreeMap::new();
    let steps = engine::start(&def, &vars).unwrap();
    let steps = engine::advance(
        &def,
        &vars,
        &steps,
        "build",
        0,
        Outcome::Exited {
            code: 0,
            result: None,
        },
    )
    .unwrap();
    let again = engine::advance(
        &def,
        &vars,
        &steps,
        "build",
        0,
        Outcome::Exited {
            code: 0,
            result: None,
        },
    );
    assert!(again.unwrap_err().contains("already completed"));
    assert!(
        engine::advance(
            &def,
            &vars,
            &steps,
            "nope",
            0,
            Outcome::Approved {
                comment: None,
                choice: None
            }
        )
        .is_err()
    );
}

#[test]
fn conditions_compare_numbers_strings_and_missing_fields() {
    use super::file::{Condition, Operator};
    let mut s = Step::from(StepData {
        node: "t".into(),
        iteration: 0,
        status: StepStatus::Completed,
        attempt: 0,
        exit_code: Some(3),
        result: Some(serde_json::json!({"n": "7", "tags": ["a", "b"], "ok": true})),
        env: BTreeMap::new(),
        comment: None,
        reason: None,
        run: None,
        late_for: None,
    });
    let vars = BTreeMap::from([("env".to_string(), "prod".to_string())]);
    let holds = |field: &str, op: Operator, value: serde_json::Value, s: &Step| {
        engine::evaluate(
            &Condition {
                field: field.into(),
                operator: op,
                value,
            },
            std::slice::from_ref(s),
            &vars,
        )
    };
    assert!(holds("steps.t.exit_code", Operator::Equals, 3.into(), &s));
    assert!(holds("steps.t.exit_code", Operator::Equals, "3".into(), &s));
    assert!(holds(
        "steps.t.result.n",
        Operator::GreaterThan,
        6.into(),
        &s
    ));
    assert!(holds(
        "steps.t.result.tags",
        Operator::Contains,
        "b".into(),
        &s
    ));
    assert!(holds(
        "steps.t.result.ok",
        Operator::Equals,
        true.into(),
        &s
    ));
    assert!(holds(
        "steps.t.status",
        Operator::Equals,
        "completed".into(),
        &s
    ));
    assert!(holds("vars.env", Operator::Equals, "prod".into(), &s));
    assert!(holds(
        "steps.t.result.gone",
        Operator::NotExists,
        serde_json::Value::Null,
        &s
    ));
    assert!(!holds(
        "steps.t.result.gone",
        Operator::Equals,
        serde_json::Value::Null,
        &s
    ));
    assert!(!holds(
        "steps.t.result.gone",
        Operator::GreaterThan,
        0.into(),
        &s
    ));
    s.exit_code = None;
    assert!(!holds(
        "steps.t.exit_code",
        Operator::Exists,
        serde_json::Value::Null,
        &s
    ));
}

#[test]
fn a_branch_into_a_merge_skips_the_way_not_taken_and_the_merge_fires() {
    let def = parse(
        "
nodes:
  - { id: start, kind: task, command: [go] }
  - id: b
    kind: branch
    condition: { field: steps.start.result.more, operator: equals, value: true }
    on_true: extra
    on_false: join
  - { id: extra, kind: task, command: [extra] }
  - { id: extra2, kind: task, command: [extra2] }
  - { id: join, kind: merge }
  - { id: end, kind: task, command: [end] }
edges:
  - { from: start, to: b }
  - { from: extra, to: extra2 }
  - { from: extra2, to: join }
  - { from: join, to: end }
",
    )
    .unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |_, _| (0, None),
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran, ["start", "end"]);
    for skipped in ["extra", "extra2"] {
        assert_eq!(
            engine::latest(&steps, skipped).unwrap().status,
            StepStatus::Skipped
        );
    }
    assert_eq!(
        engine::latest(&steps, "join").unwrap().status,
        StepStatus::Completed
    );
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
    // The other way: extra and extra2 run, then the merge.
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |n, _| {
            (
                0,
                (n == "start").then(|| serde_json::json!({ "more": true })),
            )
        },
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran, ["start", "extra", "extra2", "end"]);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
}

#[test]
fn a_human_steps_choice_is_its_result_for_a_branch() {
    let def = parse(
        "
nodes:
  - { id: ask, kind: human, title: T, question: Which?, options: [blue, green] }
  - id: which
    kind: branch
    condition: { field: steps.ask.result.choice, operator: equals, value: green }
    on_true: green
    on_false: blue
  - { id: green, kind: task, command: [g] }
  - { id: blue, kind: task, command: [b] }
edges:
  - { from: ask, to: which }
",
    )
    .unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |_, _| (0, None),
        |_| Outcome::Approved {
            comment: None,
            choice: Some("green".into()),
        },
    );
    assert_eq!(ran, ["ask", "green"]);
    assert_eq!(
        engine::latest(&steps, "blue").unwrap().status,
        StepStatus::Skipped
    );
}

#[test]
fn a_subgraphs_fields_name_its_own_steps_and_a_branch_may_go_into_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("check.yaml"),
        "vars: { level: strict, shared: inner }
inputs: [OUT]
nodes:
  - { id: test, kind: task, command: [t] }
  - { id: report, kind: task, command: [r] }
edges:
  - { from: test, to: report, condition: { field: steps.test.exit_code, operator: equals, value: 0 }, map: { OUT: steps.test.result.out } }
",
    )
    .unwrap();
    let main = dir.path().join("main.yaml");
    std::fs::write(
        &main,
        "vars: { shared: outer }
nodes:
  - { id: test, kind: task, command: [outer] }
  - id: again
    kind: branch
    condition: { field: steps.test.exit_code, operator: equals, value: 0 }
    on_true: check
    on_false: done
  - { id: check, kind: subgraph, file: check.yaml }
  - { id: done, kind: task, command: [d] }
edges:
  - { from: test, to: again }
",
    )
    .unwrap();
    let d = Definition::load(&main).unwrap();
    let e = d.edges.iter().find(|e| e.from == "check.test").unwrap();
    assert_eq!(
        e.condition.as_ref().unwrap().field,
        "steps.check.test.exit_code"
    );
    assert_eq!(e.map["OUT"], "steps.check.test.result.out");
    // The outer branch's own field is the outer step's; its target is the subgraph's start.
    let Kind::Branch {
        condition, on_true, ..
    } = &d.node("again").unwrap().kind
    else {
        panic!()
    };
    assert_eq!(condition.field, "steps.test.exit_code");
    assert_eq!(on_true, "check.test");
    assert_eq!(d.vars["level"], "strict");
    assert_eq!(d.vars["shared"], "outer", "the including file's vars win");
}

#[test]
fn a_result_cannot_be_mapped_into_what_changes_what_runs() {
    for var in [
        "LD_PRELOAD",
        "PATH",
        "BASH_ENV",
        "HEADLESS_RUN_TOKEN",
        "AUTO_APPROVAL",
        "PYTHONPATH",
        "NODE_OPTIONS",
    ] {
        let e = error(&format!(
            "nodes:\n  - {{ id: a, kind: task, command: [\"true\"] }}\n  - {{ id: b, kind: task, command: [\"true\"] }}\nedges:\n  - {{ from: a, to: b, map: {{ {var}: steps.a.result.x }} }}\n"
        ));
        assert!(e.message.contains("change what runs"), "{var}: {e}");
    }
    let e = error(
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - id: b\n    kind: branch\n    condition: { field: vars.x, operator: exists }\n    on_true: a\n    on_false: c\n    max_iterations: 1000000\n  - { id: c, kind: task, command: [\"true\"] }\nedges:\n  - { from: a, to: b }\n",
    );
    assert!(e.message.contains("max_iterations is from 1 to"), "{e}");
}

#[test]
fn a_host_label_is_checked_and_a_step_gets_only_the_variables_mapped_into_it() {
    let e = error("nodes:\n  - { id: a, kind: task, command: 'true', host: 'prod host' }\n");
    assert!(e.to_string().contains("host label"), "{e}");
    let def = parse(
        "inputs: [BUILD]\nnodes:\n  - { id: a, kind: task, command: 'true', host: prod-1 }\n  - { id: b, kind: task, command: 'true' }\nedges:\n  - { from: a, to: b, map: { BUILD: steps.a.result.id } }\n",
    )
    .unwrap();
    assert!(def.allows_env("b", "BUILD"));
    assert!(def.allows_env("b", super::engine::ENV_COMMENT));
    // Not mapped into it, or mapped elsewhere, or what loads code: never from the row.
    assert!(!def.allows_env("a", "BUILD"));
    assert!(!def.allows_env("b", "BASH_ENV"));
    assert!(!def.allows_env("b", "PIPELINE_VAR_TARGET"));
}

#[test]
fn a_runner_or_worker_is_gone_by_its_beat_and_a_clock_ahead_is_alive() {
    use super::run::runner_gone;
    let now = hr_shared::time::now_rfc3339();
    let old = "2000-01-01T00:00:00.000Z";
    let ahead = hr_shared::time::to_rfc3339(
        std::time::SystemTime::now() + std::time::Duration::from_secs(5),
    );
    let elsewhere = "no-such-host-hr 1 1";
    assert!(!runner_gone(elsewhere, Some(&now)));
    assert!(
        !runner_gone(elsewhere, Some(&ahead)),
        "a clock ahead is alive"
    );
    assert!(runner_gone(elsewhere, Some(old)));
    let far_ahead = hr_shared::time::to_rfc3339(
        std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
    );
    assert!(
        runner_gone(elsewhere, Some(&far_ahead)),
        "a clock far ahead is not believed"
    );
    assert!(runner_gone(elsewhere, None));
    assert!(runner_gone(elsewhere, Some("not a time")));
    assert!(runner_gone("garbled", Some(&now)));
}

fn exited(code: i32, result: Option<serde_json::Value>) -> Outcome {
    Outcome::Exited { code, result }
}

/// The steps after node `node`'s ready visit ran with `code` (its latest visit).
fn ran(
    def: &Definition,
    steps: &[Step],
    node: &str,
    code: i32,
    result: Option<serde_json::Value>,
) -> Vec<Step> {
    let s = engine::latest(steps, node).unwrap();
    engine::advance(
        def,
        &BTreeMap::new(),
        steps,
        node,
        s.iteration,
        exited(code, result),
    )
    .unwrap()
}

fn status_of(steps: &[Step], node: &str) -> StepStatus {
    engine::latest(steps, node).unwrap().status
}

#[test]
fn the_comparison_list_and_text_operators() {
    use super::file::{Condition, Operator};
    let s = Step::from(StepData {
        node: "t".into(),
        iteration: 0,
        status: StepStatus::Completed,
        attempt: 0,
        exit_code: Some(3),
        result: Some(serde_json::json!({"n": "7", "tag": "v1.2-rc", "env": "prod", "k": 2})),
        env: BTreeMap::new(),
        comment: None,
        reason: None,
        run: None,
        late_for: None,
    });
    let vars = BTreeMap::new();
    let holds = |field: &str, operator: Operator, value: serde_json::Value| {
        engine::evaluate(
            &Condition {
                field: field.into(),
                operator,
                value,
            },
            std::slice::from_ref(&s),
            &vars,
        )
    };
    use serde_json::json;
    // >= and <=: numbers as numbers (a string of digits too), equal included.
    assert!(holds(
        "steps.t.result.n",
        Operator::GreaterThanOrEqual,
        json!(7)
    ));
    assert!(holds(
        "steps.t.result.n",
        Operator::GreaterThanOrEqual,
        json!("6.5")
    ));
    assert!(!holds(
        "steps.t.result.n",
        Operator::GreaterThanOrEqual,
        json!(8)
    ));
    assert!(holds(
        "steps.t.exit_code",
        Operator::LessThanOrEqual,
        json!(3)
    ));
    assert!(!holds(
        "steps.t.exit_code",
        Operator::LessThanOrEqual,
        json!(2)
    ));
    assert!(!holds(
        "steps.t.result.tag",
        Operator::LessThanOrEqual,
        json!(9)
    ));
    assert!(!holds(
        "steps.t.result.gone",
        Operator::GreaterThanOrEqual,
        json!(0)
    ));
    // in / not_in: equal to an item (numbers as numbers).
    assert!(holds(
        "steps.t.result.env",
        Operator::In,
        json!(["staging", "prod"])
    ));
    assert!(holds("steps.t.result.k", Operator::In, json!(["2", 5])));
    assert!(!holds("steps.t.result.env", Operator::In, json!(["dev"])));
    assert!(!holds("steps.t.result.gone", Operator::In, json!(["x"])));
    assert!(holds("steps.t.result.env", Operator::NotIn, json!(["dev"])));
    assert!(!holds(
        "steps.t.result.env",
        Operator::NotIn,
        json!(["prod"])
    ));
    assert!(holds("steps.t.result.gone", Operator::NotIn, json!(["x"])));
    // starts_with / ends_with: text, a number as written.
    assert!(holds(
        "steps.t.result.tag",
        Operator::StartsWith,
        json!("v1.")
    ));
    assert!(!holds(
        "steps.t.result.tag",
        Operator::StartsWith,
        json!("v2")
    ));
    assert!(holds(
        "steps.t.result.tag",
        Operator::EndsWith,
        json!("-rc")
    ));
    assert!(holds("steps.t.exit_code", Operator::EndsWith, json!(3)));
    assert!(!holds("steps.t.result.gone", Operator::EndsWith, json!("")));
    assert!(!holds("steps.t.result", Operator::StartsWith, json!("{")));
}

const LOOP: &str = "
nodes:
  - { id: fix, kind: task, command: [fix] }
  - id: again
    kind: branch
    condition: { field: steps.fix.result.fixed, operator: not_equals, value: true }
    on_true: fix
    on_false: done
    max_iterations: 2
    on_max_iterations_reached: escalate
  - { id: done, kind: task, command: [done] }
  - { id: escalate, kind: human, title: Stuck, question: Take over? }
edges:
  - { from: fix, to: again }
";

#[test]
fn a_spent_loop_goes_to_its_escalation_and_the_way_not_taken_is_skipped() {
    let def = parse(LOOP).unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |_, _| (0, Some(serde_json::json!({"fixed": false}))),
        |_| Outcome::Approved {
            comment: None,
            choice: None,
        },
    );
    assert_eq!(ran, ["fix", "fix", "fix", "escalate"], "{steps:?}");
    let branch = engine::latest(&steps, "again").unwrap();
    assert_eq!(branch.status, StepStatus::Completed);
    assert_eq!(
        branch.result.as_ref().unwrap()["outcome"],
        engine::MAX_ITERATIONS_REACHED
    );
    assert_eq!(status_of(&steps, "done"), StepStatus::Skipped);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
    // A loop that lets go before: no escalation.
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |_, n| (0, Some(serde_json::json!({"fixed": n >= 1}))),
        |_| panic!("not asked"),
    );
    assert_eq!(ran, ["fix", "fix", "done"]);
    assert_eq!(status_of(&steps, "escalate"), StepStatus::Skipped);
    // Without a way out and without max_iterations: the default bound, then the failure.
    let plain = LOOP
        .replace("    max_iterations: 2\n", "")
        .replace("    on_max_iterations_reached: escalate\n", "")
        .replace(
            "  - { id: escalate, kind: human, title: Stuck, question: Take over? }\n",
            "",
        );
    let def = parse(&plain).unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |_, _| (0, Some(serde_json::json!({"fixed": false}))),
        |_| panic!("not asked"),
    );
    let default = super::file::DEFAULT_MAX_ITERATIONS as usize;
    assert_eq!(ran.len(), default + 1, "{ran:?}");
    assert!(matches!(
        engine::status(&def, &steps),
        ExecutionStatus::Failed(r) if r.contains(&format!("max_iterations ({default})"))
    ));
}

const FAN: &str = "
nodes:
  - { id: fan, kind: parallel, branches: [a, b] }
  - { id: a, kind: task, command: [a] }
  - { id: b, kind: task, command: [b] }
  - { id: b2, kind: task, command: [b2] }
  - { id: join, kind: merge }
  - { id: end, kind: task, command: [end] }
edges:
  - { from: a, to: join }
  - { from: b, to: b2 }
  - { from: b2, to: join }
  - { from: join, to: end }
";

#[test]
fn a_failed_step_fails_at_once_or_lets_the_rest_run_without_fail_fast() {
    let def = parse(FAN).unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    assert_eq!(
        status_of(&steps, "a"),
        StepStatus::Ready,
        "the branches list"
    );
    assert_eq!(status_of(&steps, "b"), StepStatus::Ready);
    let steps = ran(&def, &steps, "a", 2, None);
    assert!(matches!(
        engine::status(&def, &steps),
        ExecutionStatus::Failed(_)
    ));

    let def = parse(&format!("fail_fast: false\n{FAN}")).unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = ran(&def, &steps, "a", 2, None);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Running);
    let steps = ran(&def, &steps, "b", 0, None);
    assert_eq!(
        status_of(&steps, "b2"),
        StepStatus::Ready,
        "the other way runs on"
    );
    let steps = ran(&def, &steps, "b2", 0, None);
    // The merge waits for a way that failed: nothing left to run, the execution fails.
    assert!(engine::latest(&steps, "join").is_none());
    assert!(matches!(
        engine::status(&def, &steps),
        ExecutionStatus::Failed(r) if r.contains("step `a` failed")
    ));
}

#[test]
fn a_step_that_may_fail_leads_on() {
    let text = FAN.replace(
        "{ id: a, kind: task, command: [a] }",
        "{ id: a, kind: task, command: [a], continue_on_failure: true }",
    );
    let def = parse(&text).unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |n, _| (if n == "a" { 4 } else { 0 }, None),
        |_| panic!("not asked"),
    );
    assert_eq!(ran, ["a", "b", "b2", "end"]);
    assert_eq!(status_of(&steps, "a"), StepStatus::Failed);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
}

#[test]
fn a_first_merge_goes_on_with_the_winner_and_cancels_the_rest() {
    let text = FAN.replace(
        "{ id: join, kind: merge }",
        "{ id: join, kind: merge, wait_for: first, strategy: first }",
    );
    let def = parse(&text).unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = ran(&def, &steps, "b", 0, None);
    let steps = ran(&def, &steps, "a", 0, Some(serde_json::json!({"won": "a"})));
    assert_eq!(status_of(&steps, "join"), StepStatus::Completed);
    assert_eq!(
        engine::latest(&steps, "join").unwrap().result,
        Some(serde_json::json!({"won": "a"}))
    );
    assert_eq!(status_of(&steps, "end"), StepStatus::Ready);
    let loser = engine::latest(&steps, "b2").unwrap();
    assert_eq!(loser.status, StepStatus::Cancelled);
    assert!(
        loser
            .reason
            .as_deref()
            .unwrap()
            .contains("`a` reached merge `join` first"),
        "{loser:?}"
    );
    // The loser's late end changes nothing.
    let s = engine::latest(&steps, "b2").unwrap();
    assert!(
        engine::advance(
            &def,
            &BTreeMap::new(),
            &steps,
            "b2",
            s.iteration,
            exited(0, None)
        )
        .is_err()
    );
    let steps = ran(&def, &steps, "end", 0, None);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
    assert_eq!(steps.iter().filter(|s| s.node == "join").count(), 1);
}

#[test]
fn an_any_merge_goes_on_once_and_lets_the_rest_finish() {
    let text = FAN.replace(
        "{ id: join, kind: merge }",
        "{ id: join, kind: merge, wait_for: any }",
    );
    let def = parse(&text).unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = ran(&def, &steps, "a", 0, Some(serde_json::json!(1)));
    assert_eq!(status_of(&steps, "end"), StepStatus::Ready);
    assert_eq!(status_of(&steps, "b"), StepStatus::Ready, "not cancelled");
    assert_eq!(
        engine::latest(&steps, "join").unwrap().result,
        Some(serde_json::json!({"a": 1})),
        "by_branch"
    );
    let steps = ran(&def, &steps, "b", 0, None);
    let steps = ran(&def, &steps, "b2", 0, None);
    let steps = ran(&def, &steps, "end", 0, None);
    assert_eq!(
        steps.iter().filter(|s| s.node == "join").count(),
        1,
        "{steps:?}"
    );
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
}

#[test]
fn merge_strategies_make_the_merges_result() {
    for (strategy, want) in [
        (
            "by_branch",
            serde_json::json!({"a": {"x": 1, "y": 1}, "b2": {"x": 2, "z": 2}}),
        ),
        ("union", serde_json::json!({"x": 1, "y": 1, "z": 2})),
        ("first", serde_json::json!({"x": 1, "y": 1})),
    ] {
        let text = FAN.replace(
            "{ id: join, kind: merge }",
            &format!("{{ id: join, kind: merge, strategy: {strategy} }}"),
        );
        let def = parse(&text).unwrap();
        let steps = engine::start(&def, &BTreeMap::new()).unwrap();
        let steps = ran(&def, &steps, "b", 0, None);
        let steps = ran(
            &def,
            &steps,
            "b2",
            0,
            Some(serde_json::json!({"x": 2, "z": 2})),
        );
        let steps = ran(
            &def,
            &steps,
            "a",
            0,
            Some(serde_json::json!({"x": 1, "y": 1})),
        );
        assert_eq!(
            engine::latest(&steps, "join").unwrap().result,
            Some(want),
            "{strategy}"
        );
    }
}

#[test]
fn a_loop_back_into_an_any_merge_goes_round_again() {
    let def = parse(
        "
nodes:
  - { id: init, kind: task, command: [init] }
  - { id: m, kind: merge, wait_for: any }
  - { id: body, kind: task, command: [body] }
  - id: again
    kind: branch
    condition: { field: steps.body.result.more, operator: equals, value: true }
    on_true: m
    on_false: end
    max_iterations: 5
  - { id: end, kind: task, command: [end] }
edges:
  - { from: init, to: m }
  - { from: m, to: body }
  - { from: body, to: again }
",
    )
    .unwrap();
    let (steps, ran) = play(
        &def,
        &BTreeMap::new(),
        |n, run| {
            (
                0,
                (n == "body").then(|| serde_json::json!({ "more": run < 2 })),
            )
        },
        |_| panic!("not asked"),
    );
    assert_eq!(ran, ["init", "body", "body", "body", "end"], "{steps:?}");
    assert_eq!(steps.iter().filter(|s| s.node == "m").count(), 3);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
}

#[test]
fn a_race_cancels_only_its_own_losers_and_what_they_alone_led_to() {
    let def = parse(
        "
nodes:
  - { id: fan, kind: parallel, branches: [a, b, lint] }
  - { id: a, kind: task, command: [a] }
  - { id: b, kind: task, command: [b] }
  - { id: b2, kind: task, command: [b2] }
  - { id: side, kind: task, command: [side] }
  - { id: race, kind: merge, wait_for: first }
  - { id: lint, kind: task, command: [lint] }
  - { id: after, kind: task, command: [after] }
  - { id: join, kind: merge }
  - { id: end, kind: task, command: [end] }
edges:
  - { from: a, to: race }
  - { from: b, to: b2 }
  - { from: b, to: side }
  - { from: b2, to: race }
  - { from: race, to: after }
  - { from: after, to: join }
  - { from: lint, to: join }
  - { from: join, to: end }
",
    )
    .unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = ran(&def, &steps, "a", 0, None);
    assert_eq!(status_of(&steps, "b"), StepStatus::Cancelled);
    assert_eq!(status_of(&steps, "b2"), StepStatus::Skipped);
    assert_eq!(
        status_of(&steps, "side"),
        StepStatus::Skipped,
        "only b led there"
    );
    assert_eq!(
        status_of(&steps, "lint"),
        StepStatus::Ready,
        "not in the race"
    );
    let steps = ran(&def, &steps, "after", 0, None);
    assert!(engine::latest(&steps, "join").is_none(), "lint still runs");
    let steps = ran(&def, &steps, "lint", 0, None);
    let steps = ran(&def, &steps, "end", 0, None);
    assert_eq!(engine::status(&def, &steps), ExecutionStatus::Completed);
    assert_eq!(steps.iter().filter(|s| s.node == "race").count(), 1);
}

#[test]
fn a_failure_that_may_go_on_does_not_win_a_race() {
    let text = FAN
        .replace(
            "{ id: join, kind: merge }",
            "{ id: join, kind: merge, wait_for: first, strategy: first }",
        )
        .replace(
            "{ id: a, kind: task, command: [a] }",
            "{ id: a, kind: task, command: [a], continue_on_failure: true }",
        );
    let def = parse(&text).unwrap();
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = ran(&def, &steps, "a", 1, Some(serde_json::json!("broken")));
    assert!(engine::latest(&steps, "join").is_none(), "{steps:?}");
    assert_eq!(status_of(&steps, "b"), StepStatus::Ready);
    let steps = ran(&def, &steps, "b", 0, None);
    let steps = ran(&def, &steps, "b2", 0, Some(serde_json::json!({"ok": true})));
    let join = engine::latest(&steps, "join").unwrap();
    assert_eq!(join.status, StepStatus::Completed);
    assert_eq!(join.result, Some(serde_json::json!({"ok": true})));
}

#[test]
fn an_escalation_may_not_lead_back_into_its_loop_or_be_the_branch() {
    let back = LOOP.replace(
        "edges:\n  - { from: fix, to: again }\n",
        "  - { id: reset, kind: task, command: [reset] }\nedges:\n  - { from: fix, to: again }\n  - { from: escalate, to: reset }\n  - { from: reset, to: fix }\n",
    );
    let e = error(&back);
    assert!(e.message.contains("a cycle without a branch"), "{e}");
    let own = LOOP.replace(
        "on_max_iterations_reached: escalate",
        "on_max_iterations_reached: again",
    );
    let e = error(&own);
    assert!(e.message.contains("goes out of the loop"), "{e}");
}

#[test]
fn a_subgraph_cannot_set_the_whole_pipelines_flow() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main.yaml");
    std::fs::write(
        &main,
        "nodes:\n  - { id: a, kind: task, command: [a] }\n  - { id: s, kind: subgraph, file: sub.yaml }\nedges:\n  - { from: a, to: s }\n",
    )
    .unwrap();
    for head in ["fail_fast: false\n", "max_parallel: 3\n"] {
        std::fs::write(
            dir.path().join("sub.yaml"),
            format!("{head}nodes:\n  - {{ id: x, kind: task, command: [x] }}\n"),
        )
        .unwrap();
        let e = Definition::load(&main).unwrap_err();
        assert!(e.message.contains("the whole pipeline's"), "{head}: {e}");
    }
}

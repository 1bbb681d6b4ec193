//! A pipeline file (YAML): `nodes` of kinds `task`, `gate`, `human`, `branch`, `parallel`,
//! `merge`, `subgraph`, and `edges` between them, checked in full before anything runs.
//! Errors name the file, and the line and column where the parser knows them.
//!
//! ```yaml
//! name: deploy
//! vars: { target: staging }
//! inputs: [BUILD]
//! nodes:
//!   - { id: build, kind: task, command: [make, build] }
//!   - { id: test, kind: gate, command: make test, retries: 2 }
//!   - { id: ok, kind: human, title: Deploy, question: "Deploy to production?" }
//!   - { id: ship, kind: task, command: [make, deploy] }
//! edges:
//!   - { from: build, to: test }
//!   - { from: test, to: ok }
//!   - { from: ok, to: ship, map: { BUILD: steps.build.result.id } }
//! ```
//!
//! Loading inlines subgraphs (their nodes as `SUBGRAPH.NODE`), so what is stored and run is
//! one flat [`Definition`]. A subgraph is a regular file in the directory of the file that
//! names it, or below it ([`super::source`]).
//!
//! `map` puts what a step's tool sent into a later step's environment, so its targets are
//! an allow-list: the names the file declares in `inputs:`, and any `PIPELINE_…` name
//! ([`INPUT_PREFIX`]) but `PIPELINE_VAR_…` (the starter's `--var`s). Neither can name a
//! variable that loads code or configures a tool ([`changes_what_runs`]), declared or not.
//! A subgraph is checked as a file of its own (its maps against its own `inputs:`), and
//! the inlined definition keeps every file's declarations.
//!
//! A stored definition can be held to the same rules again by whoever runs from it
//! ([`Definition::from_stored`]) and pinned by [`Definition::digest`].

use super::source;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A command: an argument vector, or one string run by `sh -c`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Command {
    Argv(Vec<String>),
    Shell(String),
}

impl Command {
    /// The argument vector to run.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Argv(v) => v.clone(),
            Command::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        }
    }
}

/// A structured condition: `field` `operator` `value`. Fields: `steps.ID.exit_code`,
/// `steps.ID.status`, `steps.ID.result.PATH`, `steps.ID.iteration`, `vars.NAME`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub field: String,
    pub operator: Operator,
    #[serde(default)]
    pub value: serde_json::Value,
}

/// How a condition compares its field with its value. Numbers compare as numbers; `in` and
/// `not_in` take a list; `starts_with` and `ends_with` compare text. The symbols (`==`,
/// `!=`, `>`, `<`, `>=`, `<=`) are accepted for the names, and stored as the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    #[serde(alias = "==")]
    Equals,
    #[serde(alias = "!=")]
    NotEquals,
    #[serde(alias = ">")]
    GreaterThan,
    #[serde(alias = "<")]
    LessThan,
    #[serde(alias = ">=", alias = "gte")]
    GreaterThanOrEqual,
    #[serde(alias = "<=", alias = "lte")]
    LessThanOrEqual,
    Contains,
    In,
    NotIn,
    StartsWith,
    EndsWith,
    Exists,
    NotExists,
}

impl Operator {
    /// What the condition's `value` must be for this operator, if it is not what it must be.
    pub fn value_refusal(self, value: &serde_json::Value) -> Option<&'static str> {
        use serde_json::Value;
        match self {
            Operator::In | Operator::NotIn => {
                (!value.is_array()).then_some("takes a list: value: [a, b]")
            }
            Operator::StartsWith | Operator::EndsWith => {
                (!matches!(value, Value::String(_) | Value::Number(_))).then_some("takes text")
            }
            // (`greater_than` and `less_than` took any value before: a stored definition
            // that compares with text still reads, and never holds.)
            Operator::GreaterThanOrEqual | Operator::LessThanOrEqual => {
                let number = match value {
                    Value::Number(_) => true,
                    Value::String(s) => s.trim().parse::<f64>().is_ok(),
                    _ => false,
                };
                (!number).then_some("compares numbers: value is a number")
            }
            Operator::Equals
            | Operator::NotEquals
            | Operator::Contains
            | Operator::GreaterThan
            | Operator::LessThan => None,
            Operator::Exists | Operator::NotExists => None,
        }
    }
}

/// A duration as the file wrote it: `10m`, or a whole number of seconds (`30`), kept as
/// text (`"30"`) for the checker and the step to read as a duration.
fn duration_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a duration such as \"10m\" or a whole number of seconds")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(Some(s.to_owned()))
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            Ok(Some(n.to_string()))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// What a step runs and how it is supervised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub command: Command,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Hard timeout (`10m`, or a number of seconds).
    #[serde(default, deserialize_with = "duration_text")]
    pub timeout: Option<String>,
    /// Stall timeout: no output for this long.
    #[serde(default, deserialize_with = "duration_text")]
    pub stall_timeout: Option<String>,
    /// `exit` (a prompt fails the step, its approval left for a re-run) or `wait` (the step
    /// waits for the decision).
    #[serde(default)]
    pub on_prompt: Option<String>,
    /// A host label: only a worker with this label runs it.
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Kind {
    Task {
        #[serde(flatten)]
        run: Run,
    },
    Gate {
        #[serde(flatten)]
        run: Run,
        /// How many times a failing gate is run again.
        #[serde(default)]
        retries: u32,
    },
    Human {
        title: String,
        question: String,
        #[serde(default = "approve_reject")]
        options: Vec<String>,
        #[serde(default)]
        default: Option<String>,
        /// `1h` (or a number of seconds): undecided by then, the step fails.
        #[serde(default, deserialize_with = "duration_text")]
        expires: Option<String>,
        /// Who may decide it (OS users on the embedded store, token names over `monitor
        /// serve`); none: whoever may decide an approval.
        #[serde(default)]
        deciders: Vec<String>,
        /// Distinct people who must approve it (`crate::reviews`), never its starter.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reviewers: Option<u32>,
        /// The group they must belong to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        /// How long an approval is held before the step moves (`10m`); still rejectable.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "duration_text"
        )]
        wait: Option<String>,
    },
    Branch {
        condition: Condition,
        on_true: String,
        on_false: String,
        /// How many times the branch may send the flow back to a step already run (the
        /// loop's body runs at most `max_iterations + 1` times; default
        /// [`DEFAULT_MAX_ITERATIONS`]); once more, the flow goes to
        /// `on_max_iterations_reached`, or without one the pipeline fails.
        #[serde(default)]
        max_iterations: Option<u32>,
        /// Where the flow goes when the loop has gone back `max_iterations` times and would
        /// go back once more (the `max_iterations_reached` outcome): an escalation, a human
        /// step, a way out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_max_iterations_reached: Option<String>,
    },
    Parallel {
        /// The nodes it starts, besides its edges' targets (an edge may still carry a
        /// condition or a map).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        branches: Vec<String>,
    },
    Merge {
        /// `all` (the default): goes on once every way in has ended; `any`: once one has
        /// completed, the others going on; `first`: once one has completed, the others
        /// cancelled.
        #[serde(default, skip_serializing_if = "WaitFor::is_all")]
        wait_for: WaitFor,
        /// What the merge's result is, from its ways in: `by_branch` (the default: each
        /// branch's result under its node id), `union` (the results' keys together, the
        /// earlier way in the file winning a key two set), `first` (the result of the
        /// first way in that completed: the winner under `any` or `first`).
        #[serde(default, skip_serializing_if = "Strategy::is_by_branch")]
        strategy: Strategy,
    },
    Subgraph {
        file: String,
    },
}

/// When a merge goes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    #[default]
    All,
    Any,
    First,
}

impl WaitFor {
    fn is_all(&self) -> bool {
        *self == WaitFor::All
    }
}

/// How a merge makes its result from its ways in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    ByBranch,
    Union,
    First,
}

impl Strategy {
    fn is_by_branch(&self) -> bool {
        *self == Strategy::ByBranch
    }
}

/// How many times a loop may go back when its branch does not say (`max_iterations`).
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;

/// A host label (`host:` of a step, `monitor worker --labels`).
pub fn valid_label(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn approve_reject() -> Vec<String> {
    vec!["approve".into(), "reject".into()]
}

impl Kind {
    /// The nodes it names to go to (a branch's, a parallel's branches), to rename them.
    fn targets_mut(&mut self) -> Vec<&mut String> {
        match self {
            Kind::Branch {
                on_true,
                on_false,
                on_max_iterations_reached,
                ..
            } => {
                let mut out = vec![on_true, on_false];
                out.extend(on_max_iterations_reached.as_mut());
                out
            }
            Kind::Parallel { branches } => branches.iter_mut().collect(),
            _ => Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Kind::Task { .. } => "task",
            Kind::Gate { .. } => "gate",
            Kind::Human { .. } => "human",
            Kind::Branch { .. } => "branch",
            Kind::Parallel { .. } => "parallel",
            Kind::Merge { .. } => "merge",
            Kind::Subgraph { .. } => "subgraph",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    /// A name to show for it (the id when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What it is for, for whoever reads the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A task, gate or human step whose failure does not fail the pipeline: the flow goes
    /// on from it as from a completed step (its status stays `failed`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub continue_on_failure: bool,
    #[serde(flatten)]
    pub kind: Kind,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// A name for it, unique in the file (for whoever reads the pipeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub condition: Option<Condition>,
    /// Fields of earlier steps into the target step's environment: `{VAR: field}`.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    /// The variables an edge's `map` may set, besides `PIPELINE_…` ones.
    #[serde(default)]
    inputs: BTreeSet<String>,
    /// The first node (default: the first listed).
    #[serde(default)]
    start: Option<String>,
    #[serde(default = "yes")]
    fail_fast: bool,
    #[serde(default)]
    max_parallel: Option<u32>,
    nodes: Vec<Node>,
    #[serde(default)]
    edges: Vec<Edge>,
}

/// A loaded, checked pipeline: subgraphs inlined, ready to store and run. Unknown fields
/// are refused when one is read back (a row this version does not fully understand is not
/// run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub name: String,
    pub vars: BTreeMap<String, String>,
    /// The variables `map` may set (declared by the file and its subgraphs), besides
    /// `PIPELINE_…` ones. Absent in a row stored before they were declared: then only
    /// `PIPELINE_…` targets pass.
    #[serde(default)]
    pub inputs: BTreeSet<String>,
    pub start: String,
    /// `false`: a failed step ends only its own way; the rest of the pipeline runs on, and
    /// the execution fails once nothing is left to run. `true` (the default): the first
    /// failure fails the execution and nothing new starts.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub fail_fast: bool,
    /// At most this many tasks and gates run at once (none: no bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// Why a file cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// The deepest subgraph nesting.
const MAX_DEPTH: usize = 8;

/// A `map` target that needs no declaration: `PIPELINE_…`, a name no loader, shell,
/// interpreter or tool we know of reads.
pub const INPUT_PREFIX: &str = "PIPELINE_";
/// Where the starter's variables go (`--var NAME=…` → `PIPELINE_VAR_NAME`): a step's
/// result must not pass for one of them.
const VARS_PREFIX: &str = "PIPELINE_VAR_";

impl Definition {
    /// Reads, parses and checks `file` (and the subgraphs it names, relative to it); the
    /// first error when it cannot be run ([`Definition::load_all`] has every one).
    pub fn load(file: &Path) -> Result<Definition, FileError> {
        Definition::load_all(file).map_err(first)
    }

    /// Reads, parses and checks `file`, with every error it has (each node, edge, variable
    /// and subgraph checked on its own), in the order of the file.
    pub fn load_all(file: &Path) -> Result<Definition, Vec<FileError>> {
        let text = source::read_named(file).map_err(|m| vec![err(file, m)])?;
        parse(file, &text, 0, &mut Vec::new()).map(Definition::cleaned)
    }

    /// Parses and checks `text` as the contents of `file` (subgraphs relative to it).
    pub fn parse(file: &Path, text: &str) -> Result<Definition, FileError> {
        Definition::parse_all(file, text).map_err(first)
    }

    /// [`Definition::parse`] with every error.
    pub fn parse_all(file: &Path, text: &str) -> Result<Definition, Vec<FileError>> {
        parse(file, text, 0, &mut Vec::new()).map(Definition::cleaned)
    }

    /// Human steps' titles and questions as their approvals keep them (control and
    /// invisible characters out), so that the store can hold an approval to its step's
    /// question.
    fn cleaned(mut self) -> Definition {
        for n in &mut self.nodes {
            if let Kind::Human {
                title, question, ..
            } = &mut n.kind
            {
                *title = crate::sanitize::sanitize_text(title);
                *question = crate::sanitize::sanitize_text(question);
            }
        }
        self
    }

    /// What human step `node`'s approval needs (`reviewers`, `group`, `wait`); nothing for
    /// any other node.
    pub fn review_of(&self, node: &str) -> crate::reviews::Requirement {
        let Some(Kind::Human {
            reviewers,
            group,
            wait,
            ..
        }) = self.node(node).map(|n| &n.kind)
        else {
            return crate::reviews::Requirement::default();
        };
        crate::reviews::Requirement {
            required: reviewers.unwrap_or(1),
            group: group.clone(),
            wait_seconds: wait
                .as_deref()
                .and_then(|w| crate::time::parse_duration(w).ok())
                .map_or(0, |d| d.as_secs()),
        }
        .bounded()
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Whether a step of `node` may get `key` in its environment from the steps' state:
    /// the approver's comment, or a variable an edge into it maps that `map` may set at
    /// all ([`Definition::may_map`]). What a stored row says beyond that is not used: on
    /// the PostgreSQL store a supervised tool holding the runner's login could write it.
    pub fn allows_env(&self, node: &str, key: &str) -> bool {
        key == super::engine::ENV_COMMENT
            || (self.may_map(key)
                && self
                    .edges
                    .iter()
                    .any(|e| e.to == node && e.map.contains_key(key)))
    }

    /// Whether `map` may set `var`: declared in `inputs:` or `PIPELINE_…`, and never a
    /// name that changes what runs, nor a `PIPELINE_VAR_…`.
    pub fn may_map(&self, var: &str) -> bool {
        input_refusal(var).is_none() && (self.inputs.contains(var) || var.starts_with(INPUT_PREFIX))
    }

    /// Every rule `pipeline check` applies to a loaded file, on a definition that did not
    /// come from one (a store's row): ids, the start, the `map` allow-list, fields,
    /// branches, commands, cycles, reachability, and no subgraph left uninlined. For a
    /// label worker or a resume to refuse a row written by hand (on PostgreSQL, by a tool
    /// holding the runner's login) that `pipeline check` would not have let start.
    pub fn recheck(&self) -> Result<(), FileError> {
        let file = PathBuf::from(format!(
            "stored definition `{}`",
            crate::sanitize::sanitize_line(&self.name)
        ));
        let at = |_: &str, message: String| err(&file, message);
        check(self, &at).map_err(first)
    }

    /// A definition as a store's row holds it (`executions.definition`), read strictly (a
    /// field this version does not know is refused) and [rechecked](Definition::recheck).
    pub fn from_stored(value: &serde_json::Value) -> Result<Definition, FileError> {
        let def = Definition::deserialize(value).map_err(|e| {
            err(
                Path::new("stored definition"),
                format!(
                    "cannot be read: {}",
                    crate::sanitize::sanitize_line(&e.to_string())
                ),
            )
        })?;
        def.recheck()?;
        Ok(def)
    }

    /// What pins the definition: SHA-256 (hex) over its canonical JSON — keys sorted at
    /// every level, so that a store that reorders an object's keys (PostgreSQL's `jsonb`)
    /// reads back the same digest. Any change to a command, an edge, a variable or a
    /// question changes it.
    pub fn digest(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let mut canonical = String::new();
        canonical_json(&value, &mut canonical);
        crate::fingerprint::digest("pipeline-definition/v1", &[&canonical])
    }

    /// The edges out of `id`.
    pub fn out_edges<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Edge> + 'a {
        self.edges.iter().filter(move |e| e.from == id)
    }

    /// The nodes `id` leads to: its edges' targets, a branch's targets (with its way out
    /// when its loop is spent) and a parallel's branches.
    pub fn successors(&self, id: &str) -> Vec<String> {
        let mut out: Vec<String> = self.out_edges(id).map(|e| e.to.clone()).collect();
        match self.node(id).map(|n| &n.kind) {
            Some(Kind::Branch {
                on_true,
                on_false,
                on_max_iterations_reached,
                ..
            }) => {
                out.push(on_true.clone());
                out.push(on_false.clone());
                out.extend(on_max_iterations_reached.iter().cloned());
            }
            Some(Kind::Parallel { branches }) => {
                out.extend(
                    branches
                        .iter()
                        .filter(|b| !out.contains(b))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
            }
            _ => {}
        }
        out
    }

    /// The nodes with an edge (or a branch target) into `id`.
    pub fn predecessors(&self, id: &str) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| self.successors(&n.id).iter().any(|s| s == id))
            .map(|n| n.id.clone())
            .collect()
    }
}

/// The first of a file's errors, in the order of the file.
fn first(mut errors: Vec<FileError>) -> FileError {
    errors.sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
    errors.swap_remove(0)
}

fn err(file: &Path, message: impl Into<String>) -> FileError {
    FileError {
        file: file.to_path_buf(),
        line: None,
        column: None,
        message: message.into(),
    }
}

/// `value` as JSON with every object's keys in order (serde_json's own order depends on
/// its features and on how the value was read).
fn canonical_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Where `needle` (a node id, a field, a value, as written) first appears in `text` as a
/// whole word (node `m` is not found in `name:`): line and column.
fn locate(text: &str, needle: &str) -> (Option<usize>, Option<usize>) {
    if needle.is_empty() {
        return (None, None);
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "_.-".contains(c));
    for (i, line) in text.lines().enumerate() {
        for (col, _) in line.match_indices(needle) {
            let before = line[..col].chars().next_back();
            let after = line[col + needle.len()..].chars().next();
            if !word(before) && !word(after) {
                return (Some(i + 1), Some(col + 1));
            }
        }
    }
    (None, None)
}

fn parse(
    file: &Path,
    text: &str,
    depth: usize,
    seen: &mut Vec<PathBuf>,
) -> Result<Definition, Vec<FileError>> {
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let loc = e.location();
        vec![FileError {
            file: file.to_path_buf(),
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            // A subgraph may be any file the runner can read: its error quotes nothing.
            message: source::yaml_reason(&e, depth == 0),
        }]
    })?;
    // A check that names a node (or field) points at where it is written.
    let at = |what: &str, message: String| {
        let (line, column) = locate(text, what);
        FileError {
            file: file.to_path_buf(),
            line,
            column,
            message,
        }
    };
    let def = flatten(file, raw, depth, seen, &at)?;
    check(&def, &at).map_err(|mut errors| {
        // In the order of the file (those that name no place last).
        errors.sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
        errors
    })?;
    Ok(def)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A field name: `[A-Za-z0-9_.]`, not empty, no empty part.
pub fn valid_field(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= 256
        && f.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && f.split('.').all(|p| !p.is_empty())
}

/// An environment variable name.
fn valid_var(v: &str) -> bool {
    !v.is_empty()
        && !v.as_bytes()[0].is_ascii_digit()
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Variables a value a tool sent (through `map`) must never set, declared or not: what
/// loads code or changes what runs — the loader, the shell, interpreters and build tools,
/// PATH — or what configures a tool a later step runs (git, ssh, proxies and certificate
/// stores, package managers, the coding agents' endpoints and keys) or headless-run itself.
/// Matched without regard to case (`http_proxy` is read as well as `HTTP_PROXY`).
pub fn changes_what_runs(v: &str) -> bool {
    const NAMES: &[&str] = &[
        // Shells and the environment of every program.
        "PATH",
        "ENV",
        "IFS",
        "PS1",
        "PS2",
        "PS3",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "CDPATH",
        "FPATH",
        "ZDOTDIR",
        "HOME",
        "SHELL",
        "TMPDIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "LOCPATH",
        "NLSPATH",
        "TERMINFO",
        // Build tools and compilers.
        "CC",
        "CXX",
        "CPP",
        "LD",
        "AR",
        "MAKEFLAGS",
        "MAKEFILES",
        "MFLAGS",
        "CLASSPATH",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "PHPRC",
        "PHP_INI_SCAN_DIR",
        "GOFLAGS",
        "GOPROXY",
        "GOPATH",
        "GOROOT",
        "GOENV",
        "GOTOOLCHAIN",
        "GOPRIVATE",
        "GONOSUMDB",
        "GONOPROXY",
        "GOINSECURE",
        "KUBECONFIG",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "GNUPGHOME",
        // Programs a tool starts.
        "EDITOR",
        "VISUAL",
        "PAGER",
        "BROWSER",
        // headless-run's own switches.
        "AUTO_APPROVAL",
        "CI",
    ];
    const PREFIXES: &[&str] = &[
        "LD_",
        "DYLD_",
        "GCONV_",
        "BASH_",
        "PYTHON",
        "PERL",
        "RUBY",
        "NODE_",
        "JAVA_",
        "LUA_",
        "DENO_",
        "BUN_",
        "ELECTRON_",
        "DOTNET_",
        "COMPLUS_",
        "CORECLR_",
        "RUST",
        "CARGO_",
        "NPM_",
        "YARN_",
        "PIP_",
        "GEM_",
        "BUNDLE_",
        "GIT_",
        "SSH_",
        "SSL_",
        "XDG_",
        "DOCKER_",
        "AWS_",
        "ANTHROPIC_",
        "CLAUDE_",
        "OPENAI_",
        "CODEX_",
        "GEMINI_",
        "GOOGLE_",
        "COPILOT_",
        "OPENCODE_",
        "AIDER_",
        "QWEN_",
        "HEADLESS",
    ];
    const SUFFIXES: &[&str] = &["_PROXY"];
    let up = v.to_ascii_uppercase();
    NAMES.contains(&up.as_str())
        || PREFIXES.iter().any(|p| up.starts_with(p))
        || SUFFIXES.iter().any(|x| up.ends_with(x))
}

/// Why `var` can never be a `map` target (declared or not), if it cannot.
fn input_refusal(var: &str) -> Option<String> {
    if !valid_var(var) {
        return Some(format!(
            "`{}` is not an environment variable name",
            var.escape_debug()
        ));
    }
    if changes_what_runs(var) {
        return Some(format!(
            "`{var}` would let a step's result change what runs (the loader, the shell, PATH, interpreters, a tool's configuration, headless-run): map into a name of your own"
        ));
    }
    if var.starts_with(VARS_PREFIX) {
        return Some(format!(
            "`{var}` is where the starter's variables go (--var): map into a name of your own"
        ));
    }
    None
}

/// The most nodes a pipeline has, subgraphs inlined.
const MAX_NODES: usize = 1000;
/// The highest `max_iterations`.
const MAX_ITERATIONS: u32 = 10_000;
/// The highest `max_parallel`.
const MAX_PARALLEL: u32 = 1000;
/// The longest `label` or `description`.
const MAX_TEXT: usize = 1000;

type At<'a> = dyn Fn(&str, String) -> FileError + 'a;

/// Checks ids, then inlines subgraphs.
fn flatten(
    file: &Path,
    raw: RawFile,
    depth: usize,
    seen: &mut Vec<PathBuf>,
    at: &At<'_>,
) -> Result<Definition, Vec<FileError>> {
    if raw.nodes.is_empty() {
        return Err(vec![err(file, "no nodes")]);
    }
    let mut ids = BTreeSet::new();
    let mut errors = Vec::new();
    for n in &raw.nodes {
        if !valid_id(&n.id) {
            errors.push(at(
                &n.id,
                format!(
                    "node id `{}`: use letters, digits, `_` and `-` (at most 64)",
                    n.id.escape_debug()
                ),
            ));
        } else if !ids.insert(n.id.clone()) {
            errors.push(at(&n.id, format!("node id `{}` is used twice", n.id)));
        }
    }
    let start = match raw.start {
        Some(s) if ids.contains(&s) => s,
        Some(s) => {
            errors.push(at(&s, format!("start: no node `{s}`")));
            s
        }
        None => raw.nodes[0].id.clone(),
    };
    // The whole pipeline's settings belong to the file `pipeline run` names.
    if depth > 0 && (!raw.fail_fast || raw.max_parallel.is_some()) {
        errors.push(at(
            if raw.max_parallel.is_some() {
                "max_parallel"
            } else {
                "fail_fast"
            },
            "fail_fast and max_parallel are the whole pipeline's: set them in the file `pipeline run` names, not in a subgraph".into(),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut nodes = Vec::new();
    let mut edges = raw.edges;
    let mut start = start;
    let mut vars = raw.vars;
    let mut inputs = raw.inputs;
    // Each subgraph's id → its first node (as inlined).
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    for n in raw.nodes {
        let Kind::Subgraph { file: sub } = &n.kind else {
            nodes.push(n);
            continue;
        };
        if depth + 1 > MAX_DEPTH {
            return Err(vec![at(
                &n.id,
                format!("subgraphs nest deeper than {MAX_DEPTH}"),
            )]);
        }
        let included = source::read_beneath(file, sub).map_err(|m| {
            vec![at(
                sub,
                format!("subgraph `{}`: {}: {m}", n.id, sub.escape_debug()),
            )]
        })?;
        if seen.contains(&included.canonical) {
            return Err(vec![at(
                sub,
                format!(
                    "subgraph `{}` includes {} again (a cycle)",
                    n.id,
                    included.path.display()
                ),
            )]);
        }
        seen.push(included.canonical.clone());
        let inner = parse(&included.path, &included.text, depth + 1, seen)?;
        seen.pop();
        let prefix = |id: &str| format!("{}.{id}", n.id);
        // A field inside the subgraph names its own steps.
        let inner_ids: BTreeSet<String> = inner.nodes.iter().map(|m| m.id.clone()).collect();
        let own_field = |f: &str| prefix_field(f, &inner_ids, &n.id);
        entries.insert(n.id.clone(), prefix(&inner.start));
        for (k, v) in &inner.vars {
            vars.entry(k.clone()).or_insert_with(|| v.clone());
        }
        // Checked with the subgraph as a file of its own: its maps need them.
        inputs.extend(inner.inputs.iter().cloned());
        // The subgraph's last nodes (nothing after them) lead where the subgraph node did.
        let ends: Vec<String> = inner
            .nodes
            .iter()
            .filter(|m| inner.successors(&m.id).is_empty())
            .map(|m| m.id.clone())
            .collect();
        let outgoing: Vec<Edge> = edges.iter().filter(|e| e.from == n.id).cloned().collect();
        edges.retain(|e| e.from != n.id);
        for e in &mut edges {
            if e.to == n.id {
                e.to = prefix(&inner.start);
            }
        }
        if start == n.id {
            start = prefix(&inner.start);
        }
        for mut m in inner.nodes {
            m.id = prefix(&m.id);
            for t in m.kind.targets_mut() {
                *t = prefix(t);
            }
            if let Kind::Branch { condition, .. } = &mut m.kind {
                condition.field = own_field(&condition.field);
            }
            nodes.push(m);
        }
        for mut e in inner.edges {
            e.id = e.id.map(|i| prefix(&i));
            e.from = prefix(&e.from);
            e.to = prefix(&e.to);
            if let Some(c) = &mut e.condition {
                c.field = own_field(&c.field);
            }
            for f in e.map.values_mut() {
                *f = own_field(f);
            }
            edges.push(e);
        }
        for end in &ends {
            for o in &outgoing {
                edges.push(Edge {
                    from: prefix(end),
                    // One edge of the file becomes one per end: each keeps a name its own.
                    id: o.id.as_ref().map(|i| match ends.len() {
                        1 => i.clone(),
                        _ => format!("{i}.{}", prefix(end)),
                    }),
                    ..o.clone()
                });
            }
        }
    }
    // A branch or parallel that names a subgraph goes to its first node.
    for m in &mut nodes {
        for t in m.kind.targets_mut() {
            if let Some(entry) = entries.get(t.as_str()) {
                *t = entry.clone();
            }
        }
    }
    if nodes.len() > MAX_NODES {
        return Err(vec![err(
            file,
            format!("more than {MAX_NODES} nodes with its subgraphs inlined"),
        )]);
    }
    Ok(Definition {
        name: raw.name.unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "pipeline".into())
        }),
        vars,
        inputs,
        start,
        fail_fast: raw.fail_fast,
        max_parallel: raw.max_parallel,
        nodes,
        edges,
    })
}

/// `field` as the subgraph `sub` is inlined: a step of the subgraph (`inner`) is named with
/// the subgraph's prefix; anything else is left as it is.
fn prefix_field(field: &str, inner: &BTreeSet<String>, sub: &str) -> String {
    let Some(rest) = field.strip_prefix("steps.") else {
        return field.to_owned();
    };
    let parts: Vec<&str> = rest.split('.').collect();
    let names_inner = (1..=parts.len()).any(|k| inner.contains(&parts[..k].join(".")));
    if names_inner {
        format!("steps.{sub}.{rest}")
    } else {
        field.to_owned()
    }
}

/// The fields a condition may name, checked for shape and for naming a node that exists.
fn check_field(def: &Definition, field: &str, at: &At<'_>) -> Result<(), FileError> {
    if !valid_field(field) {
        return Err(at(
            field,
            format!(
                "field `{}`: only letters, digits, `_` and `.` (like steps.build.exit_code)",
                field.escape_debug()
            ),
        ));
    }
    let parts: Vec<&str> = field.split('.').collect();
    match parts.as_slice() {
        ["vars", _] => Ok(()),
        ["steps", rest @ ..] => {
            // The node id may itself hold dots (an inlined subgraph's): the longest known
            // prefix names it.
            let found = (1..=rest.len()).rev().find_map(|k| {
                let id = rest[..k].join(".");
                def.node(&id).map(|_| (id, &rest[k..]))
            });
            match found {
                None => Err(at(field, format!("field `{field}`: no such step"))),
                Some((_, ["exit_code"] | ["status"] | ["iteration"] | ["comment"])) => Ok(()),
                Some((_, ["result", ..])) => Ok(()),
                Some((id, _)) => Err(at(
                    field,
                    format!(
                        "field `{field}`: a step's fields are exit_code, status, iteration, comment and result.… (step `{id}`)"
                    ),
                )),
            }
        }
        _ => Err(at(
            field,
            format!("field `{field}`: starts with steps. or vars."),
        )),
    }
}

/// Every rule: ids and the start, declared inputs, known targets, field names, `map`
/// targets on the allow-list, a cycle only through a branch, every node reachable from the
/// start. A loaded file has been through [`flatten`]'s checks too; the first ones here
/// repeat them for a definition that was not (a store's row). Every error is reported, not
/// only the first: each node, edge, variable and input is checked on its own (the first
/// error of each), and the graph as a whole once all of them pass.
fn check(def: &Definition, at: &At<'_>) -> Result<(), Vec<FileError>> {
    if def.nodes.is_empty() {
        return Err(vec![at("", "no nodes".into())]);
    }
    if def.nodes.len() > MAX_NODES {
        return Err(vec![at(
            "",
            format!("more than {MAX_NODES} nodes with its subgraphs inlined"),
        )]);
    }
    let mut errors = Vec::new();
    let mut ids = BTreeSet::new();
    for n in &def.nodes {
        // An inlined subgraph's node is `SUBGRAPH.NODE`: each part an id, one a file deep.
        if !valid_dotted_id(&n.id) {
            errors.push(at(
                &n.id,
                format!(
                    "node id `{}`: use letters, digits, `_` and `-` (at most 64)",
                    n.id.escape_debug()
                ),
            ));
        } else if !ids.insert(n.id.as_str()) {
            errors.push(at(&n.id, format!("node id `{}` is used twice", n.id)));
        }
    }
    if def.node(&def.start).is_none() {
        errors.push(at(
            &def.start,
            format!("start: no node `{}`", def.start.escape_debug()),
        ));
    }
    if def.max_parallel.is_some_and(|m| m == 0 || m > MAX_PARALLEL) {
        errors.push(at(
            "max_parallel",
            format!("max_parallel is from 1 to {MAX_PARALLEL}"),
        ));
    }
    for k in def.vars.keys() {
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            errors.push(at(
                k,
                format!(
                    "vars: `{}`: a name is letters, digits and _",
                    k.escape_debug()
                ),
            ));
        }
    }
    for var in &def.inputs {
        if let Some(why) = input_refusal(var) {
            errors.push(at(var, format!("inputs: {why}")));
        }
    }
    let mut edge_ids = BTreeSet::new();
    for e in &def.edges {
        if let Some(id) = &e.id
            && !(id.len() <= 1024 && id.split('.').all(valid_id) && edge_ids.insert(id.as_str()))
        {
            errors.push(at(
                id,
                format!(
                    "edge id `{}`: letters, digits, `_` and `-` (at most 64), each used once",
                    id.escape_debug()
                ),
            ));
        }
        errors.extend(check_edge(def, e, at).err());
    }
    for n in &def.nodes {
        errors.extend(check_node(def, n, at).err());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    check_graph(def, at).map_err(|e| vec![e])
}

/// A node id, or an inlined one (`SUBGRAPH.NODE`, each part an id, one a file deep).
fn valid_dotted_id(id: &str) -> bool {
    id.split('.').all(valid_id) && id.split('.').count() <= MAX_DEPTH + 1
}

/// An edge: its ends are nodes, its condition and its map are sound.
fn check_edge(def: &Definition, e: &Edge, at: &At<'_>) -> Result<(), FileError> {
    for end in [&e.from, &e.to] {
        if def.node(end).is_none() {
            return Err(at(
                end,
                format!("edge {} → {}: no node `{end}`", e.from, e.to),
            ));
        }
    }
    if let Some(c) = &e.condition {
        check_condition(def, c, at)?;
    }
    for (var, field) in &e.map {
        if let Some(why) = input_refusal(var) {
            return Err(at(var, format!("edge {} → {}: map: {why}", e.from, e.to)));
        }
        if !def.may_map(var) {
            return Err(at(
                var,
                format!(
                    "edge {} → {}: map: `{var}` is not declared: list it under `inputs:` at the top of the file, or name it {INPUT_PREFIX}…",
                    e.from, e.to
                ),
            ));
        }
        check_field(def, field, at)?;
    }
    Ok(())
}

/// A condition: its field names something, and its value suits its operator.
fn check_condition(def: &Definition, c: &Condition, at: &At<'_>) -> Result<(), FileError> {
    check_field(def, &c.field, at)?;
    match c.operator.value_refusal(&c.value) {
        Some(why) => Err(at(
            &c.field,
            format!(
                "condition on `{}`: {} {why}",
                c.field,
                serde_json::to_value(c.operator)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        )),
        None => Ok(()),
    }
}

/// One node's own settings.
fn check_node(def: &Definition, n: &Node, at: &At<'_>) -> Result<(), FileError> {
    let known = |id: &str| def.node(id).is_some();
    for text in [&n.label, &n.description].into_iter().flatten() {
        if text.chars().count() > MAX_TEXT {
            return Err(at(
                &n.id,
                format!(
                    "`{}`: a label or description is at most {MAX_TEXT} characters",
                    n.id
                ),
            ));
        }
    }
    // (Not a human step's: what follows a human step runs only once a person approved
    // it, whatever the flow says.)
    if n.continue_on_failure && !matches!(n.kind, Kind::Task { .. } | Kind::Gate { .. }) {
        return Err(at(
            &n.id,
            format!(
                "{} `{}`: continue_on_failure is for tasks and gates",
                n.kind.name(),
                n.id
            ),
        ));
    }
    match &n.kind {
        Kind::Branch {
            condition,
            on_true,
            on_false,
            max_iterations,
            on_max_iterations_reached,
        } => {
            for t in [on_true, on_false]
                .into_iter()
                .chain(on_max_iterations_reached)
            {
                if !known(t) {
                    return Err(at(t, format!("branch `{}`: no node `{t}`", n.id)));
                }
            }
            if on_max_iterations_reached.as_ref() == Some(&n.id) {
                return Err(at(
                    &n.id,
                    format!(
                        "branch `{}`: on_max_iterations_reached goes out of the loop, not back to the branch",
                        n.id
                    ),
                ));
            }
            check_condition(def, condition, at)?;
            if max_iterations.is_some_and(|m| m == 0 || m > MAX_ITERATIONS) {
                return Err(at(
                    &n.id,
                    format!(
                        "branch `{}`: max_iterations is from 1 to {MAX_ITERATIONS}",
                        n.id
                    ),
                ));
            }
        }
        Kind::Parallel { branches } => {
            for b in branches {
                if !known(b) {
                    return Err(at(b, format!("parallel `{}`: no node `{b}`", n.id)));
                }
            }
            if def.successors(&n.id).is_empty() {
                return Err(at(
                    &n.id,
                    format!("parallel `{}`: no branches and no edges out", n.id),
                ));
            }
        }
        Kind::Merge { .. } => {}
        Kind::Task { run } | Kind::Gate { run, .. } => {
            if run.command.argv().first().is_none_or(|p| p.is_empty()) {
                return Err(at(
                    &n.id,
                    format!("{} `{}`: an empty command", n.kind.name(), n.id),
                ));
            }
            for d in [&run.timeout, &run.stall_timeout].into_iter().flatten() {
                crate::time::parse_duration(d)
                    .map_err(|e| at(d, format!("{} `{}`: {e}", n.kind.name(), n.id)))?;
            }
            if let Some(p) = &run.on_prompt
                && !["exit", "wait"].contains(&p.as_str())
            {
                return Err(at(p, format!("`{}`: on_prompt is exit or wait", n.id)));
            }
            if let Some(h) = &run.host
                && !valid_label(h)
            {
                return Err(at(
                    h,
                    format!(
                        "`{}`: host label `{}` is not letters, digits, `.`, `_` and `-` (at most 64)",
                        n.id,
                        h.escape_debug()
                    ),
                ));
            }
            for var in run.env.keys() {
                if !valid_var(var) {
                    return Err(at(
                        var,
                        format!(
                            "`{}`: env `{}` is not a variable name",
                            n.id,
                            var.escape_debug()
                        ),
                    ));
                }
            }
        }
        Kind::Human {
            options,
            default,
            expires,
            deciders,
            reviewers,
            group,
            wait,
            ..
        } => {
            if deciders.iter().any(|d| d.trim().is_empty()) {
                return Err(at(&n.id, format!("human `{}`: an empty decider", n.id)));
            }
            if let Some(r) = reviewers
                && !(1..=crate::reviews::MAX_REQUIRED).contains(r)
            {
                return Err(at(
                    &n.id,
                    format!(
                        "human `{}`: reviewers: {r} people: between 1 and {}",
                        n.id,
                        crate::reviews::MAX_REQUIRED
                    ),
                ));
            }
            if let Some(g) = group
                && !crate::reviews::valid_group(g)
            {
                return Err(at(
                    g,
                    format!(
                        "human `{}`: group: a group name is letters, digits, `.`, `_`, `-` and `@`, at most 64",
                        n.id
                    ),
                ));
            }
            if let Some(w) = wait {
                let d = crate::time::parse_duration(w)
                    .map_err(|e| at(w, format!("human `{}`: wait: {e}", n.id)))?;
                if d.as_secs() > crate::reviews::MAX_WAIT_SECS {
                    return Err(at(w, format!("human `{}`: wait: at most 30 days", n.id)));
                }
            }
            if options.is_empty() {
                return Err(at(&n.id, format!("human `{}`: no options", n.id)));
            }
            if let Some(d) = default
                && !options.contains(d)
            {
                return Err(at(
                    d,
                    format!("human `{}`: the default `{d}` is not an option", n.id),
                ));
            }
            if let Some(x) = expires {
                crate::time::parse_duration(x)
                    .map_err(|e| at(x, format!("human `{}`: expires: {e}", n.id)))?;
            }
        }
        Kind::Subgraph { file } => {
            // Loading inlines every subgraph: one left is a definition not made by loading.
            return Err(at(
                file,
                format!("subgraph `{}` is not inlined", n.id.escape_debug()),
            ));
        }
    }
    Ok(())
}

/// The graph as a whole: every node reachable from the start, and every cycle through a
/// branch (which bounds it: `max_iterations`, by default [`DEFAULT_MAX_ITERATIONS`]).
fn check_graph(def: &Definition, at: &At<'_>) -> Result<(), FileError> {
    let mut reached = BTreeSet::from([def.start.clone()]);
    let mut todo = vec![def.start.clone()];
    while let Some(id) = todo.pop() {
        for s in def.successors(&id) {
            if reached.insert(s.clone()) {
                todo.push(s);
            }
        }
    }
    if let Some(n) = def.nodes.iter().find(|n| !reached.contains(&n.id)) {
        return Err(at(
            &n.id,
            format!("node `{}` cannot be reached from `{}`", n.id, def.start),
        ));
    }
    // A cycle must pass through a branch: remove the branches' edges and what is left must
    // be acyclic.
    let bounded: BTreeSet<&str> = def
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, Kind::Branch { .. }))
        .map(|n| n.id.as_str())
        .collect();
    if let Some(cycle) = unbounded_cycle(def, &bounded) {
        let first = cycle[0].clone();
        return Err(at(
            &first,
            format!(
                "a cycle without a branch (a loop goes back through a branch, which bounds it): {}",
                cycle.join(" → ")
            ),
        ));
    }
    Ok(())
}

/// A cycle that does not pass through a bounded branch, if any (its nodes in order).
fn unbounded_cycle(def: &Definition, bounded: &BTreeSet<&str>) -> Option<Vec<String>> {
    // Depth-first search over the graph without the bounded branches' out-edges.
    let succ: HashMap<&str, Vec<String>> = def
        .nodes
        .iter()
        .map(|n| {
            // A bounded branch's loop ends at its bound; its way out once the bound is
            // reached is taken every time after, so a cycle through it is not bounded.
            let next = match &n.kind {
                Kind::Branch {
                    on_max_iterations_reached,
                    ..
                } if bounded.contains(n.id.as_str()) => {
                    on_max_iterations_reached.iter().cloned().collect()
                }
                _ => def.successors(&n.id),
            };
            (n.id.as_str(), next)
        })
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: HashMap<&str, Mark> = def
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), Mark::New))
        .collect();
    fn visit<'a>(
        id: &'a str,
        succ: &'a HashMap<&str, Vec<String>>,
        mark: &mut HashMap<&'a str, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(id, Mark::Open);
        path.push(id.to_owned());
        for s in succ.get(id).into_iter().flatten() {
            match mark.get(s.as_str()).copied() {
                Some(Mark::Open) => {
                    let from = path.iter().position(|p| p == s).unwrap_or(0);
                    let mut cycle = path[from..].to_vec();
                    cycle.push(s.clone());
                    return Some(cycle);
                }
                Some(Mark::New) => {
                    let key = succ.get_key_value(s.as_str()).map(|(k, _)| *k)?;
                    if let Some(c) = visit(key, succ, mark, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark.insert(id, Mark::Done);
        None
    }
    for n in &def.nodes {
        if mark.get(n.id.as_str()) == Some(&Mark::New)
            && let Some(c) = visit(n.id.as_str(), &succ, &mut mark, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

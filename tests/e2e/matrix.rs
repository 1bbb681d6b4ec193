//! The prompt-library conformance matrix (issue 26): every library × widget cell of
//! `tests/fixtures/matrix` (its README is the fixture contract) through the real shim, in
//! exit mode + resume, wait mode (`approve` → the default; where the approval shows none,
//! `approve` refused and the default named) and rejected in wait mode; a
//! password in exit mode (93, failed, no approval). One test per library, so libraries run
//! in parallel and a failure names its library. Every cell is run even after one failed;
//! a test fails only when a cell that [`EXPECTED`] calls right went wrong. Each test writes
//! its cells to `target/…/matrix/LIB.txt` (and the failures' details beside it) for
//! `scripts/matrix`, which renders the README's table; `readme_matrix_agrees_with_expected`
//! keeps the README from claiming a cell the suite does not hold.

use headless_run_e2e::*;
use serde_json::{Map, Value};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Widget {
    Confirm,
    Toggle,
    Text,
    Initial,
    Password,
    Select,
    Multiselect,
}
use Widget::*;

/// The README's column order.
const WIDGETS: [Widget; 7] = [
    Confirm,
    Toggle,
    Text,
    Initial,
    Password,
    Select,
    Multiselect,
];

impl Widget {
    /// The fixture's argument and the column's name.
    fn name(self) -> &'static str {
        match self {
            Confirm => "confirm",
            Toggle => "toggle",
            Text => "text",
            Initial => "initial",
            Password => "password",
            Select => "select",
            Multiselect => "multiselect",
        }
    }

    /// (the non-default decision, what the tool then prints; what the default prints),
    /// as the contract says. `None` for the password.
    fn answers(self) -> Option<(&'static str, &'static str, &'static str)> {
        match self {
            Confirm | Toggle => Some(("yes", "GOT yes", "GOT no")),
            Text | Initial => Some(("myproj", "GOT [myproj]", "GOT [demo]")),
            Select => Some(("blue", "GOT blue", "GOT green")),
            Multiselect => Some(("cheese,olives", "GOT [cheese,olives]", "GOT [ham]")),
            Password => None,
        }
    }

    /// The tool's default named as an answer (for an approval that shows no default, where
    /// `approve` must be refused and the operator names it).
    fn default_answer(self) -> &'static str {
        match self {
            Confirm | Toggle => "no",
            Text | Initial => "demo",
            Select => "green",
            Multiselect => "ham",
            Password => "",
        }
    }
}

/// How a library's fixture is started.
#[derive(Clone, Copy)]
enum Runner {
    /// `node tests/fixtures/matrix/js/SCRIPT`, beside its npm packages.
    Node(&'static str),
    /// The matrix venv's python with `tests/fixtures/matrix/py/FILE`.
    Python(&'static str),
    /// A binary of the standalone cargo project `tests/fixtures/matrix/rust`.
    Rust(&'static str),
    /// `tests/fixtures/matrix/go/NAME`, built with Debian's Go and sources.
    Go(&'static str),
    /// `ruby tests/fixtures/matrix/ruby/FILE` (Debian's tty-prompt).
    Ruby(&'static str),
    /// `bash tests/fixtures/matrix/sh/FILE`, with the Debian packages it drives.
    Bash(&'static str, &'static [(&'static str, &'static str)]),
}

struct Library {
    /// The results file's name and the key in [`EXPECTED`].
    key: &'static str,
    /// The README's row name (with the pinned version, `tests/e2e/lib.rs`).
    title: &'static str,
    runner: Runner,
    /// The widgets its fixture asks; every other one answers 64 UNSUPPORTED.
    widgets: &'static [Widget],
}

const LIBRARIES: &[Library] = &[
    Library {
        key: "inquirer-prompts",
        title: "@inquirer/prompts 8.8",
        runner: Runner::Node("inquirer-prompts.mjs"),
        widgets: &[Confirm, Text, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "inquirer-legacy",
        title: "inquirer 9.3 (legacy)",
        runner: Runner::Node("inquirer-legacy.mjs"),
        widgets: &[Confirm, Text, Password, Select, Multiselect],
    },
    Library {
        key: "enquirer",
        title: "enquirer 2.4",
        runner: Runner::Node("enquirer.cjs"),
        widgets: &[Confirm, Toggle, Text, Password, Select, Multiselect],
    },
    Library {
        key: "prompts",
        title: "prompts 2.4",
        runner: Runner::Node("prompts.cjs"),
        widgets: &[Confirm, Toggle, Text, Password, Select, Multiselect],
    },
    Library {
        key: "clack",
        title: "@clack/prompts 1.9",
        runner: Runner::Node("clack.mjs"),
        widgets: &[Confirm, Text, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "ink",
        title: "Ink 6.8 + ink-select-input 6.2",
        runner: Runner::Node("ink-select.mjs"),
        widgets: &[Select],
    },
    Library {
        key: "questionary",
        title: "questionary 2.1",
        runner: Runner::Python("questionary.py"),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "inquirerpy",
        title: "InquirerPy 0.3",
        runner: Runner::Python("inquirerpy.py"),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "prompt_toolkit",
        title: "prompt_toolkit 3.0",
        runner: Runner::Python("prompt_toolkit.py"),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "click",
        title: "click 8.3",
        runner: Runner::Python("click.py"),
        widgets: &[Confirm, Text, Password, Select],
    },
    Library {
        key: "rich",
        title: "rich 14.3",
        runner: Runner::Python("rich.py"),
        widgets: &[Confirm, Text, Password, Select],
    },
    Library {
        key: "typer",
        title: "typer 0.29",
        runner: Runner::Python("typer.py"),
        widgets: &[Confirm, Text, Password, Select],
    },
    Library {
        key: "cleo",
        title: "cleo 2.1",
        runner: Runner::Python("cleo.py"),
        widgets: &[Confirm, Text, Password, Select, Multiselect],
    },
    Library {
        key: "beaupy",
        title: "beaupy 4.0",
        runner: Runner::Python("beaupy.py"),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "dialoguer",
        title: "dialoguer 0.12",
        runner: Runner::Rust("dialoguer-fixture"),
        widgets: &[Confirm, Text, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "inquire",
        title: "inquire 0.9",
        runner: Runner::Rust("inquire-fixture"),
        widgets: &[Confirm, Text, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "survey",
        title: "survey 2.3 (Go)",
        runner: Runner::Go("survey"),
        widgets: &[Confirm, Text, Password, Select, Multiselect],
    },
    Library {
        key: "promptui",
        title: "promptui 0.8 (Go)",
        runner: Runner::Go("promptui"),
        widgets: &[Confirm, Text, Initial, Password, Select],
    },
    Library {
        key: "tty-prompt",
        title: "tty-prompt 0.23 (Ruby)",
        runner: Runner::Ruby("tty.rb"),
        widgets: &[Confirm, Text, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "bash-read",
        title: "bash `read`, `select`",
        runner: Runner::Bash("read.sh", &[]),
        widgets: &[Confirm, Text, Initial, Password, Select],
    },
    Library {
        key: "whiptail",
        title: "whiptail 0.52",
        runner: Runner::Bash("whiptail.sh", &[("whiptail", "whiptail")]),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
    Library {
        key: "dialog",
        title: "dialog 1.3",
        runner: Runner::Bash("dialog.sh", &[("dialog", "dialog")]),
        widgets: &[Confirm, Initial, Password, Select, Multiselect],
    },
];

/// The cells known right today: every mode of each passes against the current shim. A cell
/// listed here that goes wrong fails its library's test; a cell not listed is run and
/// reported, never failing (add it here once it holds, and to the README's table).
const EXPECTED: &[(&str, &[Widget])] = &[
    (
        "inquirer-prompts",
        &[Confirm, Text, Initial, Password, Select, Multiselect],
    ),
    (
        "inquirer-legacy",
        &[Confirm, Text, Password, Select, Multiselect],
    ),
    (
        "enquirer",
        &[Confirm, Toggle, Text, Password, Select, Multiselect],
    ),
    (
        "prompts",
        &[Confirm, Toggle, Text, Password, Select, Multiselect],
    ),
    (
        "clack",
        &[Confirm, Text, Initial, Password, Select, Multiselect],
    ),
    ("ink", &[Select]),
    (
        "questionary",
        &[Confirm, Initial, Password, Select, Multiselect],
    ),
    (
        "inquirerpy",
        &[Confirm, Initial, Password, Select, Multiselect],
    ),
    ("prompt_toolkit", &[Confirm, Initial, Password, Select]),
    ("click", &[Confirm, Text, Password, Select]),
    ("rich", &[Confirm, Text, Password, Select]),
    ("typer", &[Confirm, Text, Password, Select]),
    ("cleo", &[Confirm, Text, Password, Select]),
    ("beaupy", &[Confirm, Initial, Password, Select, Multiselect]),
    (
        "dialoguer",
        &[Confirm, Text, Initial, Password, Select, Multiselect],
    ),
    (
        "inquire",
        &[Confirm, Text, Initial, Password, Select, Multiselect],
    ),
    ("survey", &[Confirm, Text, Password, Select, Multiselect]),
    ("promptui", &[Confirm, Text, Initial, Password, Select]),
    (
        "tty-prompt",
        &[Confirm, Text, Initial, Password, Select, Multiselect],
    ),
    ("bash-read", &[Confirm, Text, Initial, Password, Select]),
    ("whiptail", &[Initial, Password]),
    ("dialog", &[Confirm, Password]),
];

/// A hung cell is a wrong cell, not a stuck suite.
const RUN_LIMIT: Duration = Duration::from_secs(40);
/// How long a prompt may take to become an approval (or a decided one to be answered).
const ASK_LIMIT: Duration = Duration::from_secs(15);

fn library(key: &str) -> &'static Library {
    LIBRARIES
        .iter()
        .find(|l| l.key == key)
        .unwrap_or_else(|| panic!("no library {key} in LIBRARIES"))
}

fn expected_right(key: &str) -> &'static [Widget] {
    EXPECTED
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, w)| *w)
        .unwrap_or(&[])
}

/// The program and its arguments before WIDGET (installing or building what it needs).
fn program(runner: Runner) -> Vec<OsString> {
    match runner {
        Runner::Node(script) => vec![
            need("node", "nodejs").into(),
            matrix_node_fixture(script).into(),
        ],
        Runner::Python(file) => vec![
            matrix_python().into(),
            existing(fixture(&format!("matrix/py/{file}"))).into(),
        ],
        Runner::Rust(bin) => vec![matrix_rust_fixture(bin).into()],
        Runner::Go(name) => vec![matrix_go_fixture(name).into()],
        Runner::Ruby(file) => vec![
            matrix_ruby().into(),
            existing(fixture(&format!("matrix/ruby/{file}"))).into(),
        ],
        Runner::Bash(file, tools) => {
            for (command, package) in tools {
                need(command, package);
            }
            vec![
                need("bash", "bash").into(),
                existing(fixture(&format!("matrix/sh/{file}"))).into(),
            ]
        }
    }
}

fn existing(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "the matrix fixture {} is missing",
        path.display()
    );
    path
}

/// One mode of one cell: its name, whether it held, and what happened when it did not.
struct Mode {
    name: &'static str,
    right: bool,
    /// One line for the summary.
    brief: String,
    /// Everything a prompt-detection engineer needs: the approval, what was decided, what
    /// the tool printed.
    detail: String,
    took: Duration,
}

struct Cell {
    widget: Widget,
    modes: Vec<Mode>,
}

impl Cell {
    fn right(&self) -> bool {
        self.modes.iter().all(|m| m.right)
    }
}

/// What a mode found wrong: one line, and the details.
struct Wrong {
    brief: String,
    detail: String,
}

fn wrong(brief: impl Into<String>, detail: impl Into<String>) -> Wrong {
    Wrong {
        brief: brief.into(),
        detail: detail.into(),
    }
}

/// Runs every cell of `key`, writes the results file, and fails if a cell [`EXPECTED`]
/// calls right went wrong (or the table and the fixture disagree about a widget).
fn run_library(key: &str) {
    let lib = library(key);
    let argv = program(lib.runner);
    let mut table_errors = Vec::new();
    for widget in WIDGETS {
        if !lib.widgets.contains(&widget)
            && let Some(e) = unsupported_check(&argv, widget)
        {
            table_errors.push(e);
        }
    }
    let mut cells = Vec::new();
    for &widget in lib.widgets {
        let modes = match widget.answers() {
            None => vec![mode("secret", || secret_mode(&argv, widget))],
            Some((value, decided, default)) => vec![
                mode("exit+resume", || exit_mode(&argv, widget, value, decided)),
                mode("wait approve", || {
                    wait_mode(&argv, widget, "approve", Some(default))
                }),
                mode("wait reject", || wait_mode(&argv, widget, "reject", None)),
            ],
        };
        let cell = Cell { widget, modes };
        eprintln!("{}", summary_line(lib, &cell));
        if let Some(e) = unsupported_in_a_run(&cell) {
            table_errors.push(e);
        }
        cells.push(cell);
    }
    write_results(lib, &cells);

    let mut failures = table_errors;
    for cell in &cells {
        let listed = expected_right(key).contains(&cell.widget);
        if listed && !cell.right() {
            for m in cell.modes.iter().filter(|m| !m.right) {
                failures.push(format!(
                    "{} `{}` is listed right in EXPECTED but its {} mode went wrong: {}\n{}",
                    lib.title,
                    cell.widget.name(),
                    m.name,
                    m.brief,
                    m.detail
                ));
            }
        }
        if !listed && cell.right() {
            eprintln!(
                "matrix {key} {}: right now, not yet in EXPECTED (add it, and to the README's table)",
                cell.widget.name()
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs one mode, a panic (a harness assertion, a run past its limit) counting as wrong.
fn mode(name: &'static str, f: impl FnOnce() -> Result<(), Wrong>) -> Mode {
    let start = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let took = start.elapsed();
    let (right, brief, detail) = match result {
        Ok(Ok(())) => (true, String::new(), String::new()),
        Ok(Err(w)) => (false, w.brief, w.detail),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".to_owned());
            // Running::wait's panic starts with the whole command line: say what happened.
            let brief = if text.contains("did not finish within") {
                format!("a run did not finish within {RUN_LIMIT:?} and was killed")
            } else {
                format!(
                    "harness: {}",
                    clip(text.lines().next().unwrap_or_default(), 160)
                )
            };
            (false, brief, text)
        }
    };
    Mode {
        name,
        right,
        brief,
        detail,
        took,
    }
}

fn shim(env: &TestEnv, argv: &[OsString], widget: Widget) -> Cmd {
    let mut c = env.shim();
    c.args(argv).arg(widget.name()).timeout(RUN_LIMIT);
    c
}

/// Exit mode + resume: the run exits 90; the approval is decided with the non-default
/// answer; the same command run again prints it and exits 0.
fn exit_mode(argv: &[OsString], widget: Widget, value: &str, want: &str) -> Result<(), Wrong> {
    let env = TestEnv::new();
    let mut running = shim(&env, argv, widget).spawn();
    // A prompt that never becomes an approval is found out after ASK_LIMIT, not RUN_LIMIT.
    if let Awaited::Nothing = await_approval(&env, &mut running, None) {
        return Err(wrong(
            format!("no approval within {ASK_LIMIT:?}"),
            format!(
                "still running; stdout so far: {}\nstderr so far: {}",
                tail(&running.stdout_now()),
                running.stderr_now()
            ),
        ));
    }
    let first = running.wait();
    if first.code != Some(90) {
        return Err(wrong(
            format!("first run exited {:?}, not 90", first.code),
            format!(
                "{}\napprovals: {}",
                printed(&first),
                approvals_brief(&env.approvals())
            ),
        ));
    }
    let Some(a) = newest_pending(&env) else {
        return Err(wrong(
            "exited 90 with no pending approval",
            format!(
                "{}\napprovals: {}",
                printed(&first),
                approvals_brief(&env.approvals())
            ),
        ));
    };
    let decided = env.decide(s(&a, "approval_id"), value);
    if decided.code != Some(0) {
        return Err(wrong(
            format!(
                "`monitor decide {value}` refused: {}",
                clip(decided.stderr.trim(), 200)
            ),
            format!(
                "approval: {}\ndecide: {}",
                approval_brief(&a),
                decided.context()
            ),
        ));
    }
    let second = shim(&env, argv, widget).run();
    let got = got_lines(&second.stdout);
    if second.code == Some(0) && got == [want] {
        return Ok(());
    }
    let asked_again = (second.code == Some(90))
        .then(|| newest_pending(&env))
        .flatten()
        .map(|b| format!("\nasked again: {}", approval_brief(&b)))
        .unwrap_or_default();
    Err(wrong(
        format!(
            "re-run after `{value}` exited {:?} printing {got:?}, not `{want}`",
            second.code
        ),
        format!(
            "approval: {}\nre-run: {}{asked_again}\nruns: {}",
            approval_brief(&a),
            printed(&second),
            runs_brief(&env)
        ),
    ))
}

/// Wait mode: the approval is decided with `value` (`approve` or `reject`) while the tool
/// waits; approved, the one run prints the default (`want`) and exits 0; rejected, it
/// exits 91 and prints no `GOT`.
fn wait_mode(
    argv: &[OsString],
    widget: Widget,
    value: &str,
    want: Option<&str>,
) -> Result<(), Wrong> {
    let env = TestEnv::new();
    let mut running = shim(&env, argv, widget).spawn_wait_mode();
    let a = match await_approval(&env, &mut running, None) {
        Awaited::Asked(a) => a,
        Awaited::Ended => {
            let out = running.wait();
            return Err(wrong(
                format!("ended {:?} without asking", out.code),
                format!(
                    "{}\napprovals: {}",
                    printed(&out),
                    approvals_brief(&env.approvals())
                ),
            ));
        }
        Awaited::Nothing => {
            return Err(wrong(
                format!("no approval within {ASK_LIMIT:?}"),
                format!(
                    "still running; stdout so far: {}\nstderr so far: {}",
                    tail(&running.stdout_now()),
                    running.stderr_now()
                ),
            ));
        }
    };
    let id = s(&a, "approval_id").to_owned();
    // `approve` takes the tool's own default (DESIGN §15). Where the approval shows none (a
    // confirm without a capital, a placeholder that may or may not be a default, a bash
    // `select`), it must be refused — nothing guessed — and the default, named, must reach
    // the tool.
    let value = if value == "approve" && a.get("default_value").is_none_or(Value::is_null) {
        let refused = env.decide(&id, "approve");
        if refused.code == Some(0) || !refused.stderr.contains("shows none") {
            return Err(wrong(
                "`approve` without a default was not refused",
                format!(
                    "approval: {}
decide: {}",
                    approval_brief(&a),
                    refused.context()
                ),
            ));
        }
        widget.default_answer()
    } else {
        value
    };
    let decided = env.decide(&id, value);
    if decided.code != Some(0) {
        return Err(wrong(
            format!(
                "`monitor decide {value}` refused: {}",
                clip(decided.stderr.trim(), 200)
            ),
            format!(
                "approval: {}\ndecide: {}",
                approval_brief(&a),
                decided.context()
            ),
        ));
    }
    // Answered, the tool ends; asked again (a field that did not take the answer, a menu
    // whose highlight was not where the shim thought), it is a wrong cell at once.
    match await_approval(&env, &mut running, Some(&id)) {
        Awaited::Ended => {}
        Awaited::Asked(b) => {
            return Err(wrong(
                format!(
                    "after `{value}` asked again: {:?}",
                    b.get("prompt_line").and_then(Value::as_str).unwrap_or("")
                ),
                format!(
                    "approval: {}\nasked again: {}\nstdout so far: {}\nstderr so far: {}",
                    approval_brief(&a),
                    approval_brief(&b),
                    tail(&running.stdout_now()),
                    running.stderr_now()
                ),
            ));
        }
        Awaited::Nothing => {
            return Err(wrong(
                format!("still running {ASK_LIMIT:?} after `{value}`"),
                format!(
                    "approval: {}\nstdout so far: {}\nstderr so far: {}\nruns: {}",
                    approval_brief(&a),
                    tail(&running.stdout_now()),
                    running.stderr_now(),
                    runs_brief(&env)
                ),
            ));
        }
    }
    let out = running.wait();
    let got = got_lines(&out.stdout);
    let held = match want {
        Some(want) => out.code == Some(0) && got == [want],
        None => out.code == Some(91) && got.is_empty(),
    };
    if held {
        return Ok(());
    }
    let wanted = match want {
        Some(w) => format!("0 printing `{w}`"),
        None => "91 printing no GOT".to_owned(),
    };
    Err(wrong(
        format!(
            "after `{value}` exited {:?} printing {got:?}, not {wanted}",
            out.code
        ),
        format!(
            "approval: {}\nrun: {}\nruns: {}",
            approval_brief(&a),
            printed(&out),
            runs_brief(&env)
        ),
    ))
}

/// A password: exit 93, the run `failed`, no approval.
fn secret_mode(argv: &[OsString], widget: Widget) -> Result<(), Wrong> {
    let env = TestEnv::new();
    let out = shim(&env, argv, widget).run();
    let approvals = env.approvals();
    let status = env
        .runs()
        .last()
        .and_then(|r| r.get("status").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    if out.code == Some(93) && approvals.is_empty() && status == "failed" {
        return Ok(());
    }
    Err(wrong(
        format!(
            "exited {:?}, run {status:?}, {} approval(s); not 93, failed, none",
            out.code,
            approvals.len()
        ),
        format!(
            "{}\napprovals: {}\nruns: {}",
            printed(&out),
            approvals_brief(&approvals),
            runs_brief(&env)
        ),
    ))
}

enum Awaited {
    Asked(Map<String, Value>),
    Ended,
    Nothing,
}

/// The first pending approval other than `except` while the tool runs; `Ended` once the
/// shim has exited; `Nothing` after [`ASK_LIMIT`].
fn await_approval(env: &TestEnv, running: &mut Running, except: Option<&str>) -> Awaited {
    let deadline = Instant::now() + ASK_LIMIT;
    loop {
        if let Some(a) = env
            .approvals()
            .into_iter()
            .find(|a| a["status"] == "pending" && a["approval_id"].as_str() != except)
        {
            return Awaited::Asked(a);
        }
        if running.child.try_wait().ok().flatten().is_some() {
            return Awaited::Ended;
        }
        if Instant::now() >= deadline {
            return Awaited::Nothing;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn newest_pending(env: &TestEnv) -> Option<Map<String, Value>> {
    env.approvals()
        .into_iter()
        .rev()
        .find(|a| a["status"] == "pending")
}

/// A widget the table says the library lacks: its fixture, run directly, must say
/// UNSUPPORTED and exit 64 (it does so before asking anything).
fn unsupported_check(argv: &[OsString], widget: Widget) -> Option<String> {
    let checked = mode("unsupported", || {
        let env = TestEnv::new();
        let mut c = env.command(&argv[0]);
        c.args(&argv[1..])
            .arg(widget.name())
            .timeout(Duration::from_secs(20));
        let out = c.run();
        if out.code == Some(64) {
            return Ok(());
        }
        Err(wrong(format!("exited {:?}", out.code), out.context()))
    });
    (!checked.right).then(|| {
        format!(
            "the table says {:?} has no `{}`, but its fixture run without a terminal {} \
             (a widget it lacks must exit 64): {}",
            argv,
            widget.name(),
            checked.brief,
            checked.detail
        )
    })
}

/// A cell whose fixture said UNSUPPORTED through the shim: the table is wrong.
fn unsupported_in_a_run(cell: &Cell) -> Option<String> {
    cell.modes
        .iter()
        .find(|m| m.detail.contains("UNSUPPORTED"))
        .map(|m| {
            format!(
                "the table lists `{}` but the fixture said UNSUPPORTED ({} mode): {}",
                cell.widget.name(),
                m.name,
                m.brief
            )
        })
}

/// The `GOT …` lines the tool printed, escape sequences removed.
fn got_lines(stdout: &[u8]) -> Vec<String> {
    plain(stdout)
        .split(['\n', '\r'])
        .filter_map(|l| l.find("GOT ").map(|at| l[at..].trim_end().to_owned()))
        .collect()
}

/// Text without ANSI escape sequences (CSI, OSC, two-byte escapes).
fn plain(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            if c == '\t' || c == '\n' || c == '\r' || !c.is_control() {
                out.push(c);
            }
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            // Character-set designations (`ESC ( B`, `ESC ) 0`: whiptail, dialog).
            Some('(' | ')' | '*' | '+' | '-' | '.' | '/' | '#' | '%') => {
                chars.next();
            }
            Some(']') | Some('P') | Some('_') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The screen the tool left, as the shim's pty (200 × 50 when the shim's own output is not
/// a terminal) shows it: its last non-empty rows, `⏎` between rows.
fn tail(bytes: &[u8]) -> String {
    let size = |n: u16| std::num::NonZeroU16::new(n).expect("a screen size");
    let mut screen = vt100::Parser::new(size(50), size(200), 0);
    screen.process(bytes);
    let text = screen.screen().contents();
    let rows: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let rows = &rows[rows.len().saturating_sub(14)..];
    // A dialog box drawn mid-screen: its left margin removed.
    let margin = rows
        .iter()
        .map(|r| r.len() - r.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let rows: Vec<&str> = rows.iter().map(|r| &r[margin..]).collect();
    format!("{:?}", rows.join(" ⏎ "))
}

/// What a run printed: its exit, its screen's last lines, the shim's stderr.
fn printed(out: &Outcome) -> String {
    format!(
        "exit {:?}; screen tail: {}; stderr: {}",
        out.code,
        tail(&out.stdout),
        out.stderr.trim()
    )
}

/// The approval fields the detection engineers read.
fn approval_brief(a: &Map<String, Value>) -> String {
    let pick = |k: &str| a.get(k).cloned().unwrap_or(Value::Null);
    let options: Vec<String> = a
        .get("options_json")
        .and_then(Value::as_array)
        .map(|o| {
            o.iter()
                .map(|o| {
                    format!(
                        "{}={:?}",
                        o["value"].as_str().unwrap_or("?"),
                        o["label"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "rule_name={} prompt_kind={} prompt_line={} default={} allows_text={} options=[{}] question={} status={}",
        pick("rule_name"),
        pick("prompt_kind"),
        pick("prompt_line"),
        pick("default_value"),
        pick("allows_text"),
        options.join(", "),
        pick("question"),
        pick("status"),
    )
}

fn approvals_brief(list: &[Map<String, Value>]) -> String {
    if list.is_empty() {
        return "none".to_owned();
    }
    list.iter()
        .map(approval_brief)
        .collect::<Vec<_>>()
        .join(" | ")
}

fn runs_brief(env: &TestEnv) -> String {
    env.runs()
        .iter()
        .map(|r| {
            format!(
                "{} exit={} reason={}",
                r.get("status").and_then(Value::as_str).unwrap_or("?"),
                r.get("exit_code").cloned().unwrap_or(Value::Null),
                r.get("reason").cloned().unwrap_or(Value::Null)
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

fn summary_line(lib: &Library, cell: &Cell) -> String {
    let modes: Vec<String> = cell
        .modes
        .iter()
        .map(|m| {
            let mark = if m.right { "✓" } else { "✗" };
            let why = if m.right {
                String::new()
            } else {
                format!(": {}", m.brief)
            };
            format!("{} {mark} ({:.1}s){why}", m.name, m.took.as_secs_f64())
        })
        .collect();
    format!(
        "matrix {} {}: {} — {}",
        lib.key,
        cell.widget.name(),
        if cell.right() { "✓" } else { "✗" },
        modes.join("; ")
    )
}

/// The results directory `scripts/matrix` reads: `target/debug/matrix`.
fn results_dir() -> PathBuf {
    target_dir().join("matrix")
}

/// `LIB.txt`: a `#` line (the table's row order and title), then one line per widget,
/// tab-separated: widget, `right` / `wrong` / `unsupported`, the first wrong mode's
/// summary. `LIB.details.txt`: every wrong mode in full.
fn write_results(lib: &Library, cells: &[Cell]) {
    let order = LIBRARIES.iter().position(|l| l.key == lib.key).unwrap_or(0);
    let mut txt = format!("# {order:02}\t{}\t{}\n", lib.key, lib.title);
    let mut details = String::new();
    for widget in WIDGETS {
        match cells.iter().find(|c| c.widget == widget) {
            None => txt.push_str(&format!("{}\tunsupported\t\n", widget.name())),
            Some(cell) if cell.right() => {
                txt.push_str(&format!("{}\tright\t\n", widget.name()));
            }
            Some(cell) => {
                let first = cell.modes.iter().find(|m| !m.right);
                let why = first
                    .map(|m| format!("{}: {}", m.name, m.brief))
                    .unwrap_or_default();
                txt.push_str(&format!(
                    "{}\twrong\t{}\n",
                    widget.name(),
                    why.replace(['\t', '\n'], " ")
                ));
                for m in cell.modes.iter().filter(|m| !m.right) {
                    details.push_str(&format!(
                        "## {} {} — {} mode ({:.1}s)\n{}\n{}\n\n",
                        lib.key,
                        widget.name(),
                        m.name,
                        m.took.as_secs_f64(),
                        m.brief,
                        m.detail
                    ));
                }
            }
        }
    }
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("create the matrix results dir");
    std::fs::write(dir.join(format!("{}.txt", lib.key)), txt).expect("write matrix results");
    std::fs::write(dir.join(format!("{}.details.txt", lib.key)), details)
        .expect("write matrix details");
}

macro_rules! matrix_tests {
    ($($name:ident => $key:literal,)*) => {
        $(
            #[test]
            fn $name() {
                run_library($key);
            }
        )*

        /// Every library of the table has its test.
        const TESTED: &[&str] = &[$($key),*];
    };
}

matrix_tests! {
    matrix_inquirer_prompts => "inquirer-prompts",
    matrix_inquirer_legacy => "inquirer-legacy",
    matrix_enquirer => "enquirer",
    matrix_prompts => "prompts",
    matrix_clack => "clack",
    matrix_ink => "ink",
    matrix_questionary => "questionary",
    matrix_inquirerpy => "inquirerpy",
    matrix_prompt_toolkit => "prompt_toolkit",
    matrix_click => "click",
    matrix_rich => "rich",
    matrix_typer => "typer",
    matrix_cleo => "cleo",
    matrix_beaupy => "beaupy",
    matrix_dialoguer => "dialoguer",
    matrix_inquire => "inquire",
    matrix_survey => "survey",
    matrix_promptui => "promptui",
    matrix_tty_prompt => "tty-prompt",
    matrix_bash_read => "bash-read",
    matrix_whiptail => "whiptail",
    matrix_dialog => "dialog",
}

/// The README's `## Prompt-library matrix` table, as (row title, cells by widget column).
fn readme_matrix() -> (Vec<(String, Vec<String>)>, String) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("read README.md");
    let section: String = readme
        .split("\n## ")
        .find(|s| s.starts_with("Prompt-library matrix"))
        .expect("README.md has a `## Prompt-library matrix` section")
        .to_owned();
    let mut rows = Vec::new();
    let mut header_seen = false;
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cols: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        if !header_seen {
            let want: Vec<&str> = std::iter::once("library")
                .chain(WIDGETS.iter().map(|w| w.name()))
                .collect();
            assert_eq!(cols, want, "the README matrix's header");
            header_seen = true;
            continue;
        }
        if cols
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let (title, cells) = cols.split_first().expect("a row");
        rows.push((title.clone(), cells.to_vec()));
    }
    (rows, section)
}

/// The README claims exactly the cells EXPECTED holds (✓), names every other cell the suite
/// runs as wrong (✗, with a line saying why) and marks the widgets a library lacks (—).
#[test]
fn readme_matrix_agrees_with_expected() {
    for lib in LIBRARIES {
        assert!(TESTED.contains(&lib.key), "{} has no test", lib.key);
        for w in expected_right(lib.key) {
            assert!(
                lib.widgets.contains(w),
                "EXPECTED lists {} `{}`, which its fixture does not ask",
                lib.key,
                w.name()
            );
        }
    }
    for (key, _) in EXPECTED {
        library(key);
    }
    let (rows, section) = readme_matrix();
    let titles: Vec<&str> = rows.iter().map(|(t, _)| t.as_str()).collect();
    let want: Vec<&str> = LIBRARIES.iter().map(|l| l.title).collect();
    assert_eq!(titles, want, "the README matrix's rows");
    let (mut right, mut run) = (0, 0);
    for ((_, cells), lib) in rows.iter().zip(LIBRARIES) {
        assert_eq!(
            cells.len(),
            WIDGETS.len(),
            "{}: one cell per widget",
            lib.title
        );
        for (cell, widget) in cells.iter().zip(WIDGETS) {
            let want = if !lib.widgets.contains(&widget) {
                "—"
            } else if expected_right(lib.key).contains(&widget) {
                right += 1;
                run += 1;
                "✓"
            } else {
                run += 1;
                "✗"
            };
            assert_eq!(
                cell,
                want,
                "README matrix: {} `{}` (EXPECTED and LIBRARIES in tests/e2e/matrix.rs)",
                lib.title,
                widget.name()
            );
            if want == "✗" {
                let bullet = format!("- {} `{}`", lib.title, widget.name());
                assert!(
                    section.lines().any(|l| l.starts_with(&bullet)),
                    "the README matrix's wrong cells: no line starting {bullet:?} saying why"
                );
            }
        }
    }
    let total = format!("**{right} / {run} cells right**");
    assert!(
        section.contains(&total),
        "the README matrix's total should read {total}"
    );
}

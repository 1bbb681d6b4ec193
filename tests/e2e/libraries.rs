//! The prompt libraries modern CLIs are built on, for real (issue 12 items 2–4): npm
//! `@inquirer/prompts` (select, input, checkbox, password), PyPI questionary, InquirerPy and
//! prompt_toolkit, and bash's readline with a pre-filled field. Each goes through the shim
//! in exit mode (approve → the re-run is answered), wait mode and reject, and each test
//! checks what the tool itself received (it prints it), never just what the shim said.

use headless_run_e2e::*;
use serde_json::{Map, Value};

fn option_values(a: &Map<String, Value>) -> Vec<String> {
    arr(a, "options_json")
        .iter()
        .map(|o| o["value"].as_str().unwrap().to_owned())
        .collect()
}

/// The newest pending approval after a run that exited 90 for it.
fn parked(env: &TestEnv, out: &Outcome) -> Map<String, Value> {
    out.expect_code(90);
    let a = env
        .approvals()
        .into_iter()
        .rev()
        .find(|a| a["status"] == "pending")
        .unwrap_or_else(|| panic!("no pending approval: {}", out.context()));
    assert_eq!(
        s(&env.runs().last().unwrap().clone(), "status"),
        "waiting_approval"
    );
    a
}

fn node(env: &TestEnv, which: &str) -> Cmd {
    let script = inquirer_fixture();
    let mut c = env.shim();
    c.arg(need("node", "nodejs")).arg(script).arg(which);
    c
}

fn python(env: &TestEnv, which: &str) -> Cmd {
    let py = prompt_libs_python();
    let mut c = env.shim();
    c.arg(py).arg(fixture("libs/pyprompts.py")).arg(which);
    c
}

#[test]
fn inquirer_select_is_a_menu_approval_answered_by_moving_the_highlight() {
    let env = TestEnv::new();
    let out = node(&env, "select").run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "rule_name"), "generic:select");
    assert_eq!(s(&a, "prompt_kind"), "select");
    assert_eq!(s(&a, "prompt_line"), "? Pick a color");
    assert_eq!(option_values(&a), ["red", "green", "blue"]);
    assert_eq!(s(&a, "default_value"), "green", "the highlighted item");
    // A value that is not an item is refused, listing the items.
    let bad = env.decide(s(&a, "approval_id"), "purple");
    assert_ne!(bad.code(), 0, "{}", bad.context());
    assert!(bad.stderr.contains("blue"), "{}", bad.stderr);
    env.decide(s(&a, "approval_id"), "blue").expect_code(0);
    // The re-run: the highlight is moved to blue, then Enter; the next prompt, an input
    // with a default, is asked.
    let out = node(&env, "select").run();
    assert!(out.out().contains("GOT blue"), "{}", out.context());
    let b = parked(&env, &out);
    assert_eq!(s(&b, "prompt_line"), "? Project name (demo)");
    // Free text into a raw-mode field: cleared, typed, checked, submitted.
    env.decide(s(&b, "approval_id"), "myproj").expect_code(0);
    let out = node(&env, "select").run();
    out.expect_code(0);
    assert!(out.out().contains("GOT blue"), "{}", out.context());
    assert!(out.out().contains("NAME [myproj]"), "{}", out.context());
    assert_eq!(s(env.runs().last().unwrap(), "status"), "completed");
}

#[test]
fn inquirer_input_answers_are_submitted_and_never_run_into_the_next_question() {
    // Wait mode: both answers reach the one run. (In exit mode a free-text value is gone
    // once a run consumed it, so a re-run is asked again rather than replaying it.)
    let env = TestEnv::new();
    let running = node(&env, "input").spawn_wait_mode();
    let a = env.pending_approval();
    assert_eq!(s(&a, "prompt_line"), "? Project name");
    env.decide(s(&a, "approval_id"), "myproj").expect_code(0);
    let b = wait_for_pending_other_than(&env, s(&a, "approval_id"));
    assert_eq!(s(&b, "prompt_line"), "? Owner");
    env.decide(s(&b, "approval_id"), "x").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    // Before: typed without Enter, the next answer was appended (`myprojx`).
    assert!(
        out.out().contains("NAME [myproj] OWNER [x]"),
        "{}",
        out.context()
    );
    // Neither value stays in the store once typed.
    for ap in env.approvals() {
        assert!(ap["chosen_value"].is_null(), "{ap:#?}");
    }
}

#[test]
fn inquirer_select_in_wait_mode_and_rejected() {
    let env = TestEnv::new();
    let running = node(&env, "select").spawn_wait_mode();
    let a = env.pending_approval();
    env.decide(s(&a, "approval_id"), "red").expect_code(0);
    // Then the input: its default taken by approving.
    let b = wait_for_pending_other_than(&env, s(&a, "approval_id"));
    assert_eq!(s(&b, "default_value"), "demo");
    env.decide(s(&b, "approval_id"), "approve").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().contains("GOT red"), "{}", out.context());
    assert!(out.out().contains("NAME [demo]"), "{}", out.context());
    // Rejected: the tool is ended with 91, nothing chosen.
    let env = TestEnv::new();
    let out = node(&env, "select").run();
    let a = parked(&env, &out);
    env.decide(s(&a, "approval_id"), "reject").expect_code(0);
    let out = node(&env, "select").run();
    out.expect_code(91);
    assert!(!out.out().contains("GOT"), "{}", out.context());
}

#[test]
fn inquirer_checkbox_is_decided_as_the_set_to_submit() {
    let env = TestEnv::new();
    let out = node(&env, "checkbox").run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "rule_name"), "generic:checkbox");
    assert_eq!(s(&a, "prompt_kind"), "multi_select");
    assert_eq!(option_values(&a), ["red", "green", "blue"]);
    assert_eq!(
        s(&a, "default_value"),
        "red,blue",
        "the boxes shown checked"
    );
    // Approved: the set shown is submitted as it stands.
    env.decide(s(&a, "approval_id"), "approve").expect_code(0);
    let out = node(&env, "checkbox").run();
    out.expect_code(0);
    assert!(
        out.out().contains(r#"GOT ["red","blue"]"#),
        "{}",
        out.context()
    );
    // Another set: each box that differs is toggled, checked on the screen, then Enter.
    let out = node(&env, "checkbox").run();
    let b = parked(&env, &out);
    let bad = env.decide(s(&b, "approval_id"), "green,purple");
    assert_ne!(bad.code(), 0, "{}", bad.context());
    env.decide(s(&b, "approval_id"), "green").expect_code(0);
    let out = node(&env, "checkbox").run();
    out.expect_code(0);
    assert!(out.out().contains(r#"GOT ["green"]"#), "{}", out.context());
}

#[test]
fn inquirer_password_is_a_refused_secret_and_nothing_is_stored() {
    let env = TestEnv::new();
    let out = node(&env, "password").run();
    out.expect_code(93);
    assert!(
        out.stderr.contains("Enter your API token"),
        "the refusal names the prompt: {}",
        out.context()
    );
    assert!(env.approvals().is_empty(), "{:#?}", env.approvals());
    assert_eq!(s(&env.only_run(), "status"), "failed");
}

#[test]
fn questionary_select_and_prefilled_text() {
    let env = TestEnv::new();
    let out = python(&env, "questionary-select").run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "rule_name"), "generic:select");
    assert_eq!(option_values(&a), ["red", "green", "blue"]);
    assert_eq!(s(&a, "default_value"), "green");
    env.decide(s(&a, "approval_id"), "red").expect_code(0);
    let out = python(&env, "questionary-select").run();
    assert!(out.out().contains("GOT red"), "{}", out.context());
    let b = parked(&env, &out);
    // prompt_toolkit pre-fills the field with the default: the answer replaces it.
    assert_eq!(s(&b, "prompt_line"), "? Project name demo");
    env.decide(s(&b, "approval_id"), "myproj").expect_code(0);
    let out = python(&env, "questionary-select").run();
    out.expect_code(0);
    assert!(out.out().contains("NAME [myproj]"), "{}", out.context());
    assert!(!out.out().contains("demomyproj"), "{}", out.context());
}

/// prompt_toolkit asks the terminal where the cursor is before each prompt; unanswered,
/// it warns after 2 s ("your terminal doesn't support cursor position requests (CPR)") and
/// redraws — a changed screen, so a decision made after that was never typed. The shim
/// answers as a terminal would when no real terminal sees the output.
#[test]
fn prompt_toolkit_gets_its_cursor_position_answered_while_it_waits() {
    let env = TestEnv::new();
    let running = python(&env, "questionary-select").spawn_wait_mode();
    let a = env.pending_approval();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    env.decide(s(&a, "approval_id"), "blue").expect_code(0);
    let b = wait_for_pending_other_than(&env, s(&a, "approval_id"));
    env.decide(s(&b, "approval_id"), "myproj").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(!out.out().contains("CPR"), "{}", out.context());
    assert!(out.out().contains("GOT blue"), "{}", out.context());
    assert!(out.out().contains("NAME [myproj]"), "{}", out.context());
    assert_eq!(env.approvals().len(), 2, "nothing was asked twice");
}

#[test]
fn inquirerpy_select_in_wait_mode() {
    let env = TestEnv::new();
    let running = python(&env, "inquirerpy-select").spawn_wait_mode();
    let a = env.pending_approval();
    assert_eq!(option_values(&a), ["staging", "production", "dev"]);
    assert_eq!(s(&a, "default_value"), "staging");
    env.decide(s(&a, "approval_id"), "dev").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().contains("GOT dev"), "{}", out.context());
}

#[test]
fn prefilled_line_editors_get_the_answer_in_place_of_their_content() {
    // prompt_toolkit's prompt(default=…) and bash's `read -e -i`: Enter alone would submit
    // the pre-filled text; an answer must replace it, not be appended to it.
    let env = TestEnv::new();
    let out = python(&env, "toolkit-text").run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "prompt_line"), "Release name: v1-demo");
    env.decide(s(&a, "approval_id"), "v2").expect_code(0);
    let out = python(&env, "toolkit-text").run();
    out.expect_code(0);
    assert!(out.out().contains("NAME [v2]"), "{}", out.context());

    let env = TestEnv::new();
    let read = "read -e -i demo -p 'Project name: ' x; echo \"got [$x]\"";
    let out = env.shim().args(["bash", "-c", read]).run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "prompt_line"), "Project name: demo");
    env.decide(s(&a, "approval_id"), "myproj").expect_code(0);
    let out = env.shim().args(["bash", "-c", read]).run();
    out.expect_code(0);
    assert!(out.out().contains("got [myproj]"), "{}", out.context());
}

#[test]
fn rich_choices_offer_each_word_with_the_default() {
    let env = TestEnv::new();
    let out = python(&env, "rich-choices").run();
    let a = parked(&env, &out);
    assert_eq!(s(&a, "rule_name"), "generic:choices");
    assert_eq!(option_values(&a), ["red", "green", "blue"]);
    assert_eq!(s(&a, "default_value"), "green");
    env.decide(s(&a, "approval_id"), "blue").expect_code(0);
    let out = python(&env, "rich-choices").run();
    out.expect_code(0);
    assert!(out.out().contains("GOT blue"), "{}", out.context());
    // Rejected: ended with 91, nothing chosen.
    let env = TestEnv::new();
    let a = parked(&env, &python(&env, "rich-choices").run());
    env.decide(s(&a, "approval_id"), "reject").expect_code(0);
    let out = python(&env, "rich-choices").run();
    out.expect_code(91);
    assert!(!out.out().contains("GOT"), "{}", out.context());
}

#[test]
fn click_takes_yes_for_y_and_its_bracketed_default() {
    let env = TestEnv::new();
    let a = parked(&env, &python(&env, "click-confirm").run());
    assert_eq!(option_values(&a), ["yes", "no"]);
    // `yes` where the options are `y`/`n`.
    let decided = env.decide(s(&a, "approval_id"), "yes");
    decided.expect_code(0);
    assert!(decided.out().contains("with `yes`"), "{}", decided.out());
    let out = python(&env, "click-confirm").run();
    assert!(out.out().contains("CONFIRMED True"), "{}", out.context());
    let b = parked(&env, &out);
    assert_eq!(s(&b, "prompt_line"), "Release name [v1]:");
    assert_eq!(s(&b, "default_value"), "v1");
    env.decide(s(&b, "approval_id"), "approve").expect_code(0);
    let out = python(&env, "click-confirm").run();
    out.expect_code(0);
    assert!(out.out().contains("NAME [v1]"), "{}", out.context());
}

/// gpg's `(N)` menus with a `(default)` item and skipped numbers, then a `(3072)` default.
#[test]
fn gpg_key_menus_offer_their_items_and_defaults() {
    let gpg = need("gpg", "gnupg");
    let env = TestEnv::new();
    let home = env.path().join("gnupg");
    std::fs::create_dir(&home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The keybox is made first, so each run shows the same screen ("keybox … created" only
    // on the first run would be a changed screen, asked anew).
    let made = std::process::Command::new(&gpg)
        .arg("--homedir")
        .arg(&home)
        .arg("--list-keys")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let run = |env: &TestEnv| {
        env.shim()
            .arg(&gpg)
            .arg("--homedir")
            .arg(&home)
            .arg("--full-generate-key")
            .run()
    };
    let a = parked(&env, &run(&env));
    assert_eq!(s(&a, "rule_name"), "generic:numbered-menu");
    assert_eq!(option_values(&a), ["1", "2", "3", "4", "14"]);
    assert_eq!(s(&a, "default_value"), "1");
    assert!(s(&a, "question").contains("Please select what kind of key you want"));
    env.decide(s(&a, "approval_id"), "4").expect_code(0);
    let out = run(&env);
    let b = parked(&env, &out);
    assert!(
        s(&b, "prompt_line").starts_with("What keysize do you want?"),
        "RSA (sign only) was chosen: {}",
        out.context()
    );
    assert_eq!(s(&b, "default_value"), "3072");
    env.decide(s(&b, "approval_id"), "reject").expect_code(0);
    run(&env).expect_code(91);
}

/// npm init's `name: (default)` questions.
#[test]
fn npm_init_questions_take_their_defaults() {
    let npm = need("npm", "npm");
    let env = TestEnv::new();
    let run = |env: &TestEnv| env.shim().arg(&npm).args(["init"]).run();
    let a = parked(&env, &run(&env));
    assert_eq!(s(&a, "prompt_line"), "package name: (work)");
    assert_eq!(s(&a, "rule_name"), "generic:text-default");
    assert_eq!(s(&a, "default_value"), "work");
    env.decide(s(&a, "approval_id"), "approve").expect_code(0);
    let b = parked(&env, &run(&env));
    assert_eq!(s(&b, "prompt_line"), "version: (1.0.0)");
    assert_eq!(s(&b, "default_value"), "1.0.0");
    env.decide(s(&b, "approval_id"), "reject").expect_code(0);
    run(&env).expect_code(91);
    assert!(
        !env.work().join("package.json").exists(),
        "npm init was ended before writing"
    );
}

/// Debconf's readline frontend (what `dpkg-reconfigure` shows): a select question laid out
/// in columns, every item an option, in a private debconf database.
#[test]
fn debconf_column_menus_offer_every_item() {
    need("debconf", "debconf");
    let env = TestEnv::new();
    let dir = env.path().join("debconf");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("hr.templates"),
        "Template: hrtest/area\nType: select\nChoices: Africa, America, Antarctica, Arctic, Asia, Atlantic, Australia, Europe, Indian, Pacific, US, Etc\nDescription: Geographic area:\n Please select the geographic area in which you live.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("debconf.conf"),
        format!(
            "Config: configdb\nTemplates: templatedb\n\nName: configdb\nDriver: File\nFilename: {d}/config.dat\n\nName: templatedb\nDriver: File\nMode: 644\nFilename: {d}/templates.dat\n",
            d = dir.display()
        ),
    )
    .unwrap();
    // A file: the confmodule re-runs its script (`$0`) under debconf's frontend.
    let script = dir.join("config.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nset -e\n. /usr/share/debconf/confmodule\ndb_x_loadtemplatefile {d}/hr.templates hrtest\ndb_fset hrtest/area seen false\ndb_input critical hrtest/area || true\ndb_go\ndb_get hrtest/area\necho \"AREA=$RET\" >&2\n",
            d = dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |env: &TestEnv| {
        env.shim()
            .arg(&script)
            .env("DEBCONF_SYSTEMRC", dir.join("debconf.conf"))
            .env("DEBIAN_FRONTEND", "readline")
            .run()
    };
    let a = parked(&env, &run(&env));
    assert_eq!(s(&a, "rule_name"), "generic:column-menu");
    let want: Vec<String> = (1..=12).map(|n| n.to_string()).collect();
    assert_eq!(option_values(&a), want, "all twelve, not the first column");
    let labels: Vec<String> = arr(&a, "options_json")
        .iter()
        .map(|o| o["label"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(labels[10], "US");
    assert!(s(&a, "question").contains("geographic area"), "{a:#?}");
    env.decide(s(&a, "approval_id"), "11").expect_code(0);
    let out = run(&env);
    out.expect_code(0);
    assert!(out.out().contains("AREA=US"), "{}", out.context());
}

//! Configuration through the real shim: a broken file or variable is exit 125 naming the
//! file, line and key (the tool never runs on a silent default); the layers user file <
//! project file < environment < flags; prompt rules of the user's own.

use headless_run_e2e::*;

#[test]
fn a_broken_config_is_exit_125_naming_file_line_and_key() {
    let env = TestEnv::new();
    env.write_config("[defaults]\nstall_timeout = \"5m\"\ntimeout = \"soon\"\n");
    let out = env.shim().args(["echo", "ran"]).run();
    out.expect_code(125);
    assert_eq!(out.out(), "", "the tool does not run on a broken config");
    let file = env.path().join("config/headless-run/config.toml");
    for part in [file.to_str().unwrap(), "line 3", "key `defaults.timeout`"] {
        assert!(out.stderr.contains(part), "{part}: {}", out.stderr);
    }
    // doctor names it too.
    let doc = env.monitor().arg("doctor").run();
    doc.expect_code(1);
    assert!(doc.out().contains("line 3"), "{}", doc.out());

    // The project file, with an unknown key.
    let env = TestEnv::new();
    std::fs::write(
        env.work().join(".headless-run.toml"),
        "[tools.rm]\non_stal = \"mark\"\n",
    )
    .unwrap();
    let out = env.shim().args(["echo", "ran"]).run();
    out.expect_code(125);
    assert!(
        out.stderr.contains(".headless-run.toml, line 2"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("on_stal"), "{}", out.stderr);

    // An environment variable.
    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_ON_STALL", "explode")
        .args(["echo", "ran"])
        .run();
    out.expect_code(125);
    assert!(
        out.stderr.contains("HEADLESS_RUN_ON_STALL"),
        "{}",
        out.stderr
    );
    assert!(env.runs().is_empty(), "nothing ran, nothing recorded");
}

#[test]
fn user_file_then_project_file_then_environment_then_flags() {
    let env = TestEnv::new();
    let sleep = |env: &TestEnv| {
        let mut c = env.shim();
        c.args(["sleep", "1"]);
        c
    };
    env.write_config("[defaults]\ntimeout = \"200ms\"\n");
    sleep(&env).run().expect_code(124);
    // The project file (found from a subdirectory upward) overrides the user file, per tool.
    std::fs::write(
        env.work().join(".headless-run.toml"),
        "[tools.sleep]\ntimeout = \"none\"\n",
    )
    .unwrap();
    let deep = env.work().join("a/b");
    std::fs::create_dir_all(&deep).unwrap();
    sleep(&env).current_dir(&deep).run().expect_code(0);
    // The environment overrides both files…
    sleep(&env)
        .env("HEADLESS_RUN_TIMEOUT", "200ms")
        .run()
        .expect_code(124);
    // …and a flag the environment.
    env.shim()
        .env("HEADLESS_RUN_TIMEOUT", "200ms")
        .args(["--timeout", "none", "sleep", "1"])
        .run()
        .expect_code(0);
    let statuses: Vec<String> = env
        .runs()
        .iter()
        .map(|r| s(r, "status").to_owned())
        .collect();
    assert_eq!(
        statuses,
        ["failed_timeout", "completed", "failed_timeout", "completed"]
    );
}

#[test]
fn a_prompt_rule_of_the_users_own_offers_its_options_and_types_its_keys() {
    let env = TestEnv::new();
    env.write_config(
        r#"
[[prompt_rules]]
name = "deploy"
tool = "tool.py"
regex = 'Deploy to (\w+)\?'
options = [{ value = "ship", label = "Ship it", keys = "yes\r" }, { value = "hold", keys = "no\r" }]
default = "hold"
"#,
    );
    let ask = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool()).args(["ask", "Deploy to prod? "]);
        c
    };
    let out = ask(&env).run();
    out.expect_code(90);
    let ap = env.pending_approval();
    assert_eq!(s(&ap, "rule_name"), "user:deploy", "{ap:#?}");
    assert_eq!(s(&ap, "default_value"), "hold");
    let options = arr(&ap, "options_json");
    assert_eq!(options[0]["value"], "ship");
    assert_eq!(options[0]["label"], "Ship it");
    assert!(options[0].get("keys").is_none(), "keys are never stored");
    env.decide(s(&ap, "approval_id"), "ship").expect_code(0);
    let out = ask(&env).run();
    out.expect_code(0);
    assert!(
        out.out().ends_with("got yes\n"),
        "the rule's keys were typed: {:?}",
        out.out()
    );
}

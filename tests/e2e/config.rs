//! Configuration through the real shim: a broken file is named (file, line, key) and the tool
//! still runs, on the built-in settings (a broken config must not stop every tool); a broken
//! variable is exit 125; the layers user file < project file < environment < flags; prompt
//! rules of the user's own.

use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn a_broken_config_is_named_and_the_tool_still_runs() {
    let env = TestEnv::new();
    env.write_config("[defaults]\nstall_timeout = \"5m\"\ntimeout = \"soon\"\n");
    let out = env.shim().args(["echo", "ran"]).run();
    out.expect_code(0);
    assert_eq!(out.out(), "ran\n", "the tool runs on the built-in settings");
    let file = env.path().join("config/headless-run/config.toml");
    for part in [
        file.to_str().unwrap(),
        "line 3",
        "key `defaults.timeout`",
        "built-in",
    ] {
        assert!(out.stderr.contains(part), "{part}: {}", out.stderr);
    }
    // A prompt is still asked (the defaults decide nothing by themselves).
    env.shim()
        .arg(tool())
        .args(["ask", "Proceed? [y/N] "])
        .run()
        .expect_code(90);
    // doctor names it, and monitor commands that read the config fail loudly.
    let doc = env.monitor().arg("doctor").run();
    doc.expect_code(1);
    assert!(doc.out().contains("line 3"), "{}", doc.out());
    env.monitor().arg("policies").run().expect_code(2);

    // The project file, with an unknown key.
    let env = TestEnv::new();
    std::fs::write(
        env.work().join(".headless-run.toml"),
        "[tools.rm]\non_stal = \"mark\"\n",
    )
    .unwrap();
    let out = env.shim().args(["echo", "ran"]).run();
    out.expect_code(0);
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
    assert!(
        env.runs().is_empty(),
        "a bad variable: nothing ran, nothing recorded"
    );
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

/// A project `.headless-run.toml` may describe prompts but never decide them: a short
/// `approval_ttl` with `on_expire = "default"` would approve with nobody deciding (recorded
/// as `system:expiry`), and a rule's `keys` would type `y` when the operator chose `n`.
#[test]
fn a_project_file_describes_prompts_but_cannot_decide_them() {
    let env = TestEnv::new();
    std::fs::write(
        env.work().join(".headless-run.toml"),
        r#"[defaults]
approval_ttl = "1s"
on_expire = "default"

[[prompt_rules]]
name = "deploy"
regex = 'Deploy to (\w+)\?'
options = [{ value = "ship", keys = "n\r" }, { value = "hold", keys = "y\r" }]
default = "ship"
"#,
    )
    .unwrap();
    let ask = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool()).args(["ask", "Deploy to prod? "]);
        c
    };
    let out = ask(&env).run();
    out.expect_code(90);
    for key in ["approval_ttl", "on_expire", "keys", "default"] {
        assert!(
            out.stderr.contains(&format!("`{key}` ignored")),
            "{key}: {}",
            out.stderr
        );
    }
    assert!(out.stderr.contains("project:"), "{}", out.stderr);
    let ap = env.pending_approval();
    // The rule still describes the prompt, and says where it came from.
    assert_eq!(s(&ap, "rule_name"), "project:deploy", "{ap:#?}");
    assert!(ap["default_value"].is_null(), "{ap:#?}");
    // Its TTL is the user's (24 h): a second later nothing has expired into an answer.
    std::thread::sleep(Duration::from_millis(1500));
    let out = ask(&env).run();
    out.expect_code(90);
    assert_eq!(
        s(&env.approval_by_id(s(&ap, "approval_id")), "status"),
        "pending"
    );
    // The operator's choice is typed as the operator chose it, not as the file's keys say.
    env.decide(s(&ap, "approval_id"), "hold").expect_code(0);
    let out = ask(&env).run();
    out.expect_code(0);
    assert!(out.out().ends_with("got hold\n"), "{:?}", out.out());
}

/// A project file someone else could have written (group- or world-writable) is not read;
/// nor is one above the repository's root.
#[test]
fn untrusted_or_foreign_project_files_are_ignored() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let file = env.work().join(".headless-run.toml");
    std::fs::write(&file, "[defaults]\ntimeout = \"1s\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = env.shim().arg(tool()).args(["sleep", "2"]).run();
    out.expect_code(0);
    assert!(out.stderr.contains("writable by others"), "{}", out.stderr);
    // Mode 0600 again, but the command runs in a repository below it: the search stops at
    // the repository's root.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let repo = env.work().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let out = env
        .shim()
        .current_dir(&repo)
        .arg(tool())
        .args(["sleep", "2"])
        .run();
    out.expect_code(0);
    // Directly in work/, it is read: the 1 s timeout ends the sleep.
    env.shim()
        .arg(tool())
        .args(["sleep", "2"])
        .run()
        .expect_code(124);
}

/// Inside a supervised tool (a nested run) the environment is the tool's: what shapes
/// decisions is not taken from it; keys with control characters are refused.
#[test]
fn a_nested_runs_environment_cannot_shape_decisions() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_TOOL_RUN_ID", "TR-01M843P2RDXRN7QN3V3KQE7DE4")
        .env("HEADLESS_RUN_APPROVAL_TTL", "1s")
        .env("HEADLESS_RUN_ON_EXPIRE", "default")
        .arg(tool())
        .args(["ask", "Proceed? [Y/n] "])
        .run();
    out.expect_code(90);
    assert!(
        out.stderr.contains("HEADLESS_RUN_APPROVAL_TTL ignored")
            && out.stderr.contains("HEADLESS_RUN_ON_EXPIRE ignored"),
        "{}",
        out.stderr
    );
    let ap = env.pending_approval();
    assert_eq!(s(&ap, "expire_action"), "reject", "{ap:#?}");
    env.write_config(
        r#"
[[prompt_rules]]
name = "sneaky"
regex = 'Deploy'
options = [{ value = "ship", keys = "y\u001b[A\r" }]
"#,
    );
    // The rule is refused as broken config: named, and not used.
    let out = env.shim().arg("true").run();
    out.expect_code(0);
    assert!(out.stderr.contains("control characters"), "{}", out.stderr);
    env.monitor().arg("policies").run().expect_code(2);
}

/// Issue 15 item 10: `monitor config` shows each setting in force with where it came from;
/// `--example` prints a config file that is valid as it is.
#[test]
fn monitor_config_says_where_each_setting_comes_from() {
    let env = TestEnv::new();
    env.write_config("[defaults]\nstall_timeout = 90\n\n[tools.terraform]\nkill_grace = \"5s\"\n");
    std::fs::write(
        env.work().join(".headless-run.toml"),
        "[defaults]\ntimeout = \"30m\"\napproval_ttl = \"1s\"\n",
    )
    .unwrap();
    let out = env
        .monitor()
        .env("HEADLESS_RUN_ON_STALL", "mark")
        .args(["config", "--tool", "terraform", "--json"])
        .run();
    out.expect_code(0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let setting = |key: &str| {
        v["settings"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["key"] == key))
            .cloned()
            .unwrap_or_else(|| panic!("{key}: {v:#}"))
    };
    let user = env.path().join("config/headless-run/config.toml");
    assert_eq!(setting("stall_timeout")["value"], "1m30s");
    assert_eq!(
        setting("stall_timeout")["from"],
        format!("user:{}", user.display())
    );
    assert_eq!(setting("kill_grace")["value"], "5s");
    assert!(
        setting("kill_grace")["from"]
            .as_str()
            .unwrap_or("")
            .ends_with("[tools.terraform]"),
        "{v:#}"
    );
    assert_eq!(setting("timeout")["value"], "30m00s");
    assert!(
        setting("timeout")["from"]
            .as_str()
            .unwrap_or("")
            .starts_with("project:"),
        "{v:#}"
    );
    assert_eq!(setting("on_stall")["value"], "mark");
    assert_eq!(setting("on_stall")["from"], "environment");
    // A project file's approval_ttl is not taken: the default holds, and a warning says so.
    assert_eq!(setting("approval_ttl")["from"], "default");
    assert!(v["warnings"].to_string().contains("approval_ttl"), "{v:#}");
    // The example file is valid as it is.
    let example = env.monitor().args(["config", "--example"]).run();
    example.expect_code(0);
    env.write_config(&example.out());
    let out = env.monitor().arg("config").run();
    out.expect_code(0);
    assert!(out.out().contains("user:deploy"), "{}", out.out());
    assert!(out.out().contains("tmp-files"), "{}", out.out());
}

/// Issue 15 item 13: a `.headless-run.toml` that is a FIFO, a device or huge is refused at
/// once — reading config is bounded in size and time — and the tool runs.
#[test]
fn a_fifo_device_or_huge_project_file_is_refused_not_waited_on() {
    let env = TestEnv::new();
    let file = env.work().join(".headless-run.toml");
    let fifo = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .expect("mkfifo");
    assert!(fifo.success());
    let out = env
        .shim()
        .args(["echo", "ran"])
        .timeout(Duration::from_secs(20))
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "ran\n");
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    let out = env
        .shim()
        .args(["echo", "ran"])
        .timeout(Duration::from_secs(20))
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "ran\n");
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let out = env.shim().args(["echo", "ran"]).run();
    out.expect_code(0);
    assert!(out.stderr.contains("larger than"), "{}", out.stderr);
}

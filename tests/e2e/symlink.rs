//! Symlink (busybox) mode and tool resolution: the real tool is found past the shim's
//! links, the shim never runs itself, and missing or non-executable tools say so.

use headless_run_e2e::*;
use std::os::unix::fs::{PermissionsExt, symlink};

fn script(path: &std::path::Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_link_named_after_the_tool_runs_the_real_tool_with_all_arguments() {
    let env = TestEnv::new();
    let shims = env.path().join("shims");
    let real = env.path().join("real");
    std::fs::create_dir_all(&shims).unwrap();
    std::fs::create_dir_all(&real).unwrap();
    symlink(bin("headless-run"), shims.join("mytool")).unwrap();
    script(
        &real.join("mytool"),
        r#"echo "real mytool: $*"; echo "run=$HEADLESS_RUN_TOOL_RUN_ID"; exit 3"#,
    );
    let path = format!("{}:{}:/usr/bin:/bin", shims.display(), real.display());
    let out = env
        .command(shims.join("mytool"))
        .env("HEADLESS", "1")
        .env("PATH", &path)
        .args(["--timeout", "x", "--help"])
        .run();
    out.expect_code(3);
    assert!(
        out.out().starts_with("real mytool: --timeout x --help\n"),
        "{}",
        out.out()
    );
    let run = env.only_run();
    assert_eq!(s(&run, "tool_name"), "mytool");
    assert!(
        out.out()
            .contains(&format!("run={}", s(&run, "tool_run_id")))
    );
    let argv = strings(&run, "argv_json");
    assert_eq!(argv, ["mytool", "--timeout", "x", "--help"]);
}

#[test]
fn a_link_with_no_real_tool_behind_it_is_127_not_a_loop() {
    let env = TestEnv::new();
    let shims = env.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    symlink(bin("headless-run"), shims.join("ghosttool")).unwrap();
    // A second link directory, and a link that is itself a chain of links.
    let more = env.path().join("more");
    std::fs::create_dir_all(&more).unwrap();
    symlink(shims.join("ghosttool"), more.join("ghosttool")).unwrap();
    let path = format!("{}:{}:/usr/bin:/bin", shims.display(), more.display());
    let out = env
        .command(shims.join("ghosttool"))
        .env("HEADLESS", "1")
        .env("PATH", &path)
        .run();
    out.expect_code(127);
    assert!(
        out.stderr.contains("ghosttool: command not found"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("skipped shim dirs"), "{}", out.stderr);
    assert_eq!(s(&env.only_run(), "status"), "failed");
}

#[test]
fn the_shim_dir_variable_is_skipped() {
    let env = TestEnv::new();
    let a = env.path().join("a");
    let b = env.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    script(&a.join("which-one"), "echo from-a");
    script(&b.join("which-one"), "echo from-b");
    let path = format!("{}:{}:/usr/bin:/bin", a.display(), b.display());
    let out = env
        .shim()
        .env("PATH", &path)
        .env("HEADLESS_RUN_SHIM_DIR", &a)
        .arg("which-one")
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "from-b\n");
}

#[test]
fn missing_and_not_executable_tools() {
    let env = TestEnv::new();
    let out = env.shim().arg("no-such-tool-anywhere").run();
    out.expect_code(127);
    assert!(
        out.stderr
            .contains("no-such-tool-anywhere: command not found"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("PATH="), "{}", out.stderr);
    let plain = env.path().join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let out = env.shim().arg(&plain).run();
    out.expect_code(126);
    assert!(out.stderr.contains("not executable"), "{}", out.stderr);
    let out = env.shim().arg(env.path()).run();
    out.expect_code(126);
    assert!(out.stderr.contains("is a directory"), "{}", out.stderr);
    // Both failures are recorded as failed runs with the reason.
    let runs = env.runs();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["status"] == "failed"));
    assert_eq!(n(&runs[0], "exit_code"), 127);
}

#[test]
fn a_script_with_a_missing_interpreter_is_126() {
    let env = TestEnv::new();
    let script = env.path().join("bad-interp");
    std::fs::write(&script, "#!/nonexistent/interpreter\necho never\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.shim().arg(&script).run();
    out.expect_code(126);
    assert!(out.stderr.contains("bad interpreter"), "{}", out.stderr);
    assert_eq!(s(&env.only_run(), "status"), "failed");
}

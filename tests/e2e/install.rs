//! `monitor install`: links that put tools behind headless-run, refusals (unknown tool,
//! someone else's file), replacing our own links, `--list`, `--remove`, and a plain `rm`
//! on PATH going through the shim.

use headless_run_e2e::*;
use std::os::unix::fs::symlink;
use std::path::Path;

fn path_with(dir: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display())
}

#[test]
fn install_then_path_puts_rm_behind_the_shim() {
    let env = TestEnv::new();
    let dir = env.path().join("shims");
    let out = env
        .monitor()
        .args(["install", "rm", "--dir"])
        .arg(&dir)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .run();
    out.expect_code(0);
    let text = out.out();
    assert!(text.contains("linked"), "{text}");
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l == format!("export PATH=\"{}:$PATH\"", dir.display())),
        "{text}"
    );
    let link = std::fs::read_link(dir.join("rm")).unwrap();
    assert_eq!(
        std::fs::canonicalize(&link).unwrap(),
        std::fs::canonicalize(bin("headless-run")).unwrap()
    );
    // A plain `rm FILE` now runs through the shim, and the real rm does the work.
    let file = env.work().join("gone.txt");
    std::fs::write(&file, "x").unwrap();
    let out = env
        .command("rm")
        .env("PATH", path_with(&dir))
        .env("HEADLESS", "1")
        .arg(&file)
        .run();
    out.expect_code(0);
    assert!(!file.exists());
    let run = env.only_run();
    assert_eq!(s(&run, "tool_name"), "rm");
    assert_eq!(s(&run, "status"), "completed");
    // Already on PATH first: no PATH line needed.
    let out = env
        .monitor()
        .args(["install", "rm", "--dir"])
        .arg(&dir)
        .env("PATH", path_with(&dir))
        .run();
    out.expect_code(0);
    assert!(out.out().contains("already linked"), "{}", out.out());
    assert!(
        out.out().contains("before the real tools already"),
        "{}",
        out.out()
    );
}

#[test]
fn a_plain_rm_i_through_the_link_becomes_an_approval() {
    let env = TestEnv::new();
    let dir = env.path().join("shims");
    env.monitor()
        .args(["install", "rm", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(0);
    let file = env.work().join("asked.txt");
    std::fs::write(&file, "x").unwrap();
    let out = env
        .command("rm")
        .env("PATH", path_with(&dir))
        .env("HEADLESS", "1")
        .env("HEADLESS_RUN_TIMEOUT", "20s")
        .args(["-i"])
        .arg(&file)
        .run();
    out.expect_code(90);
    assert!(file.exists());
    assert!(out.stderr.contains(" decide AP-"), "{}", out.stderr);
    let aps = env.approvals();
    assert_eq!(aps.len(), 1);
    assert_eq!(s(&aps[0], "tool_name"), "rm");
}

#[test]
fn refusals_force_relink_list_and_remove() {
    let env = TestEnv::new();
    let dir = env.path().join("shims");
    std::fs::create_dir_all(&dir).unwrap();
    // Not a tool on PATH: refused (4) unless --force.
    let out = env
        .monitor()
        .args(["install", "surely-no-such-tool", "--dir"])
        .arg(&dir)
        .run();
    out.expect_code(4);
    assert!(out.stderr.contains("--force"), "{}", out.stderr);
    assert!(!dir.join("surely-no-such-tool").exists());
    env.monitor()
        .args(["install", "--force", "surely-no-such-tool", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(0);
    assert!(std::fs::symlink_metadata(dir.join("surely-no-such-tool")).is_ok());
    // Someone else's file is never replaced.
    std::fs::write(dir.join("cp"), "#!/bin/sh\necho mine\n").unwrap();
    let out = env
        .monitor()
        .args(["install", "cp", "--dir"])
        .arg(&dir)
        .run();
    out.expect_code(3);
    assert!(
        out.stderr.contains("not a link to headless-run"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("cp")).unwrap(),
        "#!/bin/sh\necho mine\n"
    );
    // Our own (here: broken) link is replaced.
    symlink("/nonexistent/old/headless-run", dir.join("mv")).unwrap();
    let out = env
        .monitor()
        .args(["install", "mv", "--dir"])
        .arg(&dir)
        .run();
    out.expect_code(0);
    assert!(out.out().contains("relinked"), "{}", out.out());
    assert!(dir.join("mv").exists(), "the link works again");
    // --list: each link and what it resolves to.
    let out = env
        .monitor()
        .args(["install", "--list", "--dir"])
        .arg(&dir)
        .env("PATH", "/usr/bin:/bin")
        .run();
    out.expect_code(0);
    let text = out.out();
    assert!(text.contains("mv") && text.contains("/bin/mv"), "{text}");
    assert!(text.contains("surely-no-such-tool"), "{text}");
    assert!(text.contains("cp") && text.contains("not a link"), "{text}");
    // --remove: only our links.
    env.monitor()
        .args(["install", "--remove", "cp", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(3);
    assert!(dir.join("cp").exists());
    env.monitor()
        .args(["install", "--remove", "mv", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(0);
    assert!(std::fs::symlink_metadata(dir.join("mv")).is_err());
    env.monitor()
        .args(["install", "--remove", "mv", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(4);
    env.monitor()
        .args(["install", "../evil", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(2);
}

#[test]
fn the_default_dir_is_under_xdg_data_home() {
    let env = TestEnv::new();
    env.monitor().args(["install", "ls"]).run().expect_code(0);
    let link = env.path().join("data/headless-run/bin/ls");
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "{}",
        link.display()
    );
}

/// Issue 28: the shim built for the embedded store alone (`--no-default-features`) links no
/// PostgreSQL or HTTP client and no async runtime, records in the embedded store as the
/// default build does, and refuses — by name, running the tool unrecorded, as for any
/// state it cannot reach — a store it was built without.
#[test]
fn the_embedded_only_shim_links_no_remote_client_and_refuses_a_remote_store() {
    let cargo = need("cargo", "cargo");
    let root = target_dir().join("../..");
    let tree = std::process::Command::new(&cargo)
        .args(["tree", "--locked", "--offline", "-p", "headless-run"])
        .args(["--no-default-features", "-e", "normal", "--prefix", "none"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(tree.status.success(), "{tree:?}");
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.contains("rusqlite"), "{tree}");
    for absent in ["postgres", "tokio", "ureq", "rustls"] {
        assert!(
            !tree.lines().any(|l| l.contains(absent)),
            "{absent} linked:\n{tree}"
        );
    }
    // Neither shipped binary builds the library's test builders (`testing`: a feature the
    // test targets turn on).
    let shipped = std::process::Command::new(&cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "headless-run",
            "-p",
            "monitor",
        ])
        .args(["-e", "normal", "--prefix", "none", "-f", "{p} [{f}]"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(shipped.status.success(), "{shipped:?}");
    let shipped = String::from_utf8_lossy(&shipped.stdout);
    let shared: Vec<&str> = shipped
        .lines()
        .filter(|l| l.starts_with("headless-run-shared "))
        .collect();
    assert!(!shared.is_empty(), "{shipped}");
    assert!(shared.iter().all(|l| !l.contains("testing")), "{shared:?}");
    let dir = target_dir().join("e2e-deps/embedded-only");
    let built = std::process::Command::new(&cargo)
        .args([
            "build",
            "--locked",
            "--offline",
            "--quiet",
            "-p",
            "headless-run",
        ])
        .arg("--no-default-features")
        .arg("--target-dir")
        .arg(&dir)
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(built.success(), "the embedded-only shim did not build");
    let lean = dir.join("debug/headless-run");
    let env = TestEnv::new();
    let out = env
        .command(&lean)
        .env("HEADLESS", "1")
        .args(["--", "sh", "-c", "echo recorded"])
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "recorded\n");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    for (var, value, says) in [
        (
            "HEADLESS_RUN_DB",
            "postgres://runner@127.0.0.1:9/hr",
            "a PostgreSQL store",
        ),
        (
            "HEADLESS_RUN_SERVER",
            "http://127.0.0.1:9",
            "a monitor serve server",
        ),
    ] {
        let out = env
            .command(&lean)
            .env("HEADLESS", "1")
            .env(var, value)
            .args(["--", "sh", "-c", "echo unrecorded"])
            .run();
        out.expect_code(0);
        assert_eq!(out.out(), "unrecorded\n");
        assert!(
            out.stderr.contains(says)
                && out.stderr.contains("built without")
                && out.stderr.contains("not recorded"),
            "{}",
            out.context()
        );
    }
    assert_eq!(env.runs().len(), 1, "nothing recorded elsewhere");
}

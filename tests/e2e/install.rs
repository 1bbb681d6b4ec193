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

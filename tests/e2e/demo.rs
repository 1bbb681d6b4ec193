//! `scripts/demo`, the README's first command after the install, runs from start to end
//! against the debug binaries: every step exits as the story says, the file really goes.

use headless_run_e2e::*;
use std::path::Path;
use std::time::Duration;

#[test]
fn the_demo_tells_the_whole_story() {
    let env = TestEnv::new();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo");
    let out = env
        .command("bash")
        .arg(&demo)
        .env("HEADLESS_RUN_BIN_DIR", target_dir())
        .env("TMPDIR", env.path())
        .timeout(Duration::from_secs(120))
        .run();
    out.expect_code(0);
    let text = out.out();
    for step in [
        "(exit 3)",
        "(exit 92)",
        "EOF, as expected",
        "(exit 90)",
        "resumed as TR-",
        "notes.txt is gone",
        "all checks passed",
        // The dashboard, captured in tmux (which .ci/run installs).
        "Pending approvals",
    ] {
        assert!(text.contains(step), "{step}: {}", out.context());
    }
    // It cleans up after itself: nothing of its own is left in TMPDIR.
    let left: Vec<_> = std::fs::read_dir(env.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("headless-run-demo")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// After `scripts/install --prefix P`, the demo runs the binaries installed there.
#[test]
fn the_demo_uses_the_installed_binaries() {
    let env = TestEnv::new();
    let prefix = env.path().join("prefix");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = std::process::Command::new("sh")
        .arg(root.join("scripts/install"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--from")
        .arg(target_dir())
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");
    let out = env
        .command("bash")
        .arg(root.join("scripts/demo"))
        .env("PREFIX", &prefix)
        .env("TMPDIR", env.path())
        .env("HEADLESS_RUN_DEMO_KEEP", "1")
        .timeout(Duration::from_secs(120))
        .run();
    out.expect_code(0);
    assert!(
        out.out()
            .contains(&format!("binaries: {}", prefix.join("bin").display())),
        "{}",
        out.context()
    );
    assert!(out.out().contains("kept: "), "{}", out.context());
}

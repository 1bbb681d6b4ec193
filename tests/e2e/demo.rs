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
    ] {
        assert!(text.contains(step), "{step}: {}", out.context());
    }
}

//! `monitor doctor`: passes on a good set-up, and names each problem of a broken one
//! (world-readable database, shim dir missing from PATH, tampered audit row).

use headless_run_e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn good_setup(env: &TestEnv) -> std::path::PathBuf {
    env.shim().arg("true").run().expect_code(0);
    env.shim().arg("false").run().expect_code(1);
    let dir = env.path().join("shims");
    env.monitor()
        .args(["install", "rm", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(0);
    dir
}

fn doctor(env: &TestEnv, dir: &Path, path: &str) -> Outcome {
    env.monitor()
        .args(["doctor", "--dir"])
        .arg(dir)
        .env("PATH", path)
        .run()
}

#[test]
fn doctor_passes_on_a_good_setup() {
    let env = TestEnv::new();
    let dir = good_setup(&env);
    let out = doctor(&env, &dir, &format!("{}:/usr/bin:/bin", dir.display()));
    out.expect_code(0);
    let text = out.out();
    assert!(!text.contains("FAIL"), "{text}");
    for expected in [
        "state dir",
        "schema version",
        "WAL",
        "audit chain intact",
        "rm is shimmed; the real one is /usr/bin/rm",
        "before the real tools",
        "syscall",
        "all checks passed",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

#[test]
fn doctor_names_every_problem() {
    let env = TestEnv::new();
    let dir = good_setup(&env);
    let db = env.state().join("state.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Raw: tampering with the audit table in the file, for doctor to find.
    env.raw_db()
        .execute("UPDATE events SET actor = 'mallory' WHERE id = 2", [])
        .unwrap();
    // The shim dir is not on PATH at all.
    let out = doctor(&env, &dir, "/usr/bin:/bin");
    out.expect_code(1);
    let text = out.out();
    let fails: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        fails.iter().any(|l| l.contains("state.db is 0644")),
        "{text}"
    );
    assert!(fails.iter().any(|l| l.contains("is not on PATH")), "{text}");
    assert!(
        fails
            .iter()
            .any(|l| l.contains("audit chain broken at row 2") && l.contains("edited")),
        "{text}"
    );
    assert_eq!(fails.len(), 3, "{text}");
    assert!(out.stderr.contains("3 problems found"), "{}", out.stderr);
    // On PATH, but after the real tools.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = doctor(&env, &dir, &format!("/usr/bin:/bin:{}", dir.display()));
    out.expect_code(1);
    assert!(
        out.out()
            .contains("is on PATH after the real rm (/usr/bin/rm)"),
        "{}",
        out.out()
    );
}

/// A fresh install (nothing has run yet) is not a problem: doctor says so as information
/// and passes.
#[test]
fn doctor_on_a_fresh_install_informs_and_passes() {
    let env = TestEnv::new();
    let out = env.monitor().arg("doctor").run();
    out.expect_code(0);
    let text = out.out();
    assert!(text.contains("info  state dir"), "{text}");
    assert!(text.contains("does not exist yet"), "{text}");
    assert!(text.contains("info  no database"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}

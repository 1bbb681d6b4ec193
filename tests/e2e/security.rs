//! The claims of SECURITY.md that other modules do not already show: decisions are
//! recorded with the real OS user whatever `$USER` says, another user can neither read the
//! state nor decide, every file of the state dir is private, and a decision written straight
//! into the database (past `monitor` and the audit chain) is reported by `monitor doctor`.

use headless_run_e2e::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;

fn me() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| format!("uid:{uid}"))
}

fn parked_rm(env: &TestEnv, file: &str) -> String {
    std::fs::write(env.work().join(file), "x").unwrap();
    env.shim().args(["rm", "-i", file]).run().expect_code(90);
    s(&env.pending_approval(), "approval_id").to_owned()
}

#[test]
fn decisions_are_recorded_with_the_real_user_whatever_user_says() {
    let env = TestEnv::new();
    let id = parked_rm(&env, "a.txt");
    env.monitor()
        .env("USER", "mallory")
        .env("LOGNAME", "mallory")
        .args(["decide", &id, "y"])
        .run()
        .expect_code(0);
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "decided_by"), me());
    assert_eq!(s(ap, "decision_channel"), "cli");
    let audit = env.audit_of(&id);
    assert_eq!(s(audit.last().unwrap(), "actor"), me());
}

#[test]
fn another_user_can_neither_read_the_state_nor_decide() {
    if !running_as_root("another_user_can_neither_read_the_state_nor_decide") {
        return;
    }
    let env = TestEnv::new();
    let id = parked_rm(&env, "b.txt");
    // The test's own temp dir is opened up; the state dir inside stays 0700.
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for args in [vec!["approvals"], vec!["decide", id.as_str(), "y"]] {
        let mut cmd = env.monitor();
        cmd.current_dir("/").args(&args);
        cmd.cmd.uid(65534).gid(65534);
        let out = cmd.run();
        out.expect_code(1);
        assert!(
            out.stderr.to_lowercase().contains("permission denied")
                || out.stderr.contains("unable to open"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(s(&env.approvals()[0], "status"), "pending");
}

#[test]
fn every_file_in_the_state_dir_is_private() {
    let env = TestEnv::new();
    let id = parked_rm(&env, "c.txt");
    env.decide(&id, "y").expect_code(0);
    env.shim().args(["rm", "-i", "c.txt"]).run().expect_code(0);
    let mut seen = 0;
    let mut stack = vec![env.state()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            let mode = meta.mode() & 0o777;
            if meta.is_dir() {
                assert_eq!(mode, 0o700, "{}", entry.path().display());
                stack.push(entry.path());
            } else {
                assert_eq!(mode, 0o600, "{}", entry.path().display());
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 6,
        "state.db, its WAL and index, both logs, the run logs"
    );
}

#[test]
fn a_decision_written_past_monitor_is_reported_by_doctor() {
    let env = TestEnv::new();
    let id = parked_rm(&env, "d.txt");
    // Raw: a decision written into the file past monitor, for doctor to find.
    env.raw_db()
        .execute(
            "UPDATE approvals SET status = 'approved', chosen_value = 'y', decided_by = 'root'",
            [],
        )
        .unwrap();
    let out = env.monitor().arg("doctor").run();
    out.expect_code(1);
    assert!(out.out().contains(&id), "{}", out.out());
    assert!(
        out.out().contains("no decision like that was recorded"),
        "{}",
        out.out()
    );
}

/// SECURITY.md names a test for each claim: every one named must exist, so the document
/// cannot quietly outlive its evidence.
#[test]
fn every_test_security_md_names_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("SECURITY.md")).unwrap();
    let mut sources = String::new();
    let mut stack = vec![
        root.join("tests/e2e"),
        root.join("shared/src"),
        root.join("shared/tests"),
        root.join("shim/src"),
        root.join("monitor/src"),
    ];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                sources.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut checked = 0;
    for quoted in doc.split('`').skip(1).step_by(2) {
        let Some(name) = quoted.rsplit("::").next().filter(|_| quoted.contains("::")) else {
            continue;
        };
        if name == "*"
            || quoted == "module::test"
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        {
            continue;
        }
        assert!(
            sources.contains(&format!("fn {name}(")),
            "SECURITY.md names `{quoted}`, which does not exist"
        );
        checked += 1;
    }
    // Bare names listed after a module (`deleted_rows_are_detected`) are checked too.
    for name in [
        "deleted_rows_are_detected",
        "rehashing_an_edit_still_breaks_the_next_link",
        "a_decision_written_past_the_audit_chain_is_found",
        "lines_that_are_not_events",
    ] {
        assert!(sources.contains(&format!("fn {name}(")), "{name}");
    }
    assert!(checked >= 20, "only {checked} tests found in SECURITY.md");
}

/// Issue 15 item 12: `decided_by` is the operator's user name also where users come from
/// NSS rather than /etc/passwd (LDAP, sssd): here libnss-extrausers, in a private mount
/// namespace whose nsswitch.conf adds it, with a user /etc/passwd does not have.
#[test]
fn decided_by_names_a_user_that_only_nss_knows() {
    if !running_as_root("decided_by_names_a_user_that_only_nss_knows") {
        return;
    }
    need("unshare", "util-linux");
    need("setpriv", "util-linux");
    assert!(
        Path::new("/usr/lib/libnss_extrausers.so.2").exists()
            || Path::new("/usr/lib/x86_64-linux-gnu/libnss_extrausers.so.2").exists(),
        "libnss-extrausers is not installed: apt-get install libnss-extrausers (as .ci/run does)"
    );
    let env = TestEnv::new();
    let uid = 45678;
    assert!(
        !std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .contains(":45678:"),
        "uid {uid} must be unknown to /etc/passwd"
    );
    let nss = env.path().join("nss");
    let extra = nss.join("extrausers");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        nss.join("nsswitch.conf"),
        "passwd: files extrausers\ngroup: files extrausers\nshadow: files\nhosts: files\n",
    )
    .unwrap();
    std::fs::write(
        extra.join("passwd"),
        format!("ldapuser:x:{uid}:{uid}:LDAP user:/nonexistent:/bin/sh\n"),
    )
    .unwrap();
    std::fs::write(extra.join("group"), format!("ldapgroup:x:{uid}:\n")).unwrap();
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in [env.state(), env.work()] {
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), Some(uid)).unwrap();
    }
    let script = format!(
        r#"set -e
mount --bind {nss}/nsswitch.conf /etc/nsswitch.conf
mount --bind {extra} /var/lib/extrausers
as() {{ setpriv --reuid={uid} --regid={uid} --clear-groups "$@"; }}
cd {work}
as env HEADLESS=1 {shim} -- sh -c 'printf "Go? [y/N] "; read a' || test $? = 90
id=$(as {monitor} approvals --json | sed -n 's/.*"approval_id":"\(AP-[A-Z0-9]*\)".*/\1/p')
as {monitor} decide "$id" y
"#,
        nss = nss.display(),
        extra = extra.display(),
        work = env.work().display(),
        shim = bin("headless-run").display(),
        monitor = bin("monitor").display(),
    );
    let out = env
        .command("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("HEADLESS_RUN_HOME", env.state())
        .run();
    out.expect_code(0);
    assert!(out.out().contains("by ldapuser"), "{}", out.context());
    let a = &env.approvals()[0];
    assert_eq!(s(a, "decided_by"), "ldapuser", "{a:#?}");
}

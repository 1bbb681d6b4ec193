//! The ecosystem's conventions (issue 15 item 12): shell completions and man pages from the
//! same clap definitions the parsers use, installed by `scripts/install`, which also takes
//! prebuilt binaries (`--from`), uninstalls, and refuses a flag without its value.

use headless_run_e2e::*;
use std::path::Path;
use std::process::Command;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install")
}

#[test]
fn bash_completion_of_monitor_completes_subcommands_and_flags() {
    let env = TestEnv::new();
    let out = env.monitor().args(["completions", "bash"]).run();
    out.expect_code(0);
    let file = env.path().join("monitor.bash");
    std::fs::write(&file, out.stdout.as_slice()).unwrap();
    // Bash itself, completing `monitor dec` and `monitor decide --rem`.
    let complete = |words: &str, cword: usize| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; _monitor monitor \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"; echo \"${{COMPREPLY[@]}}\"",
                file.display()
            ))
            .output()
            .expect("bash");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        complete("monitor dec", 1)
            .split_whitespace()
            .any(|w| w == "decide")
    );
    assert!(
        complete("monitor decide --rem", 2)
            .split_whitespace()
            .any(|w| w == "--remember")
    );
    // headless-run's, in zsh and fish, from the shim's own definition.
    let zsh = env
        .monitor()
        .args(["completions", "zsh", "--for", "headless-run"])
        .run();
    zsh.expect_code(0);
    assert!(
        zsh.out().starts_with("#compdef headless-run"),
        "{}",
        zsh.out()
    );
    assert!(zsh.out().contains("--on-prompt"));
    let fish = env.monitor().args(["completions", "fish"]).run();
    assert!(fish.out().contains("complete -c monitor"), "{}", fish.out());
    // Unknown shells and binaries are usage errors naming the valid ones.
    let bad = env.monitor().args(["completions", "tcsh"]).run();
    bad.expect_code(2);
    assert!(bad.stderr.contains("bash"), "{}", bad.stderr);
    env.monitor()
        .args(["completions", "bash", "--for", "rm"])
        .run()
        .expect_code(2);
}

#[test]
fn man_pages_render_for_monitor_its_subcommands_and_headless_run() {
    let man = need("man", "man-db");
    let env = TestEnv::new();
    let dir = env.path().join("man1");
    let out = env.monitor().arg("man").arg(&dir).run();
    out.expect_code(0);
    for page in [
        "monitor.1",
        "monitor-decide.1",
        "monitor-worker.1",
        "headless-run.1",
    ] {
        assert!(dir.join(page).is_file(), "{page}: {}", out.out());
    }
    let rendered = Command::new(&man)
        .arg("-l")
        .arg(dir.join("headless-run.1"))
        .env("MANPAGER", "cat")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(text.contains("NAME"), "{text}");
    assert!(text.contains("--stall-timeout"), "{text}");
    assert!(
        text.contains("approval"),
        "the after-help is in the page: {text}"
    );
}

#[test]
fn the_install_script_installs_prebuilt_binaries_with_pages_and_completions_and_uninstalls() {
    let env = TestEnv::new();
    let prefix = env.path().join("prefix");
    let run = |args: &[&str]| {
        Command::new("sh")
            .arg(script())
            .args(args)
            .env("HOME", env.path())
            .output()
            .unwrap()
    };
    let from = target_dir();
    let out = run(&[
        "--prefix",
        prefix.to_str().unwrap(),
        "--from",
        from.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    for f in [
        "bin/headless-run",
        "bin/monitor",
        "share/man/man1/monitor.1",
        "share/man/man1/headless-run.1",
        "share/bash-completion/completions/monitor",
        "share/zsh/site-functions/_headless-run",
        "share/fish/vendor_completions.d/monitor.fish",
    ] {
        assert!(prefix.join(f).is_file(), "{f} missing");
    }
    // The installed shim runs tools.
    let ok = Command::new(prefix.join("bin/headless-run"))
        .args(["--", "true"])
        .env("HEADLESS_RUN_HOME", env.state())
        .env_remove("CI")
        .env_remove("HEADLESS")
        .status()
        .unwrap();
    assert!(ok.success());
    // A flag without its value, an unknown flag, a --from without binaries.
    for (args, code) in [
        (vec!["--prefix"], 2),
        (vec!["--from"], 2),
        (vec!["--prefx", "x"], 2),
        (
            vec![
                "--prefix",
                prefix.to_str().unwrap(),
                "--from",
                "/nonexistent",
            ],
            1,
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why");
    }
    // Uninstall removes what was installed, and only that.
    std::fs::write(prefix.join("bin/other-tool"), "keep").unwrap();
    let out = run(&["--prefix", prefix.to_str().unwrap(), "--uninstall"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!prefix.join("bin/monitor").exists());
    assert!(!prefix.join("share/man/man1/monitor-decide.1").exists());
    assert!(
        !prefix
            .join("share/bash-completion/completions/monitor")
            .exists()
    );
    assert!(prefix.join("bin/other-tool").exists());
}

#[test]
fn every_subcommand_explains_itself_with_an_example() {
    let env = TestEnv::new();
    for sub in [
        "runs",
        "approvals",
        "show",
        "decide",
        "wait",
        "logs",
        "worker",
        "reconcile",
        "cancel",
        "restart",
        "install",
        "doctor",
        "gc",
        "policies",
        "config",
        "completions",
        "man",
    ] {
        let out = env.monitor().args([sub, "--help"]).run();
        out.expect_code(0);
        assert!(
            out.out().contains("Example"),
            "monitor {sub} --help: {}",
            out.out()
        );
    }
    let out = env.command(bin("headless-run")).arg("--help").run();
    out.expect_code(0);
    assert!(out.out().contains("Examples:"), "{}", out.out());
}

/// Status words are coloured on a terminal, or with --color always; never with
/// --color never, NO_COLOR, or into a pipe.
#[test]
fn status_words_are_coloured_only_where_wanted() {
    let env = TestEnv::new();
    env.shim().arg("false").run().expect_code(1);
    let red = "\x1b[31mfailed\x1b[0m";
    let piped = env.monitor().arg("runs").run();
    assert!(piped.out().contains("failed") && !piped.out().contains('\x1b'));
    let always = env.monitor().args(["runs", "--color", "always"]).run();
    assert!(always.out().contains(red), "{:?}", always.out());
    let never = env.monitor().args(["runs", "--color", "never"]).run();
    assert!(!never.out().contains('\x1b'));
    let on_tty = |no_color: Option<&str>| {
        let mut cmd = std::process::Command::new(bin("monitor"));
        cmd.arg("runs")
            .env("HEADLESS_RUN_HOME", env.state())
            .env("TERM", "xterm")
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let (code, out) = run_in_pty(cmd, None, std::time::Duration::from_secs(20));
        assert_eq!(code, Some(0));
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(on_tty(None).contains(red), "a terminal gets colour");
    assert!(
        !on_tty(Some("1")).contains("\x1b[31m"),
        "NO_COLOR is respected"
    );
    env.monitor()
        .args(["runs", "--color", "sometimes"])
        .run()
        .expect_code(2);
}

//! What is not a prompt, and what a prompt's question is, through the real shim and real
//! tools. Pagers print everything and end as they do in CI without the shim (`git log`,
//! `man`: the pager variables in the tool's environment, `man`'s bold as plain text; `less`
//! and `more` run directly: writing to a pipe; chosen by the caller: paged through to its
//! end). REPLs at their bare prompt (`python3`, `sqlite3`, `sh`, `bash -i`) and raw-mode
//! reads with nothing asked (`bash -c 'read -e'`, `bc -q`) get EOF at once; IPython's
//! "really exit?" after it gets EOF again. Programs that wait for keys with nothing asked
//! (vim, nano, `git commit`'s editor, `top`, `htop`) are ended within seconds, as without a
//! terminal, the run saying why; `watch`, which reads nothing, runs until `--timeout`.
//! gpg's pinentry dialog is a refused secret (93) and no pinentry is left behind. None of
//! these leaves an approval row. An approval's question is the prompt's own lines: apt's
//! `N:` notices go to its context, terraform's question block stays whole.

use headless_run_e2e::*;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The variables that choose a pager, removed from the outside so that each test sees the
/// shim's own choice (`LESS` too: it changes how a `less` that does run behaves).
const PAGER_VARS: [&str; 8] = [
    "PAGER",
    "GIT_PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "GH_PAGER",
    "AWS_PAGER",
    "PSQL_PAGER",
    "LESS",
];

/// The shim in headless mode, no pager variables from the outside, and a stall timeout
/// short enough that a tool left waiting fails its test in seconds, not ten minutes.
fn shim(env: &TestEnv) -> Cmd {
    let mut c = env.shim();
    for v in PAGER_VARS {
        c.env_remove(v);
    }
    c.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["--stall-timeout", "20s"]);
    c
}

/// Nothing was asked: the tool ended by itself with `code`, and there is no approval row
/// (`monitor approvals --status all`) and no approval event.
#[track_caller]
fn expect_nothing_asked(env: &TestEnv, out: &Outcome, code: i32) {
    out.expect_code(code);
    let approvals = env.approvals();
    assert!(approvals.is_empty(), "{approvals:#?}\n{}", out.context());
    let run = env.only_run();
    assert_eq!(n(&run, "exit_code"), i64::from(code), "{run:#?}");
    if code == 0 {
        assert_eq!(s(&run, "status"), "completed", "{run:#?}");
    }
    assert!(
        !env.log_event_names()
            .iter()
            .any(|e| e.starts_with("approval")),
        "nothing was asked"
    );
}

/// The lines of `text` as a terminal shows them: escape sequences (CSI, `ESC =`, `ESC >`)
/// removed, a carriage return inside a line starting it over.
fn lines_of(text: &str) -> Vec<String> {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.next_if_eq(&'[').is_some() {
                    while chars.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
                } else {
                    chars.next();
                }
            }
            // A carriage return not ending a line starts it over, as a terminal draws it.
            '\r' if chars.peek() != Some(&'\n') => {
                plain.truncate(plain.rfind('\n').map_or(0, |i| i + 1));
            }
            '\r' => {}
            c => plain.push(c),
        }
    }
    plain.lines().map(str::to_owned).collect()
}

/// A repository in `dir` whose `main` holds commits "commit 1" … "commit N", oldest first,
/// made by one `git fast-import`.
fn repo_with_commits(dir: &Path, count: usize) {
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1");
        c
    };
    assert!(
        git(&["init", "-q", "-b", "main"])
            .status()
            .unwrap()
            .success()
    );
    let mut stream = String::new();
    for i in 1..=count {
        let msg = format!("commit {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter T <t@example.com> {} +0000\ndata {}\n{msg}\n",
            1_700_000_000 + i,
            msg.len()
        ));
    }
    let mut child = git(&["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn git_log_longer_than_the_screen_is_printed_whole_not_paged() {
    need("git", "git");
    let env = TestEnv::new();
    repo_with_commits(&env.work(), 150);
    let out = shim(&env).args(["git", "log", "--format=%s"]).run();
    expect_nothing_asked(&env, &out, 0);
    let subjects = lines_of(&out.out());
    assert_eq!(subjects.len(), 150, "{}", out.out());
    assert_eq!(subjects[0], "commit 150");
    assert_eq!(subjects[149], "commit 1");
}

#[test]
fn man_page_longer_than_the_screen_is_printed_whole_not_paged() {
    need("man", "man-db");
    let env = TestEnv::new();
    let mut page = String::from(
        ".TH PAGER-TEST 1\n.SH NAME\npager-test \\- a page longer than a screen\n.SH DESCRIPTION\n",
    );
    for i in 1..=120 {
        page.push_str(&format!(".PP\nParagraph {i} of the description.\n"));
    }
    page.push_str(".SH SEE ALSO\nThe last line of the page.\n");
    std::fs::write(env.work().join("pager-test.1"), page).unwrap();
    let out = shim(&env).args(["man", "-l", "pager-test.1"]).run();
    expect_nothing_asked(&env, &out, 0);
    let text = out.out();
    for want in [
        "Paragraph 1 of the description.",
        "Paragraph 60 of the description.",
        "Paragraph 120 of the description.",
        "The last line of the page.",
    ] {
        assert!(text.contains(want), "{want:?} missing from {text}");
    }
}

#[test]
fn pager_variables_are_set_in_headless_mode_unless_the_caller_set_them() {
    need("col", "bsdextrautils");
    let env = TestEnv::new();
    let names = [
        "PAGER",
        "GIT_PAGER",
        "MANPAGER",
        "SYSTEMD_PAGER",
        "GH_PAGER",
        "AWS_PAGER",
        "PSQL_PAGER",
        "LESS",
    ];
    let out = shim(&env)
        .env("PAGER", "more")
        .env("GIT_PAGER", "")
        .arg(tool())
        .arg("env")
        .args(names)
        .run();
    out.expect_code(0);
    assert_eq!(
        out.out(),
        "PAGER=more\nGIT_PAGER=\nMANPAGER=col -b -p -x\nSYSTEMD_PAGER=cat\nGH_PAGER=cat\nAWS_PAGER=cat\nPSQL_PAGER=cat\nLESS=<unset>\n"
    );
    // Interactive mode: the tool has the caller's terminal, and its pager with it.
    let mut cmd = env.command(bin("headless-run"));
    for v in PAGER_VARS {
        cmd.env_remove(v);
    }
    let out = cmd
        .env("HEADLESS", "0")
        .arg(tool())
        .args(["env", "PAGER", "GIT_PAGER"])
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "PAGER=<unset>\nGIT_PAGER=<unset>\n");
}

/// `lines.txt` in the work dir: "line 1" … "line N".
fn numbered_file(env: &TestEnv, count: usize) -> PathBuf {
    let path = env.work().join("lines.txt");
    let text: String = (1..=count).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

#[track_caller]
fn assert_every_line_shown(out: &Outcome, count: usize) {
    let shown = lines_of(&out.out());
    let missing: Vec<usize> = (1..=count)
        .filter(|i| {
            let want = format!("line {i}");
            !shown.contains(&want)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "lines {missing:?} never shown:\n{}",
        out.out()
    );
}

#[test]
fn less_run_directly_shows_every_line_not_asked() {
    need("less", "less");
    let env = TestEnv::new();
    numbered_file(&env, 300);
    let out = shim(&env).args(["less", "lines.txt"]).run();
    expect_nothing_asked(&env, &out, 0);
    assert_every_line_shown(&out, 300);
}

#[test]
fn a_pager_the_caller_chose_is_paged_through_not_asked() {
    need("git", "git");
    need("less", "less");
    let env = TestEnv::new();
    repo_with_commits(&env.work(), 120);
    let out = shim(&env)
        .env("GIT_PAGER", "less")
        .args(["git", "log", "--format=%s"])
        .run();
    expect_nothing_asked(&env, &out, 0);
    let shown = lines_of(&out.out());
    for want in ["commit 120", "commit 60", "commit 1"] {
        assert!(
            shown.iter().any(|l| l == want),
            "{want:?} never shown:\n{}",
            out.out()
        );
    }
}

/// How `program ARGS </dev/null` ends without the shim.
fn exit_code_without_the_shim(program: &str, args: &[&str]) -> Option<i32> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run without the shim")
        .code()
}

#[test]
fn python3_repl_with_nothing_on_stdin_gets_eof_and_exits_0() {
    need("python3", "python3");
    assert_eq!(exit_code_without_the_shim("python3", &[]), Some(0));
    let env = TestEnv::new();
    let started = Instant::now();
    let out = shim(&env).arg("python3").run();
    expect_nothing_asked(&env, &out, 0);
    assert!(out.out().contains(">>> "), "{}", out.out());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn sqlite3_repl_with_nothing_on_stdin_gets_eof_and_exits_0() {
    need("sqlite3", "sqlite3");
    assert_eq!(exit_code_without_the_shim("sqlite3", &[]), Some(0));
    let env = TestEnv::new();
    let out = shim(&env).arg("sqlite3").run();
    expect_nothing_asked(&env, &out, 0);
    assert!(out.out().contains("sqlite> "), "{}", out.out());
}

#[test]
fn shell_prompts_with_nothing_on_stdin_get_eof_and_exit_0() {
    let env = TestEnv::new();
    // dash reads lines (canonical mode) after a bare `$ ` or `# `.
    let out = shim(&env).arg("sh").run();
    expect_nothing_asked(&env, &out, 0);
    let shown = out.out();
    assert!(
        shown == "$ " || shown.starts_with("$ ") || shown.starts_with("# "),
        "{shown:?}"
    );

    // bash with readline (raw mode) after `bash-5.2# `.
    let env = TestEnv::new();
    let out = shim(&env)
        .env_remove("PS1")
        .args(["bash", "--norc", "--noprofile", "-i"])
        .run();
    expect_nothing_asked(&env, &out, 0);
    assert!(out.out().contains("bash-"), "{}", out.out());
}

#[test]
fn a_raw_mode_read_with_nothing_asked_gets_eof_at_once() {
    let env = TestEnv::new();
    let started = Instant::now();
    let out = shim(&env)
        .args(["bash", "-c", "read -e x; echo \"read returned $?\""])
        .run();
    expect_nothing_asked(&env, &out, 0);
    assert!(out.out().contains("read returned 1"), "{}", out.out());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bc_with_nothing_on_stdin_gets_eof_at_once() {
    need("bc", "bc");
    assert_eq!(exit_code_without_the_shim("bc", &["-q"]), Some(0));
    let env = TestEnv::new();
    let started = Instant::now();
    let out = shim(&env).args(["bc", "-q"]).run();
    expect_nothing_asked(&env, &out, 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_bare_prompt_under_a_question_is_still_asked() {
    let env = TestEnv::new();
    let out = shim(&env)
        .args([
            "bash",
            "-c",
            "echo 'Which environment should be deployed?'; read -e -p '> ' x; echo \"got $x\"",
        ])
        .run();
    out.expect_code(90);
    let a = env.pending_approval();
    assert_eq!(s(&a, "prompt_line"), ">");
    assert!(
        s(&a, "question").contains("Which environment should be deployed?"),
        "{a:#?}"
    );
}

/// A raw-mode tool (as `tty.setraw`) that writes `shown` and waits for one key.
fn raw_reader(shown: &str) -> Vec<String> {
    let script = format!(
        "import os, sys, tty; tty.setraw(0); os.write(1, {shown:?}.encode()); k = os.read(0, 1); os.write(1, b'key %r\\r\\n' % k)"
    );
    vec!["python3".into(), "-c".into(), script]
}

#[test]
fn a_raw_mode_menu_with_the_cursor_below_it_is_asked() {
    let env = TestEnv::new();
    let out = shim(&env)
        .args(raw_reader(
            "Deploy where?\r\n1. staging\r\n2. production\r\n",
        ))
        .run();
    out.expect_code(90);
    let a = env.pending_approval();
    let values: Vec<&str> = arr(&a, "options_json")
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["1", "2"], "{a:#?}");
}

#[test]
fn a_raw_mode_question_above_the_cursor_is_asked() {
    let env = TestEnv::new();
    let out = shim(&env)
        .args(raw_reader("Overwrite the release? [y/N]\r\n"))
        .run();
    out.expect_code(90);
    let a = env.pending_approval();
    assert_eq!(s(&a, "prompt_line"), "Overwrite the release? [y/N]");
}

/// The pinentry processes that the gpg-agent of `home` started, by pid.
fn pinentries_of(home: &Path) -> Vec<i32> {
    let home = home.to_string_lossy().into_owned();
    let cmdline = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    };
    let ppid = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse::<i32>()
                    .ok()
            })
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("pinentry"))
                && alive(pid)
                && ppid(pid).is_some_and(|agent| {
                    let c = cmdline(agent);
                    c.contains("gpg-agent") && c.contains(&home)
                })
        })
        .collect()
}

/// Ends the gpg-agent of a test's `GNUPGHOME` (and any pinentry it still has) however the
/// test went.
struct Agent(PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        for pid in pinentries_of(&self.0) {
            // SAFETY: kill(2) of a pid just read from /proc, started for this test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = Command::new("gpgconf")
            .args(["--kill", "gpg-agent"])
            .env("GNUPGHOME", &self.0)
            .status();
    }
}

#[test]
fn gpg_pinentry_dialog_is_a_refused_secret_and_leaves_no_pinentry() {
    need("gpg", "gnupg");
    need("gpg-agent", "gpg-agent");
    need("gpgconf", "gpgconf");
    let pinentry = need("pinentry-curses", "pinentry-curses");
    let env = TestEnv::new();
    let home = env.path().join("gnupg");
    std::fs::create_dir(&home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        home.join("gpg-agent.conf"),
        format!("pinentry-program {}\n", pinentry.display()),
    )
    .unwrap();
    let _agent = Agent(home.clone());
    std::fs::write(env.work().join("secret.txt"), "the launch codes\n").unwrap();
    let out = shim(&env)
        .env("GNUPGHOME", &home)
        .args(["gpg", "--symmetric", "secret.txt"])
        .run();
    out.expect_code(93);
    assert!(env.approvals().is_empty(), "a secret is never an approval");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert!(s(&run, "reason").contains("Passphrase"), "{run:#?}");
    assert!(
        out.stderr.contains("never types or stores secrets"),
        "{}",
        out.stderr
    );
    assert!(!env.work().join("secret.txt.gpg").exists());
    let mut left = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            left = pinentries_of(&home);
            left.is_empty()
        }),
        "pinentry left behind: {left:?}"
    );
}

/// The one pending approval `cmd` stops at (exit 90).
fn approval_of(env: &TestEnv, cmd: &mut Cmd) -> Map<String, Value> {
    let out = cmd.run();
    out.expect_code(90);
    let approvals = env.approvals();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    approvals[0].clone()
}

#[test]
fn apt_notices_go_to_the_context_not_the_question() {
    for blank in [false, true] {
        let env = TestEnv::new();
        let mut cmd = shim(&env);
        cmd.arg(fixture("prompts/apt-get"));
        if blank {
            cmd.arg("--blank");
        }
        let a = approval_of(&env, &mut cmd);
        assert_eq!(
            s(&a, "question"),
            "Do you want to continue? [Y/n]",
            "{a:#?}"
        );
        assert_eq!(s(&a, "default_value"), "yes");
        let context = s(&a, "context");
        assert!(
            context.contains("N: Ignoring file 'mirror.list.disabled-by-ci'")
                && context.contains("N: Ignoring file 'backports.sources.old'")
                && context.contains("After this operation"),
            "{context}"
        );
        assert!(!context.contains("Do you want"), "{context}");
    }
}

#[test]
fn terraforms_question_block_stays_whole_and_the_plan_is_context() {
    let env = TestEnv::new();
    let a = approval_of(&env, shim(&env).arg(fixture("prompts/terraform")));
    assert_eq!(s(&a, "rule_name"), "builtin:terraform");
    assert_eq!(
        s(&a, "question"),
        "Do you want to perform these actions?\nTerraform will perform the actions described above.\nOnly 'yes' will be accepted to approve.\nEnter a value:"
    );
    let context = s(&a, "context");
    assert!(context.contains("Plan: 1 to add"), "{context}");
    assert!(!context.contains("Only 'yes'"), "{context}");
}

/// A private apt world under `dir`: a `file:` repository holding `hr-demo-a`, which depends
/// on `hr-demo-b` (so installing it asks), its own lists, cache and dpkg status, a
/// sources.list.d with a file apt ignores with a notice, and no dpkg to run. Returns the
/// `-o` options that point apt-get at it.
fn apt_sandbox(dir: &Path) -> Vec<String> {
    for d in [
        "repo",
        "parts",
        "build",
        "state/lists/partial",
        "cache/archives/partial",
    ] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("status"), "").unwrap();
    std::fs::write(dir.join("parts/mirror.list.disabled-by-ci"), "").unwrap();
    let mut packages = String::new();
    for (name, depends) in [("hr-demo-a", "Depends: hr-demo-b\n"), ("hr-demo-b", "")] {
        let root = dir.join("build").join(name);
        std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
        let control = format!(
            "Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.com>\n{depends}Description: headless-run test package\n"
        );
        std::fs::write(root.join("DEBIAN/control"), &control).unwrap();
        let deb = dir.join("repo").join(format!("{name}.deb"));
        let built = Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&root)
            .arg(&deb)
            .stdout(Stdio::null())
            .status()
            .expect("dpkg-deb");
        assert!(built.success());
        let size = std::fs::metadata(&deb).unwrap().len();
        packages.push_str(&format!(
            "{control}Filename: ./{name}.deb\nSize: {size}\n\n"
        ));
    }
    std::fs::write(dir.join("repo/Packages"), packages).unwrap();
    std::fs::write(
        dir.join("sources.list"),
        format!("deb [trusted=yes] file:{} ./\n", dir.join("repo").display()),
    )
    .unwrap();
    let d = |p: &str| dir.join(p).display().to_string();
    [
        format!("Dir::Etc::sourcelist={}", d("sources.list")),
        format!("Dir::Etc::sourceparts={}", d("parts")),
        format!("Dir::State={}", d("state")),
        format!("Dir::State::status={}", d("status")),
        format!("Dir::Cache={}", d("cache")),
        "Dir::Bin::dpkg=/bin/false".into(),
        "Debug::NoLocking=1".into(),
        "APT::Sandbox::User=root".into(),
        "APT::Get::Assume-Yes=false".into(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_owned(), o])
    .collect()
}

#[test]
fn real_apt_get_notices_go_to_the_context_not_the_question() {
    need("apt-get", "apt");
    need("dpkg-deb", "dpkg");
    let env = TestEnv::new();
    let options = apt_sandbox(&env.path().join("apt"));
    let updated = Command::new("apt-get")
        .args(&options)
        .arg("update")
        .stdin(Stdio::null())
        .output()
        .expect("apt-get update");
    assert!(
        updated.status.success(),
        "{}",
        String::from_utf8_lossy(&updated.stderr)
    );
    let a = approval_of(
        &env,
        shim(&env)
            .arg("apt-get")
            .args(&options)
            .args(["install", "hr-demo-a"]),
    );
    assert_eq!(
        s(&a, "question"),
        "Do you want to continue? [Y/n]",
        "{a:#?}"
    );
    let context = s(&a, "context");
    assert!(
        context.contains("N: Ignoring file 'mirror.list.disabled-by-ci'"),
        "{context}"
    );
    assert!(context.contains("hr-demo-a hr-demo-b"), "{context}");
}

/// A program that waited for keys with nothing asked (an editor, a full-screen program) was
/// ended as without a terminal: the run ended with `code`, `failed`, its reason naming
/// `program` and that nothing was asked; no approval; one stderr line saying so.
#[track_caller]
fn expect_ended_unasked(env: &TestEnv, out: &Outcome, code: i32, program: &str) {
    out.expect_code(code);
    let approvals = env.approvals();
    assert!(approvals.is_empty(), "{approvals:#?}\n{}", out.context());
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed", "{run:#?}");
    assert_eq!(n(&run, "exit_code"), i64::from(code), "{run:#?}");
    let reason = s(&run, "reason");
    assert!(
        reason.contains("nothing asked") && reason.contains(program),
        "{reason}"
    );
    assert!(
        out.stderr.contains("nothing asked") && out.stderr.contains(program),
        "{}",
        out.context()
    );
}

/// `shim` with a terminal type the full-screen programs know.
fn shim_term(env: &TestEnv) -> Cmd {
    let mut c = shim(env);
    c.env("TERM", "xterm");
    c
}

/// Issue 26 item 5: an editor run in CI asks nothing and waits for keys nobody types. Without
/// a terminal vim gives up within 2 s (exit 1) and nano refuses to start (exit 1); through
/// the shim both waited for the stall timeout. Now what waits is ended (TERM) within
/// seconds: vim dies of it (143), nano exits 1; the file is not written.
#[test]
fn an_editor_waiting_for_keys_is_ended_not_left_for_the_stall_timeout() {
    for (editor, package, code) in [("vim", "vim", 143), ("nano", "nano", 1)] {
        need(editor, package);
        let env = TestEnv::new();
        let bare = Command::new(editor)
            .arg("notes.txt")
            .current_dir(env.work())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("the editor without the shim");
        assert_eq!(bare.code(), Some(1), "{editor} without a terminal");
        let out = shim_term(&env).args([editor, "notes.txt"]).run();
        expect_ended_unasked(&env, &out, code, editor);
        assert!(!env.work().join("notes.txt").exists());
    }
}

/// Issue 26 item 5: `git commit` with an editor and no terminal fails as git says (its
/// editor could not run: exit 1, nothing committed); through the shim it waited for the
/// stall timeout in vim. Now vim is ended, and git fails as it does without a terminal.
#[test]
fn git_commit_with_an_editor_fails_as_it_does_without_a_terminal() {
    need("git", "git");
    need("vim", "vim");
    let env = TestEnv::new();
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.args(args)
            .current_dir(env.work())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("EDITOR", "vim")
            .env_remove("GIT_EDITOR")
            .env_remove("VISUAL");
        for who in ["AUTHOR", "COMMITTER"] {
            c.env(format!("GIT_{who}_NAME"), "T")
                .env(format!("GIT_{who}_EMAIL"), "t@example.com");
        }
        c
    };
    assert!(git(&["init", "-q"]).status().unwrap().success());
    std::fs::write(env.work().join("a.txt"), "a\n").unwrap();
    assert!(git(&["add", "a.txt"]).status().unwrap().success());
    let bare = git(&["commit"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(bare.code(), Some(1), "git commit without a terminal");

    let mut cmd = shim_term(&env);
    cmd.env("EDITOR", "vim")
        .env_remove("GIT_EDITOR")
        .env_remove("VISUAL");
    for who in ["AUTHOR", "COMMITTER"] {
        cmd.env(format!("GIT_{who}_NAME"), "T")
            .env(format!("GIT_{who}_EMAIL"), "t@example.com");
    }
    let out = cmd.args(["git", "commit"]).run();
    expect_ended_unasked(&env, &out, 1, "vim");
    assert!(
        out.out().contains("problem with the editor 'vim'"),
        "{}",
        out.context()
    );
    let head = git(&["rev-parse", "--verify", "-q", "HEAD"])
        .output()
        .unwrap();
    assert!(!head.status.success(), "nothing was committed");
}

/// Issue 26 item 5: a full-screen program that redraws every second and waits for keys,
/// asking nothing, never went quiet long enough for the stall timeout: it ran until the
/// hard timeout. Without a terminal both end at once (`top` fails, `htop` quits at EOF).
/// Both are ended (TERM) within seconds: `top` draws with its cursor hidden, `htop` on the
/// alternate screen; each exits 0 when told to end, and reports 143, as a terminated tool
/// does.
#[test]
fn a_full_screen_program_redrawing_every_second_is_ended_not_run_for_ever() {
    for (argv, package) in [
        (&["top", "-d", "1"][..], "procps"),
        (&["htop", "-d", "10"][..], "htop"),
    ] {
        need(argv[0], package);
        let env = TestEnv::new();
        let bare = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("without the shim");
        assert!(
            bare.code().is_some(),
            "{argv:?} ends by itself without a terminal"
        );
        let out = shim_term(&env)
            .args(["--timeout", "45s", "--"])
            .args(argv)
            .run();
        expect_ended_unasked(&env, &out, 143, argv[0]);
    }
}

/// `watch` sleeps between runs of its command and never reads its terminal: it waits for
/// nothing, and without a terminal it runs for ever too. It is left to `--timeout`.
#[test]
fn watch_waits_for_no_keys_and_runs_until_the_timeout_as_without_a_terminal() {
    need("watch", "procps");
    let env = TestEnv::new();
    let out = shim_term(&env)
        .args(["--timeout", "8s", "watch", "-n", "1", "date"])
        .run();
    out.expect_code(124);
    assert!(env.approvals().is_empty());
    assert_eq!(s(&env.only_run(), "status"), "failed_timeout");
}

/// Issue 26 item 5: IPython at EOF asks `Do you really want to exit ([y]/n)?`; without a
/// terminal it reads EOF again and exits 0. Through the shim that question became an
/// approval (exit 90). It is the same process asking right after the EOF it was given: it
/// gets EOF again, and exits 0.
#[test]
fn ipython_asking_to_exit_after_eof_gets_eof_again_not_an_approval() {
    let python = ipython_bin().join("python");
    let env = TestEnv::new();
    let home = env.path().join("ipython");
    let bare = Command::new(&python)
        .args(["-m", "IPython"])
        .env("IPYTHONDIR", &home)
        .stdin(Stdio::null())
        .output()
        .expect("IPython without the shim");
    assert_eq!(bare.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&bare.stdout).contains("Do you really want to exit"),
        "{}",
        String::from_utf8_lossy(&bare.stdout)
    );
    let out = shim_term(&env)
        .env("IPYTHONDIR", &home)
        .arg(&python)
        .args(["-m", "IPython"])
        .run();
    expect_nothing_asked(&env, &out, 0);
    assert!(
        out.out().contains("Do you really want to exit"),
        "{}",
        out.context()
    );
}

/// Issue 26 item 6: `man` through the shim (its pager `cat`, stdout a pipe) wrote groff's
/// overstrike bold (`N\bNA\bA…`) into CI logs. What reaches the pipe is plain text, as
/// `man ls | cat` gives without the shim; `git help` (man underneath) too.
#[test]
fn a_man_page_reaches_a_pipe_as_plain_text_not_overstrike() {
    need("man", "man-db");
    need("git", "git");
    for argv in [&["man", "ls"][..], &["git", "help", "log"]] {
        let env = TestEnv::new();
        let out = shim_term(&env).args(argv).run();
        expect_nothing_asked(&env, &out, 0);
        assert!(
            !out.stdout.contains(&b'\x08'),
            "backspaces in {argv:?}: {:?}",
            &out.out()[..out.out().len().min(400)]
        );
        let lines = lines_of(&out.out());
        for heading in ["NAME", "SYNOPSIS", "DESCRIPTION"] {
            assert!(
                lines.iter().any(|l| l == heading),
                "{heading} in {argv:?}: {}",
                out.out()
            );
        }
    }
}

/// A file of `count` numbered lines, every seventh one wider than the 200-column screen
/// (up to three screen rows), with a tab in each.
fn wide_lines_file(env: &TestEnv, count: usize) -> PathBuf {
    let path = env.work().join("wide.txt");
    let text: String = (1..=count)
        .map(|i| format!("line {i}\t{}.\n", "x".repeat((i % 7) * 90)))
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// Issue 26 item 6: `less FILE` through the shim was paged a screen at a time, and a line
/// wider than the screen that crossed a page's end was drawn in two parts around the
/// pager's prompt (`…x \b:\e[K\r\e[Kxxx…`): in a CI log the carriage return wiped its
/// first part. Run directly, a pager writes to a pipe, as without a terminal: the file,
/// byte for byte, every line once.
#[test]
fn a_pager_run_directly_passes_every_line_once_even_lines_wider_than_the_screen() {
    for (pager, package) in [("less", "less"), ("more", "util-linux")] {
        need(pager, package);
        let env = TestEnv::new();
        let file = wide_lines_file(&env, 400);
        let out = shim_term(&env).args([pager, "wide.txt"]).run();
        expect_nothing_asked(&env, &out, 0);
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = lines_of(&out.out());
        for want in text.lines() {
            let times = shown.iter().filter(|l| *l == want).count();
            assert_eq!(times, 1, "{pager}: {want:?} shown {times} times");
        }
        assert!(out.stdout == text.as_bytes(), "{pager}: {}", out.context());
    }
}

//! Prompt detection through the real shim: real tools (`rm -i`, `cp -i`, `ssh-keygen`,
//! `pip uninstall`, bash `read -p`, python `input()`, node readline) and fixtures that
//! prompt in colour or from a reader thread become approvals (exit 90); secret prompts exit
//! 93 with nothing stored; silence, sleeps, shells waiting on children and reads with
//! nothing asked are not prompts.

use headless_run_e2e::*;
use serde_json::{Map, Value};
use std::path::Path;
use std::process::Command;

/// Asserts the run stopped at a prompt: exit 90, one pending approval with this prompt line
/// and these option values, the run parked as `waiting_approval` with exit code 90, and the
/// `approval_needed` event in both the combined log and the audit chain.
#[track_caller]
fn expect_approval(
    env: &TestEnv,
    out: &Outcome,
    prompt_line: &str,
    values: &[&str],
) -> Map<String, Value> {
    out.expect_code(90);
    let approvals = env.approvals();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    let a = approvals[0].clone();
    assert_eq!(s(&a, "status"), "pending");
    assert_eq!(s(&a, "prompt_line"), prompt_line, "{a:#?}");
    let options = arr(&a, "options_json");
    let got: Vec<&str> = options
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(got, values, "{a:#?}");
    assert!(
        options.iter().all(|o| o.get("keys").is_none()),
        "keys are never stored"
    );
    assert_eq!(s(&a, "request_fingerprint").len(), 64);
    assert_eq!(s(&a, "prompt_fingerprint").len(), 64);
    assert!(a["expires_at"].is_string(), "default ttl 24h");
    let id = s(&a, "approval_id");
    assert!(id.starts_with("AP-"), "{id}");
    // The exact command to copy: this state dir is not monitor's default, so it is named
    // (issue 15 item 5).
    let state = env.state().display().to_string();
    assert!(
        out.stderr
            .contains(&format!("monitor --state-dir {state} decide {id} ")),
        "the exact decide command is printed: {}",
        out.stderr
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "waiting_approval");
    assert_eq!(n(&run, "exit_code"), 90);
    assert_eq!(s(&a, "tool_run_id"), s(&run, "tool_run_id"));
    assert!(run["completed_at"].is_null(), "a parked run has not ended");
    let pid = n(&run, "pid") as i32;
    assert!(
        wait_until(std::time::Duration::from_secs(5), || !alive(pid)),
        "exit mode ends the tool (pid {pid})"
    );
    let needed: Vec<Value> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "approval_needed")
        .collect();
    assert_eq!(needed.len(), 1);
    assert_eq!(needed[0]["approval_id"], id);
    assert_eq!(needed[0]["tool_run_id"], s(&run, "tool_run_id"));
    let audit = env.audit_of(id);
    assert_eq!(s(&audit[0], "event"), "approval_needed");
    a
}

#[test]
fn rm_i_is_an_approval_with_no_as_default() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("a.txt"), "data").unwrap();
    let out = env.shim().args(["rm", "-i", "a.txt"]).run();
    let a = expect_approval(
        &env,
        &out,
        "rm: remove regular file 'a.txt'?",
        &["yes", "no"],
    );
    assert_eq!(s(&a, "default_value"), "no");
    assert_eq!(s(&a, "rule_name"), "builtin:rm");
    assert!(env.work().join("a.txt").exists(), "nothing was answered");
    // The tool's own output went through to stdout unchanged.
    assert_eq!(out.out(), "rm: remove regular file 'a.txt'? ");
}

#[test]
fn cp_i_is_an_approval() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("src"), "new").unwrap();
    std::fs::write(env.work().join("dst"), "old").unwrap();
    let out = env.shim().args(["cp", "-i", "src", "dst"]).run();
    expect_approval(&env, &out, "cp: overwrite 'dst'?", &["yes", "no"]);
    assert_eq!(std::fs::read(env.work().join("dst")).unwrap(), b"old");
}

#[test]
fn ssh_keygen_overwrite_is_an_approval() {
    let env = TestEnv::new();
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(env.work().join("key"))
        .status()
        .expect("ssh-keygen");
    assert!(made.success());
    let out = env
        .shim()
        .args(["ssh-keygen", "-t", "ed25519", "-f", "key"])
        .run();
    let a = expect_approval(&env, &out, "Overwrite (y/n)?", &["yes", "no"]);
    assert!(
        s(&a, "question").contains("key already exists."),
        "the question keeps the line above the prompt: {a:#?}"
    );
}

#[test]
fn ssh_keygen_passphrase_is_a_refused_secret() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["ssh-keygen", "-t", "ed25519", "-f", "newkey"])
        .run();
    expect_secret_refused(&env, &out, "Enter passphrase");
    assert!(out.stderr.contains("-N ''"), "{}", out.stderr);
    assert!(!env.work().join("newkey").exists());
}

#[test]
fn python_getpass_is_a_refused_secret() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "python3",
            "-c",
            "import getpass; print('typed', getpass.getpass('Vault password: '))",
        ])
        .run();
    expect_secret_refused(&env, &out, "Vault password:");
}

#[track_caller]
fn expect_secret_refused(env: &TestEnv, out: &Outcome, prompt: &str) {
    out.expect_code(93);
    assert!(env.approvals().is_empty(), "a secret is never an approval");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 93);
    assert!(s(&run, "reason").contains(prompt), "{run:#?}");
    assert!(s(&run, "reason").contains("secret"), "{run:#?}");
    assert!(
        out.stderr.contains("never types or stores secrets"),
        "{}",
        out.stderr
    );
    assert!(
        !out.out().contains("typed"),
        "nothing was typed into the prompt"
    );
    let id = s(&run, "tool_run_id");
    assert_eq!(env.logged_statuses(id), ["running", "failed"]);
    let end = env.events_about("tool_status_change", id);
    assert_eq!(end[1]["exit_code"], 93);
    assert!(
        end[1]["reason"].as_str().unwrap().contains(prompt),
        "{end:#?}"
    );
    assert!(
        !env.log_event_names()
            .iter()
            .any(|e| e.starts_with("approval")),
        "a secret is never an approval event"
    );
}

#[test]
fn pip_uninstall_in_a_venv_is_an_approval() {
    let env = TestEnv::new();
    let venv = env.work().join("venv");
    let pip = make_venv_with_fake_package(&venv);
    let out = env.shim().arg(&pip).args(["uninstall", "hrfixture"]).run();
    let a = expect_approval(&env, &out, "Proceed (Y/n)?", &["yes", "no"]);
    assert_eq!(s(&a, "default_value"), "yes");
    assert!(installed(&venv));
    // Approved, the same command again: pip is answered and really uninstalls.
    env.decide(s(&a, "approval_id"), "approve").expect_code(0);
    let out = env.shim().arg(&pip).args(["uninstall", "hrfixture"]).run();
    out.expect_code(0);
    assert!(
        out.out().contains("Successfully uninstalled hrfixture"),
        "{}",
        out.context()
    );
    assert!(!installed(&venv), "the package is gone");
    let runs = env.runs();
    assert_eq!(s(&runs[1], "status"), "completed");
    assert_eq!(
        s(&env.approvals()[0], "consumed_by"),
        s(&runs[1], "tool_run_id")
    );
}

/// A venv holding `hrfixture`, installed by hand (a module and its dist-info with a RECORD)
/// so no network is needed. Returns the venv's pip.
fn make_venv_with_fake_package(venv: &Path) -> std::path::PathBuf {
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .expect("python3 -m venv");
    assert!(ok.success(), "python3 -m venv failed");
    let site = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("venv python");
    let site = std::path::PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    std::fs::create_dir_all(site.join("hrfixture")).unwrap();
    std::fs::write(site.join("hrfixture/__init__.py"), "").unwrap();
    let info = site.join("hrfixture-1.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        "Metadata-Version: 2.1\nName: hrfixture\nVersion: 1.0\n",
    )
    .unwrap();
    std::fs::write(info.join("INSTALLER"), "pip\n").unwrap();
    std::fs::write(
        info.join("RECORD"),
        "hrfixture/__init__.py,,\nhrfixture-1.0.dist-info/METADATA,,\nhrfixture-1.0.dist-info/INSTALLER,,\nhrfixture-1.0.dist-info/RECORD,,\n",
    )
    .unwrap();
    assert!(installed(venv));
    venv.join("bin/pip")
}

fn installed(venv: &Path) -> bool {
    Command::new(venv.join("bin/python"))
        .args(["-c", "import hrfixture"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn bash_read_p_is_an_approval() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "bash",
            "-c",
            "read -p 'Continue? [y/N] ' a; echo \"got $a\"",
        ])
        .run();
    let a = expect_approval(&env, &out, "Continue? [y/N]", &["yes", "no"]);
    assert_eq!(s(&a, "rule_name"), "generic:yes-no");
}

#[test]
fn python_input_with_no_rule_offers_abort_and_text() {
    let env = TestEnv::new();
    let out = env.shim().arg(tool()).args(["ask", "Your name? "]).run();
    let a = expect_approval(&env, &out, "Your name?", &["abort"]);
    assert_eq!(a["allows_text"], true);
    assert_eq!(s(&a, "rule_name"), "unknown");
}

#[test]
fn node_readline_is_an_approval() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "node",
            "-e",
            "const rl=require('readline').createInterface({input:process.stdin,output:process.stdout});rl.question('Deploy now? [y/N] ',a=>{console.log('got '+a);rl.close()})",
        ])
        .run();
    expect_approval(&env, &out, "Deploy now? [y/N]", &["yes", "no"]);
}

#[test]
fn a_prompt_in_colour_is_read_as_plain_text() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "bash",
            "-c",
            r#"printf '\033[1;33mProceed?\033[0m \033[32m[Y/n]\033[0m '; read a"#,
        ])
        .run();
    let a = expect_approval(&env, &out, "Proceed? [Y/n]", &["yes", "no"]);
    assert_eq!(s(&a, "default_value"), "yes");
    assert!(!s(&a, "question").contains('\x1b'));
    assert!(!s(&a, "context").contains('\x1b'));
    // Stdout still has the colours: passthrough is byte for byte.
    assert!(out.out().contains("\x1b[1;33m"));
}

#[test]
fn a_reader_thread_behind_a_waiting_main_thread_is_detected() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .arg(tool())
        .args(["reader-thread", "Continue? [y/N] "])
        .run();
    expect_approval(&env, &out, "Continue? [y/N]", &["yes", "no"]);
}

/// Not prompts: the tool finishes by itself, nothing is asked and nothing is typed.
#[track_caller]
fn expect_no_prompt(env: &TestEnv, out: &Outcome) {
    out.expect_code(0);
    assert!(env.approvals().is_empty(), "{:#?}", env.approvals());
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert_eq!(
        env.logged_statuses(s(&run, "tool_run_id")),
        ["running", "completed"]
    );
    assert!(
        !env.log_event_names()
            .iter()
            .any(|e| e.starts_with("approval")),
        "nothing was asked"
    );
}

#[test]
fn a_log_line_in_brackets_before_a_read_is_not_a_question() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "sh",
            "-c",
            "echo 'Build finished (2 warnings)'; read x; echo \"read:[$x]\"",
        ])
        .run();
    // The read gets EOF, as it would from /dev/null, and `read` fails: exit 0 only from
    // the echo after it.
    expect_no_prompt(&env, &out);
    assert_eq!(out.out(), "Build finished (2 warnings)\nread:[]\n");
}

#[test]
fn silent_computing_is_not_a_prompt() {
    let env = TestEnv::new();
    let out = env.shim().arg(tool()).args(["busy", "2"]).run();
    expect_no_prompt(&env, &out);
    assert_eq!(out.out(), "done computing\n");
}

#[test]
fn a_question_shaped_line_before_a_sleep_is_not_a_prompt() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["sh", "-c", "echo 'Proceed? [y/N]'; sleep 1.5; echo done"])
        .run();
    expect_no_prompt(&env, &out);
}

#[test]
fn a_shell_waiting_on_its_child_is_not_a_prompt() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "bash",
            "-c",
            "printf 'Installing: '; python3 -c 'import time; time.sleep(1.5)'; echo done",
        ])
        .run();
    expect_no_prompt(&env, &out);
    assert_eq!(out.out(), "Installing: done\n");
}

#[test]
fn cat_with_no_stdin_is_not_a_prompt() {
    let env = TestEnv::new();
    let out = env.shim().arg("cat").run();
    expect_no_prompt(&env, &out);
}

#[test]
fn a_prompt_that_cannot_be_recorded_is_exit_125() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.state()).unwrap();
    std::fs::write(env.state().join("state.db"), vec![b'Z'; 8192]).unwrap();
    let out = env
        .shim()
        .args(["bash", "-c", "read -p 'Continue? [y/N] ' a"])
        .run();
    out.expect_code(125);
    assert!(
        out.stderr.contains("could not be recorded"),
        "{}",
        out.stderr
    );
}

/// A tool whose `/proc` the shim may not read (non-dumpable, as setuid tools are), with the
/// shim running as an unprivileged user: only the thread states, steady CPU time and a
/// prompt-shaped last line are left to go on.
fn non_dumpable(env: &TestEnv, script: &str) -> Outcome {
    let home = env.path().join("unprivileged");
    std::fs::create_dir_all(&home).unwrap();
    for dir in [env.path(), home.as_path()] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let code = format!("import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n{script}\n");
    std::fs::write(home.join("tool.py"), code).unwrap();
    let mut cmd = env.shim();
    cmd.env("HEADLESS_RUN_HOME", home.join("state"))
        .current_dir(&home)
        .args(["/usr/bin/python3", "tool.py"]);
    std::os::unix::process::CommandExt::uid(&mut cmd.cmd, 65534);
    std::os::unix::process::CommandExt::gid(&mut cmd.cmd, 65534);
    cmd.run()
}

#[test]
fn a_tool_whose_proc_is_refused_is_still_detected_by_the_fallback() {
    if !running_as_root("a_tool_whose_proc_is_refused_is_still_detected_by_the_fallback") {
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: needs /usr/bin/python3, readable by an unprivileged user");
        return;
    }
    let env = TestEnv::new();
    let out = non_dumpable(&env, "print('got', input('Continue? [y/N] '))");
    out.expect_code(90);
    assert!(
        out.stderr.contains("asks \"Continue? [y/N]\""),
        "{}",
        out.stderr
    );
    // Busy on the CPU after a question-shaped line: not a prompt.
    let env = TestEnv::new();
    let out = non_dumpable(
        &env,
        "import time\nprint('Proceed? [y/N] ', end='', flush=True)\nend = time.time() + 1.5\nwhile time.time() < end: pass\nprint('done')",
    );
    out.expect_code(0);
}

#[test]
fn exit_mode_ends_the_tools_whole_group() {
    // The prompting shell has a background child: exit 90 leaves neither behind.
    let env = TestEnv::new();
    let pidfile = env.path().join("bg.pid");
    let out = env
        .shim()
        .args([
            "bash",
            "-c",
            &format!(
                "sleep 300 & echo $! > {}; read -p 'Go on? [y/N] ' x; echo \"got $x\"",
                pidfile.display()
            ),
        ])
        .run();
    expect_approval(&env, &out, "Go on? [y/N]", &["yes", "no"]);
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(5), || !alive(bg)),
        "the background child {bg} outlived exit 90"
    );
}

/// Issue 16 item 2: a question beside an animation (a spinner redrawn every 80 ms) is
/// asked although output never goes idle: the detector's clock is the screen's text with
/// animation removed, not the byte stream.
#[test]
fn a_question_beside_a_spinner_is_asked_and_answered() {
    let env = TestEnv::new();
    let animated = fixture("animated.py");
    let out = env
        .shim()
        .args(["--stall-timeout", "20s"])
        .arg("python3")
        .arg(&animated)
        .run();
    out.expect_code(90);
    let a = env.pending_approval();
    assert_eq!(s(&a, "prompt_line"), "Proceed with the deploy? [y/N]");
    assert_eq!(s(&a, "default_value"), "no");
    // Wait mode: the decision reaches the tool while it keeps animating.
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["--on-prompt", "wait", "--stall-timeout", "20s"])
        .arg("python3")
        .arg(&animated)
        .spawn();
    let a = env.pending_approval();
    std::thread::sleep(std::time::Duration::from_millis(500));
    env.decide(s(&a, "approval_id"), "y").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().contains("got y"), "{}", out.context());
}

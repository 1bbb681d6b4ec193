//! The CI examples (`examples/ci/`, shown in the README), run as written on ephemeral
//! runners: each job run is a fresh Debian root (debootstrap, copied anew and deleted after
//! it), which installs the .deb from a URL with `apt-get`, as a hosted runner would, and
//! reaches a `monitor serve` on loopback with a runner token. The job stops at terraform's
//! question with exit 90; the operator runs the very command the job's log printed, from
//! another machine's shell with an operator token; the job run again, on a new runner,
//! applies. In wait mode (the two lines the example says to uncomment) one run waits for
//! the decision and applies.

use crate::serve::{Served, token};
use headless_run_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/ci")
            .join(name),
    )
    .expect("the example")
}

/// The example with its wait-mode lines uncommented, as its comment says.
fn in_wait_mode(text: &str) -> String {
    text.replace(
        "# HEADLESS_RUN_ON_PROMPT: wait",
        "HEADLESS_RUN_ON_PROMPT: wait",
    )
    .replace("# HEADLESS_RUN_APPROVAL_TTL", "HEADLESS_RUN_APPROVAL_TTL")
}

/// What a project's settings give the job: the server, a runner token, the package's URL.
struct Settings {
    server: String,
    runner_token: String,
    deb_url: String,
    deb_sha256: String,
}

/// Serves one file at every path over plain HTTP on loopback: where the package is
/// published. Ends with the test process.
fn publish(file: PathBuf) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = Arc::new(std::fs::read(&file).unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.debian.binary-package\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
            });
        }
    });
    format!("http://127.0.0.1:{port}/headless-run.deb")
}

/// A new runner: a copy of the Debian root with the runner image's tools (the fixture
/// terraform) and a checkout directory.
fn new_runner(env: &TestEnv, name: &str, checkout: &str) -> PathBuf {
    let root = env.path().join(name);
    let _ = std::fs::remove_dir_all(&root);
    env.command("cp")
        .arg("-a")
        .arg(debian_root())
        .arg(&root)
        .timeout(Duration::from_secs(300))
        .run()
        .expect_code(0);
    std::fs::copy(
        fixture("prompts/terraform"),
        root.join("usr/local/bin/terraform"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join(checkout.trim_start_matches('/'))).unwrap();
    root
}

/// Runs `script` with `bash -e` in `cwd` inside the runner's root, with exactly `vars`,
/// as a runner runs a step.
fn step_in(
    env: &TestEnv,
    root: &Path,
    cwd: &str,
    vars: &[(String, String)],
    script: &str,
) -> Outcome {
    let script = format!("cd {cwd}\n{script}");
    let bash = [
        "/bin/bash",
        "--noprofile",
        "--norc",
        "-eo",
        "pipefail",
        "-c",
    ];
    let argv: Vec<&str> = bash.iter().copied().chain([script.as_str()]).collect();
    chrooted(env, root, vars, &argv)
}

/// Variables, as `NAME`, value.
type Vars = Vec<(String, String)>;

/// A step: its name (or what it `uses:`), its `run:` script, its own `env:`.
type GithubStep = (String, Option<String>, Vars);

/// The map at `v` as variables.
fn vars_of(v: &Value) -> Vars {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The GitHub Actions job's `env:` and steps.
fn github_job(text: &str) -> (Vars, Vec<GithubStep>) {
    let doc: Value = serde_yaml_ng::from_str(text).expect("the example is YAML");
    let job = &doc["jobs"]["deploy"];
    assert!(job["env"].is_object(), "env:");
    let env = vars_of(&job["env"]);
    let steps = job["steps"]
        .as_array()
        .expect("steps:")
        .iter()
        .map(|s| {
            let name = s["name"]
                .as_str()
                .or(s["uses"].as_str())
                .unwrap_or_default()
                .to_owned();
            (
                name,
                s["run"].as_str().map(str::to_owned),
                vars_of(&s["env"]),
            )
        })
        .collect();
    (env, steps)
}

/// `${{ vars.X }}` and `${{ secrets.X }}` as the project's settings give them.
fn expand(value: &str, settings: &Settings) -> String {
    match value {
        "${{ vars.HEADLESS_RUN_SERVER }}" => settings.server.clone(),
        "${{ secrets.HEADLESS_RUN_TOKEN }}" => settings.runner_token.clone(),
        "${{ vars.HEADLESS_RUN_DEB }}" => settings.deb_url.clone(),
        "${{ vars.HEADLESS_RUN_DEB_SHA256 }}" => settings.deb_sha256.clone(),
        v => {
            assert!(!v.contains("${{"), "a setting the test does not give: {v}");
            v.to_owned()
        }
    }
}

const GITHUB_CHECKOUT: &str = "/home/runner/work/repo/repo";
const GITHUB_TEMP: &str = "/home/runner/work/_temp";

/// One run of the GitHub Actions job on a new runner (deleted after it): each step's name,
/// exit code (None: skipped after a failure) and output.
fn github_run(
    env: &TestEnv,
    text: &str,
    settings: &Settings,
    runner: &str,
) -> Vec<(String, Option<i32>, String)> {
    let (job_env, steps) = github_job(text);
    let root = new_runner(env, runner, GITHUB_CHECKOUT);
    std::fs::create_dir_all(root.join(GITHUB_TEMP.trim_start_matches('/'))).unwrap();
    let path_file = format!("{GITHUB_TEMP}/_github_path");
    let env_file = format!("{GITHUB_TEMP}/_github_env");
    std::fs::write(root.join(path_file.trim_start_matches('/')), "").unwrap();
    std::fs::write(root.join(env_file.trim_start_matches('/')), "").unwrap();
    let mut failed = false;
    let mut results = Vec::new();
    for (name, run, step_env) in steps {
        let Some(script) = run else {
            results.push((name, Some(0), String::new())); // `uses:` (the checkout)
            continue;
        };
        if failed {
            results.push((name, None, String::new()));
            continue;
        }
        // $GITHUB_PATH: each line before PATH, the latest first; $GITHUB_ENV: NAME=value.
        let added = std::fs::read_to_string(root.join(path_file.trim_start_matches('/'))).unwrap();
        let mut path: Vec<&str> = added.lines().rev().collect();
        path.push("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        let mut vars = vec![
            ("PATH".to_owned(), path.join(":")),
            ("HOME".to_owned(), "/root".to_owned()),
            ("CI".to_owned(), "true".to_owned()),
            ("GITHUB_ACTIONS".to_owned(), "true".to_owned()),
            ("RUNNER_TEMP".to_owned(), GITHUB_TEMP.to_owned()),
            ("GITHUB_PATH".to_owned(), path_file.clone()),
            ("GITHUB_ENV".to_owned(), env_file.clone()),
        ];
        vars.extend(
            job_env
                .iter()
                .chain(&step_env)
                .map(|(k, v)| (k.clone(), expand(v, settings))),
        );
        let written = std::fs::read_to_string(root.join(env_file.trim_start_matches('/'))).unwrap();
        vars.extend(
            written
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))),
        );
        let out = step_in(env, &root, GITHUB_CHECKOUT, &vars, &script);
        failed |= out.code() != 0;
        results.push((
            name,
            Some(out.code()),
            format!("{}{}", out.out(), out.stderr),
        ));
    }
    // The runner is gone, its temp dir and home with it.
    std::fs::remove_dir_all(&root).unwrap();
    results
}

fn step<'a>(
    results: &'a [(String, Option<i32>, String)],
    name: &str,
) -> &'a (String, Option<i32>, String) {
    results
        .iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no step {name:?}: {results:#?}"))
}

/// The command the job's log says to decide with, as printed (a free-text answer's
/// `VALUE` is the operator's to write: terraform's `yes`).
fn decide_hint(log: &str) -> String {
    let at = log
        .find("decide with: ")
        .unwrap_or_else(|| panic!("the log says how to decide: {log}"));
    log[at + "decide with: ".len()..]
        .split("  (or:")
        .next()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .replace(" VALUE", " yes")
}

/// An operator's shell on another machine: only `monitor` on PATH, their own token, no
/// state dir of the runner's.
fn operator_runs(env: &TestEnv, op_token: &str, command: &str) -> Outcome {
    let home = env.path().join("operator-home");
    std::fs::create_dir_all(&home).unwrap();
    env.command("bash")
        .arg("-c")
        .arg(command)
        .env("PATH", format!("{}:/usr/bin:/bin", target_dir().display()))
        .env("HOME", &home)
        .env("HEADLESS_RUN_TOKEN", op_token)
        .env_remove("HEADLESS_RUN_HOME")
        .env_remove("HEADLESS_RUN_DB")
        .env_remove("HEADLESS_RUN_SERVER")
        .env_remove("CI")
        .env_remove("HEADLESS")
        .run()
}

/// A server, its runner and operator tokens, and the package published on loopback.
fn setup(env: &TestEnv) -> (Served, Settings, String) {
    need("dpkg-deb", "dpkg");
    need("unshare", "util-linux");
    let runner_token = token(env, "ci-deploy", "runner");
    let op = token(env, "alice", "operator");
    let served = Served::start(env);
    let deb = crate::package::build_package(env);
    let sum = env.command("sha256sum").arg(&deb).run();
    sum.expect_code(0);
    let settings = Settings {
        server: served.url(),
        runner_token,
        deb_sha256: sum.out().split_whitespace().next().unwrap().to_owned(),
        deb_url: publish(deb),
    };
    (served, settings, op)
}

#[test]
fn the_github_actions_example_stops_at_the_prompt_and_a_rerun_on_a_new_runner_applies() {
    if !running_as_root("the_github_actions_example") {
        return;
    }
    let env = TestEnv::new();
    let (served, settings, op) = setup(&env);
    let text = example("github-actions.yml");

    let first = github_run(&env, &text, &settings, "runner-1");
    assert_eq!(
        step(&first, "Install headless-run").1,
        Some(0),
        "{first:#?}"
    );
    assert_eq!(step(&first, "Supervise terraform").1, Some(0), "{first:#?}");
    let apply = step(&first, "Apply");
    assert_eq!(
        apply.1,
        Some(90),
        "terraform stopped at its question: {first:#?}"
    );
    assert!(
        apply.2.contains("Do you want to perform these actions?"),
        "{}",
        apply.2
    );
    // The hint names the server, from wherever the operator is; it decides as printed.
    let hint = decide_hint(&apply.2);
    assert!(
        hint.starts_with(&format!("monitor --server {} decide AP-", settings.server)),
        "{hint}"
    );
    operator_runs(&env, &op, &hint).expect_code(0);

    // The job again, on another new runner: answered at the prompt, it applies.
    let second = github_run(&env, &text, &settings, "runner-2");
    let apply = step(&second, "Apply");
    assert_eq!(apply.1, Some(0), "{second:#?}");
    assert!(apply.2.contains("Apply complete!"), "{}", apply.2);

    // Wait mode: one run waits at the prompt until the operator decides, then applies.
    let text = in_wait_mode(&text);
    assert!(
        text.contains("\n      HEADLESS_RUN_ON_PROMPT: wait\n"),
        "{text}"
    );
    let third = std::thread::scope(|s| {
        let job = s.spawn(|| github_run(&env, &text, &settings, "runner-3"));
        let pending = wait_for_pending(&env, &op, &served.url());
        operator_runs(
            &env,
            &op,
            &format!("monitor --server {} decide {pending} yes", served.url()),
        )
        .expect_code(0);
        job.join().unwrap()
    });
    let apply = step(&third, "Apply");
    assert_eq!(apply.1, Some(0), "{third:#?}");
    assert!(apply.2.contains("Apply complete!"), "{}", apply.2);
    served.stop().expect_code(0);
}

/// The id of the pending approval the server lists (within two minutes).
fn wait_for_pending(env: &TestEnv, op: &str, server: &str) -> String {
    let end = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let out = operator_runs(
            env,
            op,
            &format!("monitor --server {server} approvals --status pending --json"),
        );
        let listed: Value = serde_json::from_str(&out.out()).unwrap_or(Value::Null);
        if let Some(id) = listed
            .as_array()
            .and_then(|a| a.first())
            .and_then(|a| a["approval_id"].as_str())
        {
            return id.to_owned();
        }
        assert!(
            std::time::Instant::now() < end,
            "no approval became pending: {}",
            out.context()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

const GITLAB_CHECKOUT: &str = "/builds/group/project";

/// One run of the GitLab CI job on a new runner (deleted after it): `before_script` and
/// `script` in one shell, as GitLab runs them; its exit code and output.
fn gitlab_run(env: &TestEnv, text: &str, settings: &Settings, runner: &str) -> Outcome {
    let doc: Value = serde_yaml_ng::from_str(text).expect("the example is YAML");
    let job = &doc["deploy"];
    let lines = |key: &str| -> Vec<String> {
        job[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}:"))
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect()
    };
    let script = [lines("before_script"), lines("script")]
        .concat()
        .join("\n");
    let mut vars = vec![
        (
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        ),
        ("HOME".to_owned(), "/root".to_owned()),
        ("CI".to_owned(), "true".to_owned()),
        ("GITLAB_CI".to_owned(), "true".to_owned()),
        // The project's CI/CD variables.
        ("HEADLESS_RUN_SERVER".to_owned(), settings.server.clone()),
        (
            "HEADLESS_RUN_TOKEN".to_owned(),
            settings.runner_token.clone(),
        ),
        ("HEADLESS_RUN_DEB".to_owned(), settings.deb_url.clone()),
        (
            "HEADLESS_RUN_DEB_SHA256".to_owned(),
            settings.deb_sha256.clone(),
        ),
    ];
    for (k, v) in job["variables"].as_object().expect("variables:") {
        vars.push((k.clone(), v.as_str().unwrap_or_default().to_owned()));
    }
    let root = new_runner(env, runner, GITLAB_CHECKOUT);
    let out = step_in(env, &root, GITLAB_CHECKOUT, &vars, &script);
    std::fs::remove_dir_all(&root).unwrap();
    out
}

#[test]
fn the_gitlab_ci_example_stops_at_the_prompt_and_a_retry_on_a_new_runner_applies() {
    if !running_as_root("the_gitlab_ci_example") {
        return;
    }
    let env = TestEnv::new();
    let (served, settings, op) = setup(&env);
    let text = example("gitlab-ci.yml");
    let first = gitlab_run(&env, &text, &settings, "runner-1");
    first.expect_code(90);
    let log = format!("{}{}", first.out(), first.stderr);
    assert!(
        log.contains("Do you want to perform these actions?"),
        "{log}"
    );
    operator_runs(&env, &op, &decide_hint(&log)).expect_code(0);
    let second = gitlab_run(&env, &text, &settings, "runner-2");
    second.expect_code(0);
    assert!(
        second.out().contains("Apply complete!"),
        "{}",
        second.context()
    );
    served.stop().expect_code(0);
}

/// The README shows the examples as they are in `examples/ci/`, so what a reader pastes is
/// what the tests run.
#[test]
fn the_readme_shows_the_ci_examples_as_tested() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    for (marker, file) in [
        ("<!-- ci-example:github -->", "github-actions.yml"),
        ("<!-- ci-example:gitlab -->", "gitlab-ci.yml"),
    ] {
        let at = readme
            .find(marker)
            .unwrap_or_else(|| panic!("the README has {marker}"));
        let block = readme[at..]
            .split("```yaml\n")
            .nth(1)
            .and_then(|b| b.split("```\n").next())
            .expect("a yaml block after the marker");
        assert_eq!(block, example(file), "{file}");
    }
}

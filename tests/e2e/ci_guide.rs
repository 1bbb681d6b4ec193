//! The README's CI guide, run as written (issue 15 item 1): the GitHub Actions job's steps,
//! read from the README, in order, with a runner's `$GITHUB_PATH`, `$GITHUB_ENV` and
//! `$RUNNER_TEMP` emulated and a fixture `terraform` as the real tool. The job stops at
//! terraform's question with exit 90, the last step (`if: always()`) shows the approval, the
//! operator decides, and the job run again applies.

use headless_run_e2e::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One step of the job: its name, `run` script (none for `uses:`), and whether it runs
/// after a failed step (`if: always()`).
#[derive(Debug)]
struct Step {
    name: String,
    run: Option<String>,
    always: bool,
}

/// The job's `env:` and steps, from the YAML block after `<!-- ci-example:github -->`.
fn github_example() -> (BTreeMap<String, String>, Vec<Step>) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let at = readme
        .find("<!-- ci-example:github -->")
        .expect("the README has the GitHub Actions example");
    let block = readme[at..]
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a yaml block after the marker");
    let lines: Vec<&str> = block.lines().collect();
    let mut env = BTreeMap::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    let mut in_env = false;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        let indent = line.len() - line.trim_start().len();
        if t == "env:" {
            in_env = true;
        } else if in_env && indent >= 6 && t.contains(": ") && !t.starts_with('-') {
            let (k, v) = t.split_once(": ").unwrap();
            env.insert(k.to_owned(), v.trim_matches('"').to_owned());
        } else if t == "steps:" {
            in_env = false;
        } else if let Some(rest) = t.strip_prefix("- ") {
            steps.push(Step {
                name: rest.to_owned(),
                run: None,
                always: false,
            });
        }
        if let Some(step) = steps.last_mut() {
            if let Some(name) = t.strip_prefix("- name: ").or(t.strip_prefix("name: ")) {
                step.name = name.to_owned();
            } else if t == "if: always()" {
                step.always = true;
            } else if t == "run: |" {
                let mut script = String::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty()
                        || lines[i + 1].len() - lines[i + 1].trim_start().len() > indent)
                {
                    i += 1;
                    script.push_str(lines[i].trim());
                    script.push('\n');
                }
                step.run = Some(script);
            } else if let Some(cmd) = t.strip_prefix("run: ") {
                step.run = Some(format!("{cmd}\n"));
            }
        }
        i += 1;
    }
    (env, steps)
}

/// A runner: a fresh `$HOME`, `$RUNNER_TEMP` (kept across job runs, as a self-hosted
/// runner's would be), and the files later steps' `PATH` and environment come from.
struct Runner {
    root: PathBuf,
    temp: PathBuf,
    path: String,
}

impl Runner {
    fn new(env: &TestEnv) -> Runner {
        let root = env.path().join("runner");
        let temp = root.join("temp");
        std::fs::create_dir_all(&temp).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("checkout")).unwrap();
        // The image's tools: the built binaries (so the install step finds them, as on a
        // runner with a cache), the fixture terraform, the system.
        let path = format!(
            "{}:{}:/usr/local/bin:/usr/bin:/bin",
            target_dir().display(),
            fixture("prompts").display()
        );
        Runner { root, temp, path }
    }

    /// Runs the job: each step in order, a failed step skipping the rest but `always()`
    /// ones. Returns each step's name, exit code (None: skipped) and output.
    fn job(
        &self,
        job_env: &BTreeMap<String, String>,
        steps: &[Step],
    ) -> Vec<(String, Option<i32>, String)> {
        let github_path = self.root.join("github_path");
        let github_env = self.root.join("github_env");
        std::fs::write(&github_path, "").unwrap();
        std::fs::write(&github_env, "").unwrap();
        let mut failed = false;
        let mut results = Vec::new();
        for step in steps {
            let Some(script) = &step.run else {
                results.push((step.name.clone(), Some(0), String::new()));
                continue;
            };
            if failed && !step.always {
                results.push((step.name.clone(), None, String::new()));
                continue;
            }
            // $GITHUB_PATH: each line added before PATH, the latest first.
            let added: Vec<String> = std::fs::read_to_string(&github_path)
                .unwrap()
                .lines()
                .rev()
                .map(str::to_owned)
                .collect();
            let path = added
                .into_iter()
                .chain(std::iter::once(self.path.clone()))
                .collect::<Vec<_>>()
                .join(":");
            let mut cmd = Command::new("bash");
            cmd.arg("-e")
                .arg("-c")
                .arg(script)
                .env_clear()
                .env("PATH", path)
                .env("HOME", self.root.join("home"))
                .env("RUNNER_TEMP", &self.temp)
                .env("GITHUB_PATH", &github_path)
                .env("GITHUB_ENV", &github_env)
                .env("CI", "true")
                .env("GITHUB_ACTIONS", "true")
                .current_dir(self.root.join("checkout"));
            for (k, v) in job_env {
                cmd.env(k, v);
            }
            for line in std::fs::read_to_string(&github_env).unwrap().lines() {
                if let Some((k, v)) = line.split_once('=') {
                    cmd.env(k, v);
                }
            }
            let out = cmd.output().expect("run a step");
            let code = out.status.code().unwrap_or(-1);
            failed |= code != 0;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            results.push((step.name.clone(), Some(code), text));
        }
        results
    }
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

#[test]
fn the_readmes_github_actions_job_stops_at_the_prompt_and_applies_once_decided() {
    let (job_env, steps) = github_example();
    assert_eq!(job_env.get("HEADLESS").map(String::as_str), Some("1"));
    assert_eq!(steps.len(), 5, "{steps:#?}");
    let env = TestEnv::new();
    let runner = Runner::new(&env);
    let first = runner.job(&job_env, &steps);
    assert_eq!(
        step(&first, "Install headless-run").1,
        Some(0),
        "{first:#?}"
    );
    assert_eq!(
        step(&first, "Supervise the tools this job runs").1,
        Some(0),
        "{first:#?}"
    );
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
    let id = apply
        .2
        .split_whitespace()
        .find(|w| w.starts_with("AP-"))
        .expect("the step log names the approval")
        .trim_end_matches([':', ','])
        .to_owned();
    let report = step(&first, "What is waiting for a decision");
    assert_eq!(report.1, Some(0), "{first:#?}");
    assert!(
        report.2.contains(&id[..12]),
        "the always() step lists it: {}",
        report.2
    );
    // The operator decides where the state is.
    let state = runner.temp.join("headless-run");
    assert!(
        state.join("state.db").exists(),
        "the state is where the guide says"
    );
    let decided = Command::new(bin("monitor"))
        .arg("--state-dir")
        .arg(&state)
        .args(["decide", &id, "yes"])
        .env_remove("CI")
        .env_remove("HEADLESS")
        .output()
        .unwrap();
    assert!(decided.status.success(), "{decided:?}");
    // The job again: terraform is answered at its prompt and applies.
    let second = runner.job(&job_env, &steps);
    let apply = step(&second, "Apply");
    assert_eq!(apply.1, Some(0), "{second:#?}");
    assert!(apply.2.contains("Apply complete!"), "{}", apply.2);
}

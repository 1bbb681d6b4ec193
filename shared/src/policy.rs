//! Automatic decisions: policies from config (tool, prompt regex, argv match, structured
//! conditions → value) and decisions remembered with `monitor decide --remember` (the
//! `policies` table, keyed by tool and prompt fingerprint). Conditions are compared, never
//! evaluated as code. Each automatic decision is still an approval row, decided by
//! `policy:NAME`.

use crate::config::{CondField, CondOp, Condition, PolicyConfig};
use serde::Serialize;

/// What a policy looks at.
#[derive(Debug, Clone)]
pub struct PromptFacts<'a> {
    pub tool: &'a str,
    pub prompt_line: &'a str,
    pub question: &'a str,
    /// The command line (program first).
    pub argv: &'a [String],
    pub cwd: &'a str,
}

/// The config's policies whose conditions hold for a prompt, in config order: (name,
/// value), as a prompt request carries them to the store.
pub fn matching(config: &crate::config::Config, facts: &PromptFacts<'_>) -> Vec<(String, String)> {
    config
        .policies()
        .filter(|p| config_matches(p, facts))
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect()
}

/// What approvals of this command need, from every matching `[[reviewers]]` rule of every
/// file: the most people any asks for, the longest wait, and the group of the first that
/// names one.
pub fn reviewers_for(
    config: &crate::config::Config,
    tool: &str,
    argv: &[String],
    cwd: &str,
) -> crate::reviews::Requirement {
    let facts = PromptFacts {
        tool,
        prompt_line: "",
        question: "",
        argv,
        cwd,
    };
    let mut req = crate::reviews::Requirement::default();
    for r in config.reviewers() {
        if r.tool.as_deref().is_some_and(|t| t != tool)
            || r.argv
                .as_ref()
                .is_some_and(|re| !re.regex.is_match(&argv.join(" ")))
            || !r.when.iter().all(|c| condition_holds(c, &facts))
        {
            continue;
        }
        req.required = req.required.max(r.required.unwrap_or(1));
        if req.group.is_none() {
            req.group = r.group.clone();
        }
        let wait = r.wait.and_then(|w| w.0).map_or(0, |d| d.as_secs());
        req.wait_seconds = req.wait_seconds.max(wait);
    }
    req
}

/// Whether every condition of a config policy holds.
pub fn config_matches(p: &PolicyConfig, facts: &PromptFacts<'_>) -> bool {
    if p.tool.as_deref().is_some_and(|t| t != facts.tool) {
        return false;
    }
    if p.prompt
        .as_ref()
        .is_some_and(|re| !re.regex.is_match(facts.prompt_line))
    {
        return false;
    }
    if p.argv
        .as_ref()
        .is_some_and(|re| !re.regex.is_match(&facts.argv.join(" ")))
    {
        return false;
    }
    p.when.iter().all(|c| condition_holds(c, facts))
}

fn condition_holds(c: &Condition, facts: &PromptFacts<'_>) -> bool {
    let test = |text: &str| compare(c, text);
    match c.field {
        CondField::Tool => test(facts.tool),
        CondField::Prompt => test(facts.prompt_line),
        CondField::Question => test(facts.question),
        CondField::Argv => test(&facts.argv.join(" ")),
        CondField::Arg => {
            // "Any argument matches", except `not_equals`: "no argument equals".
            if c.op == CondOp::NotEquals {
                facts.argv.iter().skip(1).all(|a| a != &c.value)
            } else {
                facts.argv.iter().skip(1).any(|a| test(a))
            }
        }
        CondField::Cwd => test(facts.cwd),
    }
}

fn compare(c: &Condition, text: &str) -> bool {
    match c.op {
        CondOp::Equals => text == c.value,
        CondOp::NotEquals => text != c.value,
        CondOp::Contains => text.contains(&c.value),
        CondOp::StartsWith => text.starts_with(&c.value),
        CondOp::EndsWith => text.ends_with(&c.value),
        CondOp::Matches => c.regex.as_ref().is_some_and(|re| re.regex.is_match(text)),
        CondOp::Glob => glob_match(&c.value, text),
    }
}

/// Shell-style glob over the whole text: `*` any run, `?` one character, anything else
/// literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// How far a remembered decision reaches beyond the prompt it was made on: by default this
/// command line in this directory; widened only on purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RememberScope {
    /// Only this command line (`None`: any arguments of the tool).
    pub argv: Option<Vec<String>>,
    /// Only in this directory (`None`: any directory).
    pub cwd: Option<String>,
}

/// A decision remembered with `monitor decide --remember`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RememberedPolicy {
    pub policy_id: String,
    pub name: String,
    pub tool_name: Option<String>,
    pub prompt_fingerprint: Option<String>,
    pub value: String,
    pub source: String,
    pub source_approval_id: Option<String>,
    pub created_at: String,
    pub created_by: String,
    /// Only this command line (`None`: any arguments; decisions remembered before schema
    /// v6 have no scope).
    pub argv_json: Option<Vec<String>>,
    /// Only in this directory (`None`: any directory).
    pub cwd: Option<String>,
}

/// What `remember` stores.
pub(crate) struct Remembered<'a> {
    pub tool: &'a str,
    pub prompt_fingerprint: &'a str,
    pub scope: &'a RememberScope,
    pub value: &'a str,
    pub approval_id: &'a str,
    pub by: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;
    use std::path::Path;

    fn policies(text: &str) -> Vec<PolicyConfig> {
        ConfigFile::parse(Path::new("/x.toml"), text)
            .unwrap()
            .policies
    }

    fn facts<'a>(tool: &'a str, prompt: &'a str, argv: &'a [String]) -> PromptFacts<'a> {
        PromptFacts {
            tool,
            prompt_line: prompt,
            question: prompt,
            argv,
            cwd: "/work",
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.tmp'?", "rm: remove regular file 'a.tmp'?"));
        assert!(!glob_match("*.tmp'?", "rm: remove regular file 'a.txt'?"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a", ""));
        assert!(glob_match("**x*", "yyxyy"));
    }

    #[test]
    fn config_policies_match_on_every_condition() {
        let p = policies(
            r#"
[[policies]]
name = "tmp-files"
tool = "rm"
value = "y"
when = [{ field = "prompt", op = "glob", value = "*.tmp'?" }]

[[policies]]
name = "deploy-staging"
prompt = 'Deploy\?'
argv = '--env staging'
value = "yes"
when = [{ field = "cwd", op = "starts_with", value = "/work" }, { field = "arg", op = "not_equals", value = "--force" }]
"#,
        );
        let argv: Vec<String> = ["rm", "-i", "a.tmp"].map(String::from).to_vec();
        assert!(config_matches(
            &p[0],
            &facts("rm", "rm: remove regular file 'a.tmp'?", &argv)
        ));
        assert!(!config_matches(
            &p[0],
            &facts("rm", "rm: remove regular file 'a.txt'?", &argv)
        ));
        assert!(!config_matches(
            &p[0],
            &facts("cp", "rm: remove regular file 'a.tmp'?", &argv)
        ));
        let deploy: Vec<String> = ["deploy", "--env staging"].map(String::from).to_vec();
        assert!(config_matches(&p[1], &facts("deploy", "Deploy?", &deploy)));
        let forced: Vec<String> = ["deploy", "--env staging", "--force"]
            .map(String::from)
            .to_vec();
        assert!(!config_matches(&p[1], &facts("deploy", "Deploy?", &forced)));
    }
}

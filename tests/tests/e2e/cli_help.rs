//! End-to-end: what `--help` tells a newcomer. `corral serve --help` marks
//! its required flags and has an example, the environment, the exit codes
//! and the dialects; `corral-agent --help` names every dialect, the
//! environment and the exit codes. Every default `corral serve --help`
//! shows is the one the README's flag table gives.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use corral_e2e::harness::workspace_bin;

fn help(bin: &str, args: &[&str]) -> String {
    let output = Command::new(workspace_bin(bin))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{bin} {args:?} failed");
    String::from_utf8(output.stdout).unwrap()
}

/// The values clap lists for `--dialect` in a short help (`-h`).
fn dialects(short_help: &str) -> Vec<String> {
    let flag = short_help
        .split("--dialect <")
        .nth(1)
        .expect("a --dialect flag");
    let list = flag
        .split("[possible values: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("--dialect lists its values");
    list.split(", ").map(str::to_string).collect()
}

fn assert_mentions(help: &str, needles: &[&str]) {
    for needle in needles {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn corral_serve_help() {
    let text = help("corral", &["serve", "--help"]);
    assert_mentions(
        &text,
        &[
            "--listen <ADDR>",
            "127.0.0.1:7000 (required)",
            "--projects-root <DIR>",
            "the projects (required)",
            "Example:",
            "corral serve --listen 127.0.0.1:7000 --projects-root",
            "CORRAL_LOG",
            "CORRAL_TOKENS",
            "CORRAL_ADMIN_TOKEN",
            "Exit codes:",
            "zut (zut RPC v1, the default)",
            "letscode (letscode-rpc/1)",
            "zi (Zi RPC v1)",
        ],
    );
    // Every dialect the flag takes is explained in the after-help text.
    let values = dialects(&help("corral", &["serve", "-h"]));
    assert!(values.len() >= 3, "{values:?}");
    let paragraph = text.split("Dialects (--dialect):").nth(1).unwrap();
    let paragraph = paragraph.split("\n\n").next().unwrap();
    for dialect in &values {
        assert!(
            paragraph.contains(&format!("{dialect} (")),
            "corral serve --help does not explain the dialect {dialect}: {paragraph}"
        );
    }
    // The short form names the required flags too.
    let short = help("corral", &["--help"]);
    assert_mentions(&short, &["--listen and --projects-root"]);
}

/// The README's `corral serve` flag table: (first word of the flag cell,
/// the default cell without backticks).
fn readme_defaults() -> Vec<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let table = readme
        .split("\n| flag | TOML key | environment | default |")
        .nth(1)
        .expect("the README's flag table");
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<String> = line
                .replace("\\|", "/")
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().replace('`', ""))
                .collect();
            let flag = cells[0].split_whitespace().next().unwrap().to_string();
            (flag, cells[3].clone())
        })
        .collect()
}

/// Each flag of a help text with its description, whitespace collapsed.
fn help_entries(help: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if (2..=6).contains(&indent) && trimmed.starts_with('-') {
            let flag = trimmed.split_whitespace().next().unwrap().to_string();
            entries.push((flag, String::new()));
        } else if !line.starts_with(' ') {
            entries.push((String::new(), String::new()));
        }
        if let Some((_, text)) = entries.last_mut() {
            text.push(' ');
            text.push_str(trimmed);
        }
    }
    entries
        .into_iter()
        .filter(|(flag, _)| !flag.is_empty())
        .map(|(flag, text)| (flag, text.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect()
}

#[test]
fn corral_serve_help_shows_the_readme_defaults() {
    let text = help("corral", &["serve", "--help"]);
    let entries = help_entries(&text);
    let readme = readme_defaults();
    let mut checked = 0;
    for (flag, description) in &entries {
        let Some((_, documented)) = readme.iter().find(|(f, _)| f == flag) else {
            continue;
        };
        let shown = match description.split("[default: ").nth(1) {
            Some(rest) => rest.split(']').next().unwrap().to_string(),
            None if description.contains("(required)") => "required".to_string(),
            None => panic!("corral serve --help shows no default for {flag}: {description}"),
        };
        assert!(
            documented.starts_with(&shown),
            "{flag}: --help shows the default {shown:?}, the README {documented:?}"
        );
        checked += 1;
    }
    // Every serve flag but -h/--help is in the README's table.
    assert_eq!(checked + 1, entries.len(), "{entries:?}");
    assert!(checked > 40, "{checked} flags checked");
}

#[test]
fn corral_agent_help() {
    let text = help("corral-agent", &["--help"]);
    assert_mentions(
        &text,
        &[
            "zut (zut RPC v1, the default)",
            "letscode (letscode-rpc/1)",
            "zi (Zi RPC v1)",
            "acp (Agent Client Protocol v1)",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "ZUTCORE_RPC_TOKEN",
            "CORRAL_LOG",
            "Exit codes:",
            "  2   bad flags",
            "  75  ",
            "  78  ",
            "git diff | corral-agent run -",
        ],
    );
    let values = dialects(&help("corral-agent", &["rpc", "-h"]));
    let paragraph = text.split("Dialects (rpc --dialect):").nth(1).unwrap();
    let paragraph = paragraph.split("\n\n").next().unwrap();
    for dialect in &values {
        assert!(
            paragraph.contains(&format!("{dialect} (")),
            "corral-agent --help does not explain the dialect {dialect}: {paragraph}"
        );
    }
    let run = help("corral-agent", &["run", "--help"]);
    assert_mentions(&run, &["or - to read it from stdin"]);
}

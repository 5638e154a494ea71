//! The docs agree with the declarations: the README's flag table,
//! `deploy/corral.toml.example` and `corral serve --help` each show every
//! declared setting with its flag, key, environment variable and default.

use std::path::Path;

use clap::CommandFactory;

use super::declare::{Setting, Shown};
use super::settings::{FileConfig, SETTINGS};
use super::{file, Cli};

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// The rows of the README's `corral serve` flag table, split into cells.
fn readme_rows() -> Vec<Vec<String>> {
    let readme = repo_file("README.md");
    let section = readme
        .split("\n| flag | TOML key | environment | default |")
        .nth(1)
        .expect("the README's flag table");
    section
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let line = line.replace("\\|", "/");
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().replace('`', ""))
                .collect()
        })
        .collect()
}

/// `--flag` of a table row: the first word of its first cell.
fn row_flag(row: &[String]) -> &str {
    row[0].split_whitespace().next().unwrap_or_default()
}

/// The flags `corral` takes before its subcommand (e.g. `--log-format`).
fn global_flags() -> Vec<(String, String)> {
    Cli::command()
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .filter_map(|arg| {
            let default = arg.get_default_values().first()?.to_str()?.to_string();
            Some((format!("--{}", arg.get_long()?), default))
        })
        .collect()
}

#[test]
fn every_setting_has_its_row_in_the_readme_and_every_row_a_setting() {
    let rows = readme_rows();
    for setting in SETTINGS {
        let found: Vec<&Vec<String>> = rows
            .iter()
            .filter(|r| row_flag(r) == setting.flag)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "README flag table: one row for {}",
            setting.flag
        );
        let row = found[0];
        assert_eq!(
            row[1],
            setting.key.unwrap_or("–"),
            "TOML key of {}",
            setting.flag
        );
        // `¹`: a footnote on when the environment is read.
        assert_eq!(
            row[2].trim_end_matches('¹'),
            setting.env.unwrap_or("–"),
            "environment of {}",
            setting.flag
        );
        let default = setting.default.text();
        assert!(
            row[3].starts_with(&default),
            "README default of {} is {:?}, declared {default:?}",
            setting.flag,
            row[3]
        );
    }
    let globals = global_flags();
    for row in &rows {
        let flag = row_flag(row);
        let global = globals.iter().find(|(f, _)| f == flag);
        if let Some((_, default)) = global {
            assert!(
                row[3].starts_with(default.as_str()),
                "README default of {flag}"
            );
            continue;
        }
        assert!(
            SETTINGS.iter().any(|s| s.flag == flag),
            "README flag table row {flag} matches no declared setting"
        );
    }
}

/// Each mention of `key = value` in the example, commented or not.
fn example_mentions<'a>(example: &'a str, key: &str) -> Vec<&'a str> {
    example
        .lines()
        .map(|line| line.trim_start_matches('#').trim())
        .filter(|line| {
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .collect()
}

/// The example's value for a setting, rendered like its default.
fn example_value(setting: &Setting, line: &str) -> Option<String> {
    let parsed: FileConfig = file::parse(line, Path::new("")).unwrap();
    let args = super::ServeArgs::default();
    let layers = super::settings::Layers {
        args: &args,
        file: &parsed,
    };
    super::settings::shown_value(setting.field, &layers)
}

#[test]
fn the_example_config_parses_and_shows_every_key_with_its_default() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/corral.toml.example");
    file::read(&path).unwrap();
    let example = repo_file("deploy/corral.toml.example");
    for setting in SETTINGS {
        let Some(key) = setting.key else { continue };
        let mentions = example_mentions(&example, key);
        assert!(!mentions.is_empty(), "corral.toml.example lacks `{key}`");
        for line in &mentions {
            file::parse(line, Path::new("/etc/corral"))
                .unwrap_or_else(|e| panic!("corral.toml.example: `{line}`: {e}"));
        }
        // A setting with a typed default: some mention shows that default.
        if let Some(default) = example_value(setting, "") {
            assert_eq!(default, setting.default.text());
            let shown: Vec<Option<String>> = mentions
                .iter()
                .map(|line| example_value(setting, line))
                .collect();
            assert!(
                shown.contains(&Some(default.clone())),
                "corral.toml.example: `{key}` is never shown with its default {default:?}: {mentions:?}"
            );
        }
    }
}

#[test]
fn serve_help_shows_every_default() {
    let mut command = Cli::command();
    let serve = command.find_subcommand_mut("serve").unwrap();
    let help = serve.render_long_help().to_string();
    let help: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for setting in SETTINGS {
        let expected = match setting.default {
            Shown::Required => format!("{} (required)", setting.help),
            _ => format!("[default: {}]", setting.default.text()),
        };
        let expected: String = expected.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains(&expected),
            "--help lacks {expected:?} for {}",
            setting.flag
        );
        // Beside the flag (`[env: …]`) or in the Environment section.
        if let Some(env) = setting.env {
            assert!(help.contains(env), "--help lacks {env}");
        }
    }
}

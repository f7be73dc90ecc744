//! rctl's one configuration file, `/etc/default/rctl` (or the file
//! `RCTL_CONFIG` names): `RCTL_NAME=value` lines, the same file the
//! systemd units read with `EnvironmentFile=`.
//!
//! Each `RCTL_NAME` stands for the flag `--name` of the commands that
//! run on a host or drive a fleet (`serve`, `agent`, `apply`, `status`,
//! `log`, `detach`, `push`, `fleet status`): RCTL_SPOE_GROUP is
//! `--spoe-group`, RCTL_ETCD is `--etcd` (a list is comma-separated).
//! A flag on the command line wins over the environment, which wins over
//! the file. The commands that work on rules (`check`, `compile`,
//! `dry-run`, `emit`, …) read neither, so that a host's settings never
//! change what a ruleset means.

use anyhow::{bail, Context, Result};
use clap::Command;
use std::path::{Path, PathBuf};

/// The file read when `RCTL_CONFIG` is not set (a missing one is fine).
pub const DEFAULT_FILE: &str = "/etc/default/rctl";

/// The commands whose flags the file and the environment set.
const HOST_COMMANDS: &[&str] = &[
    "serve", "agent", "apply", "status", "log", "detach", "push", "fleet",
];

/// Flags never taken from the file or the environment: what a person
/// asks for one run (`--format`, `--rollback`), and flags whose meaning on
/// one command differs from the setting of the same name (`push --site`
/// picks the pointer to move, not the host's site; `status --iface`
/// narrows what is shown).
const NOT_SET: &[(&str, &str)] = &[
    ("*", "help"),
    ("*", "version"),
    ("*", "format"),
    ("push", "site"),
    ("push", "all"),
    ("push", "rollback"),
    ("status", "iface"),
    ("log", "seconds"),
];

/// The environment variable for `--flag`.
pub fn var_name(long: &str) -> String {
    format!("RCTL_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// `cmd` with every host command's flags readable from `RCTL_*`
/// variables (comma-separated where a flag takes a list).
pub fn with_env(cmd: Command) -> Command {
    let mut cmd = cmd;
    for name in HOST_COMMANDS {
        cmd = cmd.mut_subcommand(*name, |sub| with_env_below(sub, name));
    }
    cmd
}

fn with_env_below(sub: Command, top: &str) -> Command {
    let names: Vec<String> = sub
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let mut sub = sub.mut_args(|a| {
        let Some(long) = a.get_long().map(str::to_string) else {
            return a;
        };
        let excluded = NOT_SET
            .iter()
            .any(|(c, f)| (*c == "*" || *c == top) && *f == long);
        if excluded || a.is_positional() {
            return a;
        }
        let action = a.get_action().clone();
        // Values stay out of --help: RCTL_REDIS may hold a password.
        let a = a.env(var_name(&long)).hide_env_values(true);
        match action {
            clap::ArgAction::Append => a.value_delimiter(','),
            // RCTL_SHADOW=yes|no|true|false|on|off|1|0.
            clap::ArgAction::SetTrue => a.value_parser(clap::builder::BoolishValueParser::new()),
            _ => a,
        }
    });
    for n in names {
        sub = sub.mut_subcommand(n, |s| with_env_below(s, top));
    }
    sub
}

/// Every `RCTL_*` variable some flag reads, in `cmd`.
pub fn known_vars(cmd: &Command) -> Vec<String> {
    let mut out = Vec::new();
    collect(cmd, &mut out);
    out.extend(["RCTL_CONFIG".to_string(), "RCTL_XDP_OBJECT".to_string()]);
    out.sort();
    out.dedup();
    out
}

fn collect(cmd: &Command, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        if let Some(e) = a.get_env() {
            out.push(e.to_string_lossy().into_owned());
        }
    }
    for s in cmd.get_subcommands() {
        collect(s, out);
    }
}

/// One setting of the file.
#[derive(Debug, PartialEq, Eq)]
pub struct Setting {
    /// `RCTL_NAME`.
    pub name: String,
    /// Its value, unquoted.
    pub value: String,
    /// Its line in the file.
    pub line: usize,
}

/// Reads the file's settings: `NAME=value` lines, `#` comments and blank
/// lines, values optionally in single or double quotes (as systemd's
/// `EnvironmentFile=` and a shell read them). `export NAME=value` is taken
/// too.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Setting>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let l = l.strip_prefix("export ").unwrap_or(l).trim_start();
        let Some((name, value)) = l.split_once('=') else {
            errors.push(format!(
                "{}:{line}: `{}` is not NAME=value",
                path.display(),
                crate::term::text(raw)
            ));
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            errors.push(format!(
                "{}:{line}: `{}` is not a variable name",
                path.display(),
                crate::term::text(name)
            ));
            continue;
        }
        let value = value.trim();
        let value = match (value.chars().next(), value.chars().last()) {
            (Some(q @ ('"' | '\'')), Some(e)) if value.len() >= 2 && e == q => {
                &value[1..value.len() - 1]
            }
            (Some('"' | '\''), _) => {
                errors.push(format!(
                    "{}:{line}: the quote in `{}` is not closed",
                    path.display(),
                    crate::term::text(raw)
                ));
                continue;
            }
            _ => value,
        };
        out.push(Setting {
            name: name.to_string(),
            value: value.to_string(),
            line,
        });
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    Ok(out)
}

/// Puts the file's settings into this process's environment, where the
/// environment does not already set them; warns of an `RCTL_` name no
/// flag reads (with the nearest one). Called once, at start, before any
/// thread exists.
pub fn load(cmd: &Command) -> Result<()> {
    let (path, named) = match std::env::var_os("RCTL_CONFIG") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (PathBuf::from(DEFAULT_FILE), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(()),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "reading the configuration file {} (RCTL_CONFIG{})",
                    path.display(),
                    if named {
                        ""
                    } else {
                        " is not set; this is the default"
                    }
                )
            })
        }
    };
    let known = known_vars(cmd);
    for s in parse(&path, &text)? {
        if s.name.starts_with("RCTL_") && !known.contains(&s.name) {
            let hint = rctl_compiler::diag::nearest(&s.name, known.iter().map(String::as_str))
                .map(|n| format!(" (did you mean {n}?)"))
                .unwrap_or_default();
            crate::common::warn(&format!(
                "{}:{}: no flag reads {}{hint}",
                path.display(),
                s.line,
                crate::term::text(&s.name)
            ));
        }
        if std::env::var_os(&s.name).is_none() {
            std::env::set_var(&s.name, &s.value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_as_a_shell_reads_them() {
        let t = "# c\n\nRCTL_A=1\nexport RCTL_B = \"x y\"\nRCTL_C='z'\nRCTL_D=\n";
        let s = parse(Path::new("f"), t).unwrap();
        let v: Vec<(&str, &str, usize)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str(), s.line))
            .collect();
        assert_eq!(
            v,
            [
                ("RCTL_A", "1", 3),
                ("RCTL_B", "x y", 4),
                ("RCTL_C", "z", 5),
                ("RCTL_D", "", 6)
            ]
        );
    }

    #[test]
    fn every_bad_line_is_reported_with_its_number() {
        let e = parse(Path::new("f"), "RCTL_A\nok=1\nRCTL B=2\nRCTL_C=\"x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f:1: `RCTL_A` is not NAME=value"), "{e}");
        assert!(e.contains("f:3: `RCTL B` is not a variable name"), "{e}");
        assert!(e.contains("f:4: the quote"), "{e}");
    }

    #[test]
    fn flags_map_to_names() {
        assert_eq!(var_name("spoe-group"), "RCTL_SPOE_GROUP");
    }
}

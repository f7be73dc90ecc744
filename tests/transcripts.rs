//! The docs' transcripts are tests: every ```` ```console ```` block of a
//! Markdown file in the repository is a list of commands (lines starting
//! `$ `) each followed by what it prints (stdout, then stderr), run from
//! the repository's root with this build's `rctl` first on `PATH`. A doc
//! example that no longer matches the program fails here.
//!
//! `RCTL_BLESS=1` writes what the commands print now into the blocks
//! (for a reviewer to read in the diff), instead of failing.

use crate::util::root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One command of a transcript and what the doc says it prints.
struct Step {
    command: String,
    /// The command as the doc writes it (its lines, `$ ` and
    /// continuations included), for blessing.
    raw: String,
    expected: String,
    /// Line of the `$ ` in its file.
    line: usize,
}

/// A ```console block: its byte range in the file (the lines between the
/// fences) and its steps.
struct Block {
    body: std::ops::Range<usize>,
    steps: Vec<Step>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut open: Option<(usize, Vec<Step>)> = None;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_end();
        match &mut open {
            None if trimmed == "```console" => open = Some((offset, Vec::new())),
            None => {}
            Some((body, steps)) if trimmed == "```" => {
                out.push(Block {
                    body: *body..start,
                    steps: std::mem::take(steps),
                });
                open = None;
            }
            Some((_, steps)) => {
                let continued = steps
                    .last()
                    .is_some_and(|s| s.command.ends_with('\\') && s.expected.is_empty());
                if continued {
                    // A command runs on past a trailing backslash.
                    let s = steps.last_mut().expect("checked");
                    s.command.pop();
                    s.command = format!("{} {}", s.command.trim_end(), trimmed.trim_start());
                    s.raw.push_str(line);
                } else if let Some(cmd) = trimmed.strip_prefix("$ ") {
                    steps.push(Step {
                        command: cmd.to_string(),
                        raw: line.to_string(),
                        expected: String::new(),
                        line: n + 1,
                    });
                } else if let Some(s) = steps.last_mut() {
                    s.expected.push_str(line);
                }
            }
        }
    }
    out
}

/// The Markdown files git knows of.
fn markdown_files() -> Vec<PathBuf> {
    let o = Command::new("git")
        .args(["ls-files", "*.md", "**/*.md"])
        .current_dir(root())
        .output()
        .expect("run git ls-files");
    let mut files: Vec<PathBuf> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| root().join(l))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// What `command` prints, run by `sh` in the repository's root.
fn run(command: &str) -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_rctl"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root())
        .env("PATH", path)
        .env_remove("RCTL_XDP_OBJECT")
        .output()
        .expect("run sh");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_transcript_in_the_docs_is_what_rctl_prints() {
    let bless = std::env::var_os("RCTL_BLESS").is_some();
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in markdown_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let found = blocks(&text);
        if found.is_empty() {
            continue;
        }
        let mut blessed = String::new();
        let mut at = 0;
        for b in &found {
            let mut body = String::new();
            for s in &b.steps {
                let got = run(&s.command);
                ran += 1;
                body.push_str(&s.raw);
                body.push_str(&got);
                if got != s.expected {
                    failures.push(format!(
                        "{}:{}: `{}`\n--- the doc says ---\n{}--- rctl prints ---\n{got}",
                        file.strip_prefix(root()).unwrap_or(&file).display(),
                        s.line,
                        s.command,
                        s.expected
                    ));
                }
            }
            blessed.push_str(&text[at..b.body.start]);
            blessed.push_str(&body);
            at = b.body.end;
        }
        blessed.push_str(&text[at..]);
        if bless && blessed != text {
            std::fs::write(&file, blessed).unwrap();
        }
    }
    assert!(ran > 0, "no transcript found in the docs");
    if !bless {
        assert!(
            failures.is_empty(),
            "{} transcript(s) differ (RCTL_BLESS=1 rewrites them):\n\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn blocks_are_read_with_their_commands_and_outputs() {
    let text =
        "intro\n```console\n$ rctl a\nout 1\nout 2\n$ rctl b \\\n    --x\n```\n```sh\n$ not\n```\n";
    let b = blocks(text);
    assert_eq!(b.len(), 1);
    let s = &b[0].steps;
    assert_eq!(s.len(), 2);
    assert_eq!(s[1].command, "rctl b --x");
    assert_eq!(s[1].raw, "$ rctl b \\\n    --x\n");
    assert_eq!(
        (s[0].command.as_str(), s[0].expected.as_str(), s[0].line),
        ("rctl a", "out 1\nout 2\n", 3)
    );
    assert_eq!(s[1].expected, "");
    assert_eq!(
        &text[b[0].body.clone()],
        "$ rctl a\nout 1\nout 2\n$ rctl b \\\n    --x\n"
    );
}

//! What every command shares, and nothing else: the output format flag,
//! the compiler's limits as flags, and writing to stdout and stderr
//! (escaped for a terminal, a closed stream never a panic). A leaf: it
//! uses no other command's module.

use anyhow::{bail, Result};
use clap::ValueEnum;
use rctl_compiler::diag::{Diagnostics, Severity};
use rctl_compiler::ir::Ruleset;
use rctl_compiler::source::SourceMap;
use rctl_compiler::Options;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// A command's output format.
#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The compiler's limits, as flags; their defaults are the compiler's.
#[derive(clap::Args, Clone)]
pub struct Limits {
    /// Deepest parenthesis nesting allowed in an expression.
    #[arg(long, default_value_t = Options::default().max_depth)]
    max_depth: usize,
    /// Most rules allowed.
    #[arg(long, default_value_t = Options::default().max_rules)]
    max_rules: usize,
    /// Most prefixes allowed across all ipblocks, after merging.
    #[arg(long, default_value_t = Options::default().max_prefixes)]
    max_prefixes: usize,
    /// Also let `include` and `file` read below DIR (repeatable). Without
    /// it they read only below the ruleset's root: the directory named, or
    /// the directory of the file named.
    #[arg(long = "allow-path", value_name = "DIR")]
    allow_paths: Vec<PathBuf>,
}

impl Limits {
    /// The compiler's options: these limits, the rest the defaults.
    pub fn options(&self) -> Options {
        Options {
            max_depth: self.max_depth,
            max_rules: self.max_rules,
            max_prefixes: self.max_prefixes,
            allow_paths: self.allow_paths.clone(),
            ..Options::default()
        }
    }
}

/// `n` and the noun, pluralised: `1 rule`, `2 rules`, `0 prefixes`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let plural = if noun.ends_with('x') || noun.ends_with('s') || noun.ends_with("sh") {
        format!("{noun}es")
    } else if let Some(stem) = noun
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{noun}s")
    };
    format!("{n} {plural}")
}

/// Exit 1 when `failed`, else 0.
pub fn exit(failed: bool) -> ExitCode {
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A run that failed after saying why: exit with this code, print
/// nothing more (main maps it).
#[derive(Debug)]
pub struct Failed(pub u8);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failed (exit {})", self.0)
    }
}

impl std::error::Error for Failed {}

/// The exit code of a run whose diagnostics failed it: 2 when a path
/// named on the command line could not be read (as for a usage error),
/// else 1 (a file a rule names that is missing is a rule error, with its
/// `file:line:col`).
pub fn failure(diags: &Diagnostics) -> ExitCode {
    ExitCode::from(failure_code(diags))
}

/// [`failure`]'s number.
pub fn failure_code(diags: &Diagnostics) -> u8 {
    use rctl_compiler::diag::code;
    let io = diags.iter().any(|d| {
        d.severity == Severity::Error
            && [code::IO, code::NOT_REGULAR].contains(&d.code)
            && d.location().is_none()
    });
    if io {
        2
    } else {
        1
    }
}

/// One diagnostic as JSON, for CI: `{severity, code, message, file,
/// line, col, hint, notes, labels}` (file, line and col of its primary
/// span; null without one).
pub fn diagnostic_json(d: &rctl_compiler::diag::Diagnostic, map: &SourceMap) -> serde_json::Value {
    let path = |s: &rctl_compiler::source::Span| {
        map.get(s.file)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default()
    };
    let at = d.location();
    serde_json::json!({
        "severity": match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        },
        "code": d.code,
        "message": d.message,
        "file": at.as_ref().map(path),
        "line": at.map(|s| s.line),
        "col": at.map(|s| s.col),
        "hint": d.hint,
        "notes": d.notes,
        "labels": d.labels.iter().map(|l| serde_json::json!({
            "file": path(&l.span),
            "line": l.span.line,
            "col": l.span.col,
            "message": l.message,
            "primary": l.primary,
        })).collect::<Vec<_>>(),
    })
}

/// Prints diagnostics to stderr with a summary; returns whether the run fails.
pub fn report(map: &SourceMap, diags: &Diagnostics, deny_warnings: bool) -> bool {
    let mut err = std::io::stderr().lock();
    for d in diags.sorted() {
        let _ = writeln!(err, "{}", d.render(map));
    }
    let (e, w) = (diags.error_count(), diags.warning_count());
    if e + w > 0 {
        let _ = writeln!(
            err,
            "{e} error{}, {w} warning{}",
            if e == 1 { "" } else { "s" },
            if w == 1 { "" } else { "s" }
        );
    }
    e > 0 || (deny_warnings && diags.iter().any(|d| d.severity == Severity::Warning))
}

/// Writes a command's output to stdout, escaped for a terminal.
pub fn print(out: &str, format: Format) -> Result<()> {
    let out = match format {
        Format::Text => crate::term::text(out),
        Format::Json => crate::term::json(out),
    };
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

/// A warning on stderr; a closed stderr is ignored.
pub fn warn(msg: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "rctl: warning: {}",
        crate::term::text(msg)
    );
}

/// The first 16 hex digits of a hash (all of it if shorter).
pub fn short(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// A ruleset that was read or compiled, with what a command shows of it.
pub struct Loaded {
    /// The ruleset.
    pub ruleset: Ruleset,
    /// Merged (IPv4, IPv6) prefix counts per ipblock.
    pub ipblock_sizes: Vec<(String, usize, usize)>,
    /// The files it was read from.
    pub inputs: Vec<PathBuf>,
}

/// A ruleset from one compiled artifact or from sources, the sources'
/// diagnostics printed; `None` if the sources have errors.
pub fn load_ruleset(paths: &[PathBuf], opts: &Options) -> Result<Option<Loaded>> {
    let input = rctl_compiler::input::load(paths, opts)?;
    if report(&input.sources, &input.diagnostics, false) {
        let code = failure_code(&input.diagnostics);
        if code != 1 {
            return Err(Failed(code).into());
        }
        return Ok(None);
    }
    let Some(ruleset) = input.ruleset else {
        bail!("no ruleset produced")
    };
    Ok(Some(Loaded {
        ruleset,
        ipblock_sizes: input.ipblock_sizes,
        inputs: input.inputs,
    }))
}

/// Warns when `--site` names a site no rule names.
pub fn warn_site(rs: &Ruleset, site: Option<&str>) {
    if let Some(w) = rs.site_warning(site) {
        warn(&w);
    }
}

/// Parses a size flag (`--max-buffered`, `--log-max-size`): bytes, or a
/// number with KiB, MiB or GiB (also K, M, G, and the decimal kB, MB,
/// GB); at least 1 MiB.
pub fn parse_size(s: &str) -> Result<usize, String> {
    at_least(
        s,
        1 << 20,
        "1MiB (one flow alone may hold a 64 KiB head or 256 KiB out of order)",
    )
}

/// Parses `--max-line`: a size as [`parse_size`] reads it, at least 1 KiB
/// (a request line and its headers alone take hundreds of bytes) and at
/// most 1 GiB (a value's place in a line is kept in 32 bits).
pub fn parse_line_size(s: &str) -> Result<usize, String> {
    let n = at_least(
        s,
        1 << 10,
        "1KiB for a line (a log line with its request and User-Agent takes hundreds of bytes)",
    )?;
    if n > 1 << 30 {
        return Err(format!(
            "`{s}` is too large: give at most 1GiB for a line (a longer line is skipped and reported, not held)"
        ));
    }
    Ok(n)
}

/// A size of at least `min` bytes; `why` says the least and why.
fn at_least(s: &str, min: usize, why: &str) -> Result<usize, String> {
    let bytes = parse_bytes(s)?;
    if bytes < min {
        return Err(format!("`{s}` is too small: give at least {why}"));
    }
    Ok(bytes)
}

/// A size in bytes, with any unit [`parse_size`] takes.
fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let unit_of = |u: &str| -> Option<u64> {
        Some(match u.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            _ => return None,
        })
    };
    let (Ok(n), Some(unit)) = (n.parse::<u64>(), unit_of(unit.trim())) else {
        return Err(format!(
            "`{s}` is not a size: write bytes, or a number with KiB, MiB or GiB (like 256MiB)"
        ));
    };
    n.checked_mul(unit)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_pluralised() {
        use super::count;
        assert_eq!(count(1, "rule"), "1 rule");
        assert_eq!(count(0, "rule"), "0 rules");
        assert_eq!(count(2, "prefix"), "2 prefixes");
        assert_eq!(count(3, "entry"), "3 entries");
        assert_eq!(count(3, "key"), "3 keys");
        assert_eq!(count(1, "host"), "1 host");
    }

    #[test]
    fn a_line_bound_is_between_a_kibibyte_and_a_gibibyte() {
        use super::parse_line_size;
        assert_eq!(parse_line_size("1KiB"), Ok(1024));
        assert_eq!(parse_line_size("1GiB"), Ok(1 << 30));
        let small = parse_line_size("512").unwrap_err();
        let large = parse_line_size("2GiB").unwrap_err();
        assert!(small.contains("at least 1KiB"), "{small}");
        assert!(large.contains("at most 1GiB"), "{large}");
    }
}

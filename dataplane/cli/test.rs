//! `rctl test`: the ruleset's `test` blocks through the engine
//! (`rctl_dataplane::testing` runs them; this prints the results).

use crate::common::{exit, failure, print, report, Format, Limits};
use crate::term;
use anyhow::{bail, Result};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `rctl test`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// .rctl files, or directories of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Run only tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// `json`: the results as one document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write the results as JUnit XML to FILE, for a CI system's
    /// test report.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors or a test fails.
pub fn run(a: Args) -> Result<ExitCode> {
    let c = rctl_compiler::compile_paths(&a.paths, &a.limits.options());
    if report(&c.sources, &c.diagnostics, false) {
        return Ok(failure(&c.diagnostics));
    }
    if c.ruleset.is_none() {
        bail!("no ruleset produced")
    }
    let started = std::time::Instant::now();
    let files = Box::new(crate::test_replay::Files);
    let results = rctl_dataplane::testing::run_tests_with(&c, a.filter.as_deref(), files)
        .collect::<Result<Vec<_>, _>>()?;
    let took = started.elapsed();
    let failed = results.iter().filter(|r| !r.passed()).count();
    if let Some(path) = &a.junit {
        crate::output::write(path, junit(&results, took).as_bytes(), &[])?;
    }
    if a.format == Format::Json {
        let v = serde_json::json!({
            "passed": results.len() - failed,
            "failed": failed,
            "tests": results.iter().map(|r| serde_json::json!({
                "name": r.name,
                "file": r.file.as_ref().map(|f| f.display().to_string()),
                "line": r.line,
                "sent": r.sent,
                "passed": r.passed(),
                "failures": r.failures.iter().map(|f| serde_json::json!({
                    "line": f.line,
                    "message": f.message,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        print(&(serde_json::to_string_pretty(&v)? + "\n"), Format::Json)?;
        return Ok(exit(failed > 0));
    }
    let mut out = std::io::stdout().lock();
    for r in &results {
        if r.passed() {
            writeln!(out, "ok   {} ({} sent)", term::text(&r.name), r.sent)?;
        } else {
            let loc = r
                .file
                .as_ref()
                .map(|f| format!("{}:{}", f.display(), r.line))
                .unwrap_or_default();
            let (name, loc) = (term::text(&r.name), term::text(&loc));
            writeln!(out, "FAIL {name} ({loc})")?;
            for f in &r.failures {
                writeln!(out, "     line {}: {}", f.line, term::text(&f.message))?;
            }
        }
    }
    writeln!(
        out,
        "test result: {} passed, {failed} failed",
        results.len() - failed
    )?;
    Ok(exit(failed > 0))
}

/// The results as JUnit XML: one `testsuite`, one `testcase` a test
/// (its file as the class name), a `failure` per failed test holding each
/// expectation that did not hold.
fn junit(results: &[rctl_dataplane::testing::TestResult], took: std::time::Duration) -> String {
    let failed = results.iter().filter(|r| !r.passed()).count();
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"{}\" failures=\"{failed}\">\n  <testsuite name=\"rctl test\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" time=\"{:.3}\">\n",
        results.len(),
        results.len(),
        took.as_secs_f64()
    );
    for r in results {
        let file = r
            .file
            .as_ref()
            .map(|f| f.display().to_string())
            .unwrap_or_default();
        x.push_str(&format!(
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\">",
            xml(&r.name),
            xml(&file),
            xml(&file),
            r.line
        ));
        if r.passed() {
            x.push_str("</testcase>\n");
            continue;
        }
        let first = r.failures.first().map_or("", |f| f.message.as_str());
        x.push_str(&format!("\n      <failure message=\"{}\">", xml(first)));
        for f in &r.failures {
            x.push_str(&xml(&format!("{file}:{}: {}\n", f.line, f.message)));
        }
        x.push_str("</failure>\n    </testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// Text for an XML attribute or element: the five entities escaped, and
/// characters XML 1.0 cannot hold written as U+FFFD.
fn xml(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&apos;".to_string(),
            '\t' | '\n' | '\r' => c.to_string(),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => "\u{fffd}".to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn xml_text_is_escaped_and_never_invalid() {
        assert_eq!(
            super::xml("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot;\u{fffd}"
        );
    }
}

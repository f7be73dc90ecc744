//! The rctl compiler: `.rctl` sources to a checked, planned, versioned
//! ruleset.
//!
//! The stages each have their own types, and a folder each:
//!
//! - [`front`]: text to the spanned [`ast`] (reading files safely,
//!   parsing, formatting);
//! - [`ir`]: the AST lowered into the checked, resolved [`ir::Ruleset`],
//!   and its [`plan`] (which plane enforces each rule);
//! - [`analysis`]: what the ruleset's conditions imply, the checks
//!   (unreachable rules, exemption conflicts) and their exact proofs and
//!   witnesses;
//! - [`artifact`]: the versioned, checksummed encoding and its
//!   validation.
//!
//! Diagnostics are data ([`diag`]) and rendered by the caller.
//! [`compile_paths`] compiles sources; [`input::load`] takes either
//! sources or one compiled artifact, as the commands that read a ruleset
//! do.
//!
//! ```
//! let src = "rule r { when path == \"/x\" deny 403 }";
//! let c = rctl_compiler::compile_str("r.rctl", src, &Default::default());
//! assert!(!c.diagnostics.has_errors());
//! assert_eq!(c.ruleset.unwrap().rules[0].name, "r");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analysis;
pub mod artifact;
pub mod diag;
pub mod front;
pub mod input;
pub mod ir;

// Each stage's modules, at the paths they have always had.
pub use analysis::{check, proof, strlang, witness};
pub use artifact::validate;
pub use front::{ast, files, fmt, load, parse, source};
pub use ir::{cidr, plan, scan, spec, value};

use analysis::{addrs, summary};
use artifact::wire;
use ir::lower;

/// A small deterministic generator (xorshift64) for randomized unit tests.
#[cfg(test)]
pub(crate) struct TestRng(pub u64);

#[cfg(test)]
impl TestRng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

pub use lower::reason_phrase;
pub use wire::{ArtifactError, ArtifactErrorKind, Invalid, TagOf};

use diag::Diagnostics;
use ir::{Ruleset, SourceHash};
use source::SourceMap;
use std::path::PathBuf;

/// Limits and switches for a compilation. Going over a limit is a
/// diagnostic, never a panic.
#[derive(Debug, Clone)]
pub struct Options {
    /// Deepest parenthesis nesting in an expression.
    pub max_depth: usize,
    /// Largest compiled NFA per regex, in bytes.
    pub max_regex_bytes: usize,
    /// Most regexes in a ruleset.
    pub max_regexes: usize,
    /// Most prefixes across all ipblocks, after merging.
    pub max_prefixes: usize,
    /// Most rules.
    pub max_rules: usize,
    /// Largest condition tree after inlining patterns.
    pub max_cond_nodes: usize,
    /// Most DNF terms per condition for the unreachable-rule check and XDP
    /// lowering. (The exemption check needs no DNF.)
    pub max_dnf_terms: usize,
    /// Work allowed to decide whether one allow and one earlier enforcing
    /// rule can match the same traffic; past it the pair is reported as
    /// undecided.
    pub max_overlap_steps: u64,
    /// Largest source or list file.
    pub max_file_bytes: usize,
    /// Most samples (requests and packets, repeats counted) in one test.
    /// A test keeps every decision until it checks its expectations, about
    /// 100 bytes each, so this bounds `rctl test`'s memory.
    pub max_test_samples: u64,
    /// Deepest directory nesting a directory walk enters.
    pub max_dir_depth: usize,
    /// Directories (or files) `include` and `file` may read besides the
    /// ruleset's own root ([`files::Roots`]); `rctl --allow-path`.
    pub allow_paths: Vec<PathBuf>,
    /// Most samples in all the tests of a ruleset, which bounds the time
    /// `rctl test` takes.
    pub max_total_test_samples: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_depth: 64,
            max_regex_bytes: 1 << 20,
            max_regexes: 20_000,
            max_prefixes: 4_000_000,
            max_rules: 50_000,
            max_cond_nodes: 100_000,
            max_dnf_terms: 256,
            max_overlap_steps: 1_000_000,
            max_file_bytes: 256 << 20,
            max_test_samples: 1_000_000,
            max_total_test_samples: 10_000_000,
            max_dir_depth: 32,
            allow_paths: Vec::new(),
        }
    }
}

/// Everything one compilation produced.
#[derive(Debug)]
pub struct Compilation {
    /// Every file read.
    pub sources: SourceMap,
    /// Parsed files (for `rctl debug ast` and `rctl fmt`).
    pub files: Vec<(source::FileId, ast::File)>,
    /// Errors and warnings.
    pub diagnostics: Diagnostics,
    /// The ruleset, if there were no errors.
    pub ruleset: Option<Ruleset>,
    /// Lowered tests, if there were no errors.
    pub tests: Vec<spec::TestCase>,
    /// Merged (IPv4, IPv6) prefix counts per ipblock.
    pub ipblock_sizes: Vec<(String, usize, usize)>,
}

/// Compiles files and directories (every `.rctl` file below a directory)
/// as one ruleset.
pub fn compile_paths(paths: &[PathBuf], opts: &Options) -> Compilation {
    let mut diags = Diagnostics::default();
    let loaded = load::load_paths(paths, opts, &mut diags);
    finish(loaded, opts, diags)
}

/// Compiles one in-memory source (tests, fuzzing, embedding). Its root
/// (where `file` may read) is the directory of `name`, else the current
/// directory.
pub fn compile_str(name: &str, text: &str, opts: &Options) -> Compilation {
    let mut diags = Diagnostics::default();
    let (roots, errors) = files::Roots::new(&[PathBuf::from(name)], &opts.allow_paths);
    for d in errors {
        diags.push(d);
    }
    let mut loaded = load::Loaded {
        roots,
        ..Default::default()
    };
    let id = loaded.map.add(name.into(), text.into());
    if let Some(src) = loaded.map.get(id) {
        let f = parse::parse_file(
            src,
            id,
            &parse::ParseLimits {
                max_depth: opts.max_depth,
            },
            &mut diags,
        );
        loaded.files.push((id, f));
    }
    finish(loaded, opts, diags)
}

fn finish(loaded: load::Loaded, opts: &Options, mut diags: Diagnostics) -> Compilation {
    let load::Loaded {
        mut map,
        files,
        roots,
    } = loaded;
    let lowered = lower::lower(&files, &mut map, opts, &roots, &mut diags);
    let mut ruleset = None;
    let mut tests = Vec::new();
    if !diags.has_errors() {
        scan::check(&lowered.atoms, &lowered.atom_spans, &mut diags);
    }
    if !diags.has_errors() {
        check::check_rules(
            &lowered.rules,
            &lowered.atoms,
            &lowered.ipsets,
            opts,
            &mut diags,
        );
        let spans: Vec<source::Span> = lowered.rules.iter().map(|r| r.name).collect();
        let rule_spans: Vec<_> = lowered.rules.iter().map(|r| (r.name, r.when)).collect();
        let rules: Vec<ir::Rule> = lowered.rules.into_iter().map(|r| r.rule).collect();
        let plan = plan::plan(
            &rules,
            &lowered.atoms,
            &lowered.ipsets,
            opts,
            &mut diags,
            &spans,
        );
        let sources = map
            .files()
            .iter()
            .map(|f| SourceHash {
                path: f.path.display().to_string(),
                sha256: artifact::sha256(f.text.as_bytes()),
            })
            .collect();
        if !diags.has_errors() {
            let rs = Ruleset {
                sources,
                ipsets: lowered.ipsets,
                atoms: lowered.atoms,
                rules,
                plan,
            };
            // What the artifact decoder would refuse is refused here, so
            // that every compiled ruleset can be stored and read back.
            match validate::check_compiled(&rs, opts) {
                Ok(()) => {
                    ruleset = Some(rs);
                    tests = lowered.tests;
                }
                Err(v) => diags.push(validate::diagnostic(&rs, &v, &rule_spans)),
            }
        }
    }
    Compilation {
        sources: map,
        files,
        diagnostics: diags,
        ruleset,
        tests,
        ipblock_sizes: lowered.ipblock_sizes,
    }
}

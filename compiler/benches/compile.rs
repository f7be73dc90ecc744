//! Compiler benchmarks: the whole pipeline on 100,000 CIDRs in 50 ipblocks,
//! 1,000 patterns and 1,000 rules; parsing per source byte; list loading;
//! scaling to 10,000 and 50,000 rules shaped like real ones, and a
//! 100,000-term condition on one line.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rctl_compiler::check::check_rules;
use rctl_compiler::diag::Diagnostics;
use rctl_compiler::plan::SpannedRule;
use rctl_compiler::source::Span;
use rctl_compiler::{compile_paths, Options};
use rctl_testkit::{gen, realistic};
use std::path::PathBuf;

fn workdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rctl-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn bench(c: &mut Criterion) {
    let dir = workdir("full");
    let src_bytes = gen::write_ruleset(&dir, 50, 2_000, 1_000, 1_000);
    let paths = vec![dir.join("rules.rctl")];
    let opts = Options::default();
    let check = compile_paths(&paths, &opts);
    assert!(
        !check.diagnostics.has_errors(),
        "generated ruleset must compile"
    );
    let total: usize = check
        .ruleset
        .as_ref()
        .unwrap()
        .ipsets
        .iter()
        .map(|s| s.prefixes.len())
        .sum();
    eprintln!("generated: {src_bytes} bytes of rules, {total} prefixes after merging");

    let mut g = c.benchmark_group("compile");
    g.sample_size(10);
    g.bench_function(
        BenchmarkId::new("full", "100k_cidrs_50_blocks_1k_patterns_1k_rules"),
        |b| b.iter(|| compile_paths(&paths, &opts)),
    );
    // The floor: reading the same files and splitting them into lines.
    let lists: Vec<PathBuf> = (0..50)
        .map(|i| dir.join(format!("lists/block{i}.txt")))
        .chain(paths.clone())
        .collect();
    g.bench_function(BenchmarkId::new("baseline", "read_and_split_lines"), |b| {
        b.iter(|| {
            lists
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
                .sum::<usize>()
        })
    });
    g.finish();

    let text = std::fs::read_to_string(&paths[0]).unwrap();
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("rules_rctl", |b| {
        b.iter(|| {
            let f = rctl_compiler::source::SourceFile::new("r".into(), text.clone());
            let mut d = Default::default();
            rctl_compiler::parse::parse_file(&f, 0, &Default::default(), &mut d)
        })
    });
    g.finish();

    let one = workdir("list");
    std::fs::create_dir_all(one.join("lists")).unwrap();
    gen::write_ruleset(&one, 1, 100_000, 1, 1);
    let one_paths = vec![one.join("rules.rctl")];
    let mut g = c.benchmark_group("ipblock");
    g.sample_size(10);
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("load_and_merge_100k_list", |b| {
        b.iter(|| compile_paths(&one_paths, &opts))
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&one);
    scale(c, &opts);
}

/// Compile time against the number of rules, with the unreachable and
/// exemption analysis on (as `rctl check` runs it). Targets: 10,000 rules
/// in at most 1 s, 50,000 in at most 10 s.
fn scale(c: &mut Criterion, opts: &Options) {
    let mut g = c.benchmark_group("scale");
    g.sample_size(10);
    for rules in [10_000, 50_000] {
        let dir = workdir(&format!("scale{rules}"));
        let bytes = realistic::write_realistic(&dir, rules);
        let paths = vec![dir.join("rules.rctl")];
        let check = compile_paths(&paths, opts);
        assert!(!check.diagnostics.has_errors(), "must compile");
        let rs = check.ruleset.as_ref().unwrap();
        assert_eq!(rs.rules.len(), rules);
        eprintln!(
            "{rules} rules: {bytes} bytes, {} predicates, {} warnings",
            rs.atoms.len(),
            check.diagnostics.warning_count()
        );
        g.bench_function(BenchmarkId::new("realistic_rules", rules), |b| {
            b.iter(|| compile_paths(&paths, opts))
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The analysis alone (unreachable rules and exemption conflicts,
    // decided exactly, with witnesses), on the rules of a compiled
    // ruleset: what `check` adds to a compile.
    for rules in [1_000, 10_000] {
        let dir = workdir(&format!("analysis{rules}"));
        realistic::write_realistic(&dir, rules);
        let c = compile_paths(&[dir.join("rules.rctl")], opts);
        let rs = c.ruleset.expect("must compile");
        let spanned: Vec<SpannedRule> = rs
            .rules
            .iter()
            .map(|r| SpannedRule {
                rule: r.clone(),
                name: Span::default(),
                when: Span::default(),
                allow_undecided: false,
            })
            .collect();
        g.bench_function(BenchmarkId::new("analysis", rules), |b| {
            b.iter(|| {
                let mut d = Diagnostics::default();
                check_rules(&spanned, &rs.atoms, &rs.ipsets, opts, &mut d);
                d
            })
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    // One rule of 100,000 tests joined by `and` on a single line, and an
    // allow after it that it overlaps.
    let terms: Vec<String> = (0..100_000).map(|i| format!("path != \"/{i}\"")).collect();
    let src = format!(
        "rule r {{ when {} deny }}\nrule a {{ when path == \"/x\" allow }}\n",
        terms.join(" and ")
    );
    g.bench_function("and_100k_terms_one_line", |b| {
        b.iter(|| rctl_compiler::compile_str("t.rctl", &src, opts))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

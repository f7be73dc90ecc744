//! Compiler benchmarks: the whole pipeline on 100,000 CIDRs in 50 ipblocks,
//! 1,000 patterns and 1,000 rules; parsing per source byte; list loading.

#[path = "support/gen.rs"]
mod gen;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rctl_compiler::{compile_paths, Options};
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
}

criterion_group!(benches, bench);
criterion_main!(benches);

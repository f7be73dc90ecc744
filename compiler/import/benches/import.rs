//! Importing a generated ~10 MB ipblock (`RCTL_BENCH_IPBLOCK_MB`, default
//! 10), against two baselines on the same file in the same run: reading it
//! and splitting it into lines, and saphyr-parser's raw event stream (the
//! parser the importer reads YAML with). The ratios printed first come from
//! interleaved runs (median of seven each); criterion's figures follow.
//!
//! `nice -n 10 cargo bench -p rctl-import --bench import`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rctl_import::{import_path, Options};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A requestctl tree holding one ipblock of about `mb` megabytes: IPv4 and
/// IPv6 CIDRs of several lengths, one a line, as requestctl writes them.
fn tree(mb: usize) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("rctl-import-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("request-ipblocks/cloud");
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = String::from("comment: generated cloud ranges\ncidrs:\n");
    let mut i = 0u32;
    while s.len() < mb << 20 {
        if i % 3 == 2 {
            s.push_str(&format!("- 2001:db8:{:x}:{:x}::/64\n", i >> 16, i & 0xffff));
        } else {
            let len = [24, 28, 32][(i % 3) as usize];
            let a = i << 8 >> (32 - len) << (32 - len);
            s.push_str(&format!(
                "- {}.{}.{}.{}/{len}\n",
                10 + (a >> 24) % 200,
                (a >> 16) & 255,
                (a >> 8) & 255,
                a & 255
            ));
        }
        i += 1;
    }
    let file = dir.join("big.yaml");
    std::fs::write(&file, s).unwrap();
    (root, file)
}

fn read_and_split(file: &Path) -> usize {
    std::fs::read_to_string(file).unwrap().lines().count()
}

fn parse_events(text: &str) -> usize {
    saphyr_parser::Parser::new_from_str(text).count()
}

fn import(root: &Path) -> usize {
    let imp = import_path(root, &Options::default());
    assert!(!imp.diagnostics.has_errors(), "the generated tree imports");
    imp.rulesets.len()
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64()
}

fn bench(c: &mut Criterion) {
    let mb = std::env::var("RCTL_BENCH_IPBLOCK_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (root, file) = tree(mb);
    let text = std::fs::read_to_string(&file).unwrap();
    let bytes = text.len() as u64;
    let lines = text.lines().count();

    // Interleaved, so that the machine's load hits all three alike.
    let (mut base, mut events, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..7 {
        let t = Instant::now();
        std::hint::black_box(read_and_split(&file));
        base.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(parse_events(&text));
        events.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(import(&root));
        full.push(t.elapsed());
    }
    let (base, events, full) = (median(base), median(events), median(full));
    eprintln!(
        "ipblock of {:.1} MB, {lines} CIDRs: import {:.3} s; read+split lines {:.4} s \
         (import is {:.0}x); saphyr-parser events {:.3} s (import is {:.2}x)",
        bytes as f64 / 1e6,
        full,
        base,
        full / base,
        events,
        full / events,
    );

    let mut g = c.benchmark_group("import_ipblock");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Bytes(bytes));
    g.bench_function("read_and_split_lines", |b| b.iter(|| read_and_split(&file)));
    g.bench_function("saphyr_parser_events", |b| b.iter(|| parse_events(&text)));
    g.bench_function("import_path", |b| b.iter(|| import(&root)));
    g.finish();
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(benches, bench);
criterion_main!(benches);

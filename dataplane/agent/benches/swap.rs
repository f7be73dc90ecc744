//! The agent's swap: what `prepare` does for `rctl apply` (decode the
//! artifact, build the engine, link limiter state from the generation in
//! force), for the shipped rules and for 10,000 generated rules. The
//! commit itself is one pointer swap.
//!
//! `cargo bench -p rctl-agent --bench swap`

use criterion::{criterion_group, criterion_main, Criterion};
use rctl_agent::control::build;
use rctl_testkit::gen;
use std::path::{Path, PathBuf};

const MAX_KEYS: usize = 1 << 20;

fn artifact(paths: &[PathBuf]) -> Vec<u8> {
    let c = rctl_compiler::compile_paths(paths, &Default::default());
    rctl_compiler::artifact::encode(&c.ruleset.expect("compiles"))
}

fn generated(rules: usize) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("rctl-swap-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    gen::write_ruleset(&dir, 50, 2_000, rules, rules);
    let a = artifact(&[dir.join("rules.rctl")]);
    let _ = std::fs::remove_dir_all(&dir);
    a
}

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut g = c.benchmark_group("prepare");
    g.sample_size(10);
    for (name, bytes) in [
        ("shipped", artifact(&[root.join("rules")])),
        ("10000", generated(10_000)),
    ] {
        let (old, _, _) = build(&bytes, None, MAX_KEYS, 1, None).expect("builds");
        eprintln!("{name}: {} bytes", bytes.len());
        g.bench_function(name, |b| {
            b.iter(|| build(&bytes, None, MAX_KEYS, 2, Some(&old)).expect("builds"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

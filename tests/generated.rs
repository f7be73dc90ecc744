//! The benchmark's generated ruleset is a valid, realistic ruleset.

use crate::gen;
use crate::util::*;

#[test]
fn generated_benchmark_ruleset_compiles_and_plans() {
    let dir = tempdir("gen");
    gen::write_ruleset(&dir, 5, 200, 100, 100);
    let c = rctl_compiler::compile_paths(&[dir.join("rules.rctl")], &Default::default());
    let errors: Vec<String> = c
        .diagnostics
        .iter()
        .filter(|d| d.severity == rctl_compiler::diag::Severity::Error)
        .map(|d| d.render(&c.sources))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let rs = c.ruleset.unwrap();
    assert_eq!(rs.rules.len(), 100);
    // Allows come first (priority 1), L3/L4 drops are offloaded, allows with
    // an HTTP part exempt their address projection in XDP.
    assert_eq!(rs.rules[0].action, rctl_compiler::ir::Action::Allow);
    let xdp = rs.plan.iter().filter(|p| p.xdp.is_some()).count();
    assert_eq!(xdp, 20);
}

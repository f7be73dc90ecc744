//! Import arbitrary `requestctl dump` text: never panic, never hang; every
//! diagnostic renders; every output directory and file name stays inside
//! the output directory; and whatever imports must check: each ruleset
//! written compiles without errors (the importer's promise, `rctl check`
//! accepts what it writes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_compiler::{compile_str, Options as CompileOptions};
use rctl_import::{import_dump_text, Options};
use std::path::{Component, Path};

fn inside(p: &str) -> bool {
    Path::new(p).components().all(|c| matches!(c, Component::Normal(_)))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Both modes: strict, and --lossy (which keeps more, as comments).
    let opts = Options { lossy: data.len() % 2 == 1, ..Options::default() };
    let imp = import_dump_text("dump.yaml", text.to_owned(), &opts);
    for d in imp.diagnostics.iter() {
        let _ = d.render(&imp.sources);
    }
    for rs in &imp.rulesets {
        assert!(inside(&rs.dir), "{:?}", rs.dir);
        // One ruleset's files compiled together, as `rctl check DIR` does.
        let mut all = String::new();
        for f in &rs.files {
            assert!(inside(&f.name) && !f.name.contains('/'), "{:?}", f.name);
            all.push_str(&f.text);
            all.push('\n');
        }
        let c = compile_str("imported.rctl", &all, &CompileOptions::default());
        let errors: Vec<String> = c
            .diagnostics
            .iter()
            .filter(|d| d.severity == rctl_compiler::diag::Severity::Error)
            .map(|d| d.render(&c.sources))
            .collect();
        assert!(errors.is_empty(), "{all}\n{errors:#?}");
    }
});

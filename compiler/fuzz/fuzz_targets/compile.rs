//! Parse and check arbitrary input: never panic, never hang; whatever
//! compiles must survive an artifact round trip (so the compiler never breaks
//! an invariant the decoder checks) and fmt must be idempotent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_compiler::{artifact, compile_str, Options};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let c = compile_str("fuzz.rctl", text, &Options::default());
    for d in c.diagnostics.iter() {
        let _ = d.render(&c.sources);
        // The compiler's final check of what it produced (validate.rs)
        // must never find one of its own invariants broken.
        assert!(!d.hint.as_deref().is_some_and(|h| h.contains("bug in rctl")), "{}", d.render(&c.sources));
    }
    if let Some(rs) = &c.ruleset {
        let bytes = artifact::encode(rs);
        assert_eq!(&artifact::decode(&bytes).expect("own artifact decodes"), rs);
    }
    let syntax_ok = !c.diagnostics.iter().any(|d| d.code == "E0001" || d.code == "E0004");
    if let (Some(src), true) = (c.sources.get(0), syntax_ok) {
        if let Some((_, file)) = c.files.first() {
            let once = rctl_compiler::fmt::format_file(file, src);
            let again = compile_str("fuzz.rctl", &once, &Options::default());
            if let (Some(src2), Some((_, f2))) = (again.sources.get(0), again.files.first()) {
                assert_eq!(rctl_compiler::fmt::format_file(f2, src2), once, "fmt is idempotent");
            }
        }
    };
});

//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

mod util;

mod artifact;
mod cli;
mod diagnostics;
mod format;
mod language;

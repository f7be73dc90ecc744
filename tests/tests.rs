//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

mod util;

#[path = "../compiler/benches/support/gen.rs"]
mod gen;
#[path = "../compiler/benches/support/realistic.rs"]
mod realistic;

mod artifact;
mod cli;
mod corpus;
mod diagnostics;
mod dryrun;
mod format;
mod generated;
mod hostile;
mod language;
mod limits;
mod netns;
mod xdp;
mod xdp_clock;

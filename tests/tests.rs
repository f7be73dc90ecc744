//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

mod util;

#[path = "../compiler/benches/support/gen.rs"]
mod gen;

mod agent;
mod artifact;
mod cli;
mod corpus;
mod diagnostics;
mod dryrun;
mod files;
mod format;
mod generated;
mod host_state;
mod hostile;
mod language;
mod netns;
mod xdp;
mod xdp_clock;
mod xdp_race;

//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

mod util;

#[path = "../compiler/benches/support/gen.rs"]
mod gen;

#[path = "../dataplane/benches/support/capgen.rs"]
mod capgen;

mod agent;
mod artifact;
mod cli;
mod corpus;
mod diagnostics;
mod dryrun;
mod dryrun_memory;
mod files;
mod format;
mod generated;
mod host_state;
mod hostile;
mod invariants;
mod language;
mod netns;
mod xdp;
mod xdp_clock;
mod xdp_dir;
mod xdp_race;

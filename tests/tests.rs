//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

mod servers;
mod util;

#[path = "../compiler/benches/support/gen.rs"]
mod gen;
#[path = "../compiler/benches/support/realistic.rs"]
mod realistic;

#[path = "../dataplane/benches/support/capgen.rs"]
mod capgen;

mod agent;
mod artifact;
mod artifact_layout;
mod cli;
mod corpus;
mod diagnostics;
mod dryrun;
mod dryrun_memory;
mod edge;
mod files;
mod fleet;
mod format;
mod generated;
mod host_state;
mod hostile;
mod import;
mod invariants;
mod language;
mod limits;
mod logs;
mod native;
mod neighbours;
mod netns;
mod shared_throttle;
mod transcripts;
mod witness;
mod xdp;
mod xdp_clock;
mod xdp_dir;
mod xdp_race;

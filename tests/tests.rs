//! Integration tests: the language, its diagnostics, the artifact, the
//! formatter and the `rctl` binary, on real inputs.

//!
//! What they share with other crates' tests and benchmarks (servers,
//! network labs, generated inputs) is in `tests/support`, the
//! `rctl-testkit` crate; `util` holds what only these need.

mod util;

mod agent;
mod artifact;
mod artifact_layout;
mod cli;
mod corpus;
mod diagnostics;
mod dryrun;
mod dryrun_memory;
mod dryrun_report;
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
mod package;
mod requestctl_emit;
mod shared_throttle;
mod suggest;
mod transcripts;
mod witness;
mod xdp;
mod xdp_clock;
mod xdp_dir;
mod xdp_race;

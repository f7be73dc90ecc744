#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod capgen;
pub mod frame;
pub mod gen;
pub mod lab;
pub mod mix;
pub mod proc;
pub mod realistic;
pub mod servers;
pub mod skip;
#[cfg(feature = "wirefilter")]
pub mod wf;
pub mod xdp;

/// The median of `v` (the upper one of an even count), for benchmarks.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A small deterministic generator (xorshift64) for randomized tests and
/// generated inputs: the same seed gives the same values on every run.
/// ([`gen::Rng`] is another stream, which the generated rulesets keep.)
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    #[expect(
        clippy::should_implement_trait,
        reason = "an endless stream: `Option` would only be unwrapped"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A random element of `v`.
    pub fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

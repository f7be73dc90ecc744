//! rctl's decision engine for Python (the `rctl` wheel, built by
//! maturin with the feature `extension-module`): a compiled artifact
//! decides Arrow record batches of `webrequest` requests in bulk, and
//! runs the stages of a dry run split over many workers, which the
//! `rctl.spark` module drives on Spark. The manual is `README.md`
//! beside this crate.
//!
//! Everything the module does is in [`batch`], in plain Rust (tested and
//! linted with the workspace); `py` (with the feature only) moves
//! batches between pyarrow and Rust through the Arrow C data interface
//! and raises Python exceptions for [`batch::Error`].

#![warn(missing_docs)]

pub mod batch;
#[cfg(feature = "extension-module")]
mod py;

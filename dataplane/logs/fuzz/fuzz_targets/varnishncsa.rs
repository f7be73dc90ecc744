//! The varnishncsa parser and custom varnishncsa formats: arbitrary lines never
//! panic, and every line is judged or reported bad (see `common`).
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::run(data, "varnishncsa", Some("varnishncsa")));

//! The nginx-combined parser and custom nginx formats: arbitrary lines never
//! panic, and every line is judged or reported bad (see `common`).
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::run(data, "nginx-combined", Some("nginx")));

//! The haproxy-httplog and haproxy-clf parsers and custom haproxy formats:
//! arbitrary lines never panic, and every line is judged or reported bad
//! (see `common`).
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    common::run(data, "haproxy-httplog", Some("haproxy"));
    common::run(data, "haproxy-clf", None);
});

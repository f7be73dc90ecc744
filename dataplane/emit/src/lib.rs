//! scaffold until i11-c lands
pub mod haproxy;
pub mod pcre;
pub mod vcl;

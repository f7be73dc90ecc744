//! Reading captures for `rctl dry-run`: the pcap/pcapng reader, packet
//! decoding, TCP reassembly and HTTP request parsing.

pub mod decode;
pub mod pcap;
pub mod stream;

//! The design card's libraries against rctl's hand-written capture code, on
//! the same capture in the same run: pcap-parser's `LegacyPcapReader`
//! against `CaptureReader` (reading every record), and etherparse's
//! `SlicedPacket` against `decode` (the addresses, protocol, ports, TCP
//! sequence and flags, and payload of every frame). Each side computes the
//! same digest of what it extracted, which must agree, so neither can skip
//! work. Times are the thread's CPU time (the passes are single-threaded),
//! medians over interleaved runs; decoding is timed as read-and-decode
//! minus read (the reader is rctl's in both).

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{LegacyPcapReader, PcapBlockOwned, PcapError};
use rctl_dataplane::capture::decode::decode;
use rctl_dataplane::capture::pcap::{CaptureReader, Frame, FrameRef};
use std::net::IpAddr;
use std::path::Path;

/// What a pass extracted: frames, and a digest of their contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Digest {
    pub frames: u64,
    pub sum: u64,
}

impl Digest {
    fn add(&mut self, x: u64) {
        self.sum = self.sum.wrapping_mul(31).wrapping_add(x);
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one digest step per extracted field"
    )]
    fn packet(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        ports: (u16, u16),
        seq: u32,
        flags: u8,
        payload: usize,
    ) {
        let ip = |a: IpAddr| match a {
            IpAddr::V4(v) => u64::from(u32::from(v)),
            IpAddr::V6(v) => u128::from(v) as u64,
        };
        self.add(ip(src) ^ ip(dst).rotate_left(32));
        self.add(u64::from(proto) << 48 | u64::from(ports.0) << 16 | u64::from(ports.1));
        self.add(u64::from(seq) << 8 | u64::from(flags));
        self.add(payload as u64);
    }
}

/// Calls `f` on every record rctl's reader lends.
fn each_frame(path: &Path, mut f: impl FnMut(FrameRef<'_>)) {
    let file = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).unwrap());
    let mut r = CaptureReader::new(file).unwrap();
    let mut frame = Frame {
        time_ns: 0,
        linktype: 0,
        data: Vec::new(),
        orig_len: 0,
        offset: 0,
    };
    while let Some(x) = r.next_frame_ref(&mut frame).unwrap() {
        f(x);
    }
}

/// Reads every record with rctl's reader.
pub fn read_ours(path: &Path) -> Digest {
    let mut d = Digest::default();
    each_frame(path, |f| {
        d.frames += 1;
        d.add(f.data.len() as u64 ^ u64::from(f.orig_len) << 32);
    });
    d
}

/// Reads every record with pcap-parser.
pub fn read_pcap_parser(path: &Path) -> Digest {
    let mut d = Digest::default();
    let mut r = LegacyPcapReader::new(1 << 20, std::fs::File::open(path).unwrap()).unwrap();
    loop {
        match r.next() {
            Ok((offset, block)) => {
                if let PcapBlockOwned::Legacy(b) = block {
                    d.frames += 1;
                    d.add(b.data.len() as u64 ^ u64::from(b.origlen) << 32);
                }
                r.consume(offset);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => r.refill().unwrap(),
            Err(e) => panic!("pcap-parser: {e:?}"),
        }
    }
    d
}

/// Reads with rctl's reader and decodes with rctl's decoder.
pub fn decode_ours(path: &Path) -> Digest {
    let mut d = Digest::default();
    each_frame(path, |f| {
        if let Ok(p) = decode(f.linktype, f.data, f.orig_len) {
            d.frames += 1;
            d.packet(
                p.src,
                p.dst,
                p.proto,
                (p.sport, p.dport),
                p.seq,
                p.flags,
                p.payload.len(),
            );
        }
    });
    d
}

/// Reads with rctl's reader and decodes Ethernet frames with etherparse.
pub fn decode_etherparse(path: &Path) -> Digest {
    let mut d = Digest::default();
    each_frame(path, |f| {
        assert_eq!(f.linktype, 1, "the bench capture is Ethernet");
        let Ok(p) = SlicedPacket::from_ethernet(f.data) else {
            return;
        };
        let (src, dst, proto): (IpAddr, IpAddr, u8) = match &p.net {
            Some(NetSlice::Ipv4(v)) => {
                let h = v.header();
                (
                    h.source_addr().into(),
                    h.destination_addr().into(),
                    h.protocol().0,
                )
            }
            Some(NetSlice::Ipv6(v)) => {
                let h = v.header();
                (
                    h.source_addr().into(),
                    h.destination_addr().into(),
                    v.payload().ip_number.0,
                )
            }
            _ => return,
        };
        let (ports, seq, flags, payload) = match &p.transport {
            Some(TransportSlice::Tcp(t)) => {
                let flags = u8::from(t.fin())
                    | u8::from(t.syn()) << 1
                    | u8::from(t.rst()) << 2
                    | u8::from(t.psh()) << 3
                    | u8::from(t.ack()) << 4
                    | u8::from(t.urg()) << 5
                    | u8::from(t.ece()) << 6
                    | u8::from(t.cwr()) << 7;
                (
                    (t.source_port(), t.destination_port()),
                    t.sequence_number(),
                    flags,
                    t.payload().len(),
                )
            }
            Some(TransportSlice::Udp(u)) => (
                (u.source_port(), u.destination_port()),
                0,
                0,
                u.payload().len(),
            ),
            _ => ((0, 0), 0, 0, 0),
        };
        d.frames += 1;
        d.packet(src, dst, proto, ports, seq, flags, payload);
    });
    d
}

/// The thread CPU time `f` takes, in seconds, and its result.
fn timed(f: impl Fn() -> Digest) -> (f64, Digest) {
    let start = rctl_testkit::proc::thread_cpu();
    let out = f();
    (
        (rctl_testkit::proc::thread_cpu() - start).as_secs_f64(),
        out,
    )
}

/// Runs every pass `runs` times, interleaved, and prints the comparison.
pub fn compare(path: &Path, runs: usize) {
    let mut read = (Vec::new(), Vec::new());
    let mut dec = (Vec::new(), Vec::new());
    let mut digests = None;
    for _ in 0..runs {
        let (a, da) = timed(|| read_ours(path));
        let (b, db) = timed(|| read_pcap_parser(path));
        let (c, dc) = timed(|| decode_ours(path));
        let (e, de) = timed(|| decode_etherparse(path));
        assert_eq!(da, db, "both readers see the same records");
        assert_eq!(dc, de, "both decoders extract the same fields");
        read.0.push(a);
        read.1.push(b);
        dec.0.push(c);
        dec.1.push(e);
        digests = Some((da, dc));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ro, rp) = (med(&mut read.0), med(&mut read.1));
    let (dco, dce) = (med(&mut dec.0), med(&mut dec.1));
    let size = std::fs::metadata(path).unwrap().len() as f64 / 1e6;
    let (records, packets) = digests.map_or((0, 0), |(r, p)| (r.frames, p.frames));
    println!("libraries, CPU time, median of {runs} interleaved runs on the same {size:.0} MB capture ({records} records, {packets} IP packets):");
    println!(
        "  read:   rctl CaptureReader {ro:.3} s ({:.0} MB/s), pcap-parser LegacyPcapReader {rp:.3} s ({:.0} MB/s): the library {:+.0}%",
        size / ro,
        size / rp,
        (rp / ro - 1.0) * 100.0
    );
    let (xo, xe) = (dco - ro, dce - ro);
    println!(
        "  decode: rctl decode {xo:.3} s, etherparse SlicedPacket {xe:.3} s (read and decode {dco:.3} s and {dce:.3} s, less the read): the library {:+.0}%",
        (xe / xo - 1.0) * 100.0
    );
}

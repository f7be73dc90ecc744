//! Synthetic captures. [`write()`] writes a large one: many keep-alive
//! HTTP/1.1 flows, each a handshake, requests (some with bodies, some split
//! across segments), responses and ACKs, interleaved across flows the way
//! a busy edge interleaves them. [`Shape`] varies it (every request cut
//! into tiny segments, long heads), and [`Pcap`] writes any other shape.

use crate::Rng;
use std::io::Write;

/// An IPv4 endpoint.
pub type Endpoint = ([u8; 4], u16);

/// A classic pcap file (µs timestamps, Ethernet) being written; IPv4/TCP
/// frames with checksums left zero (nothing here checks them).
pub struct Pcap<W: Write> {
    out: W,
    pkt: Vec<u8>,
    /// Bytes written so far, the file header included.
    pub written: u64,
    /// Frames written so far.
    pub packets: u64,
}

impl<W: Write> Pcap<W> {
    /// Starts a capture: writes the file header.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(&[
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ])?;
        Ok(Pcap {
            out,
            pkt: Vec::with_capacity(2048),
            written: 24,
            packets: 0,
        })
    }

    /// Writes one TCP segment from `src` to `dst` at `t_us`.
    pub fn tcp(
        &mut self,
        t_us: u64,
        (src, sport): Endpoint,
        (dst, dport): Endpoint,
        seq: u32,
        flags: u8,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let out = &mut self.pkt;
        out.clear();
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00]);
        let total = (20 + 20 + payload.len()) as u16;
        out.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ]);
        out.extend_from_slice(&src);
        out.extend_from_slice(&dst);
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&dport.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        out.extend_from_slice(payload);
        let f = &mut self.out;
        f.write_all(&((t_us / 1_000_000) as u32).to_le_bytes())?;
        f.write_all(&((t_us % 1_000_000) as u32).to_le_bytes())?;
        f.write_all(&(out.len() as u32).to_le_bytes())?;
        f.write_all(&(out.len() as u32).to_le_bytes())?;
        f.write_all(out)?;
        self.written += 16 + out.len() as u64;
        self.packets += 1;
        Ok(())
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

const UAS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
    "curl/8.4.0",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
];

/// How [`write_shaped`] varies the capture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape {
    /// Cut every request into segments of at most this many bytes (as a
    /// client trickling its request, or a hostile one, would).
    pub segment: Option<usize>,
    /// Bytes of extra `X-Padding` header in every request head.
    pub padding: usize,
}

/// Writes about `bytes` of capture to `path`; returns (packets, requests).
pub fn write(path: &std::path::Path, bytes: u64) -> std::io::Result<(u64, u64)> {
    write_shaped(path, bytes, Shape::default())
}

/// Like [`write()`], in another [`Shape`].
pub fn write_shaped(
    path: &std::path::Path,
    bytes: u64,
    shape: Shape,
) -> std::io::Result<(u64, u64)> {
    write_live(path, bytes, shape, FLOWS)
}

/// How many flows [`write()`] keeps live at once.
pub const FLOWS: usize = 64;

/// Like [`write_shaped`], with `live` flows live at once (a new flow takes
/// each finished one's place), so that a replay's flow table holds that
/// many.
pub fn write_live(
    path: &std::path::Path,
    bytes: u64,
    shape: Shape,
    live: usize,
) -> std::io::Result<(u64, u64)> {
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut f = Pcap::new(file)?;
    let mut rng = Rng(0x5eed_cafe);
    let mut requests = 0u64;
    let mut t_us: u64 = 1_760_000_000_000_000;
    // `live` flows at once, each doing 1 to 40 requests, interleaved.
    struct Flow {
        client: [u8; 4],
        sport: u16,
        cseq: u32,
        sseq: u32,
        left: u32,
        ua: usize,
    }
    let server = ([198, 51, 100, 10], 80);
    let mut flows: Vec<Flow> = Vec::new();
    let body = vec![b'x'; 300];
    let padding = if shape.padding > 0 {
        format!("X-Padding: {}\r\n", "p".repeat(shape.padding))
    } else {
        String::new()
    };
    let response = {
        let mut r = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=UTF-8\r\nContent-Length: 1000\r\nCache-Control: private, s-maxage=0, max-age=0\r\n\r\n".to_vec();
        r.extend(std::iter::repeat_n(b'<', 1000));
        r
    };
    while f.written < bytes {
        while flows.len() < live {
            let c = rng.next() as u32;
            // Public unicast sources (11.0.0.0 to 98.255.255.255), so that no
            // shipped rule drops them as bogons.
            let client = [
                11 + ((c >> 24) % 88) as u8,
                (c >> 16) as u8,
                (c >> 8) as u8,
                c as u8,
            ];
            let mut fl = Flow {
                client,
                sport: 1024 + rng.below(60_000) as u16,
                cseq: rng.next() as u32,
                sseq: rng.next() as u32,
                left: 1 + rng.below(40) as u32,
                ua: rng.below(UAS.len() as u64) as usize,
            };
            let c = (fl.client, fl.sport);
            f.tcp(t_us, c, server, fl.cseq, 0x02, b"")?;
            f.tcp(t_us, server, c, fl.sseq, 0x12, b"")?;
            fl.cseq = fl.cseq.wrapping_add(1);
            fl.sseq = fl.sseq.wrapping_add(1);
            flows.push(fl);
        }
        let i = rng.below(flows.len() as u64) as usize;
        let fl = &mut flows[i];
        let c = (fl.client, fl.sport);
        t_us += 1 + rng.below(20);
        let kind = rng.below(10);
        let path = match rng.below(4) {
            0 => format!("/wiki/Article_{}", rng.below(1_000_000)),
            1 => format!(
                "/w/api.php?action=query&format=json&titles=T{}",
                rng.below(100_000)
            ),
            2 => format!(
                "/sparql?query=SELECT%20%3Fx%20WHERE%20%7B%20wd%3AQ{}%20%3Fp%20%3Fx%20%7D",
                rng.below(1_000_000)
            ),
            _ => format!("/api/rest_v1/page/html/Title_{}", rng.below(100_000)),
        };
        let mut req = if kind == 0 {
            format!("POST {path} HTTP/1.1\r\nHost: query.wikidata.org\r\nUser-Agent: {}\r\n{padding}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n", UAS[fl.ua], body.len()).into_bytes()
        } else {
            format!("GET {path} HTTP/1.1\r\nHost: en.wikipedia.org\r\nUser-Agent: {}\r\n{padding}Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\nCookie: WMF-Last-Access=30-Nov-2026; GeoIP=US:CA:San_Francisco\r\n\r\n", UAS[fl.ua]).into_bytes()
        };
        if kind == 0 {
            req.extend_from_slice(&body);
        }
        requests += 1;
        // Split in two (one request in ten), or in `shape.segment` bytes.
        let parts: Vec<&[u8]> = match shape.segment {
            Some(n) => req.chunks(n.max(1)).collect(),
            None if kind == 1 => {
                let (a, b) = req.split_at(req.len() / 2);
                vec![a, b]
            }
            None => vec![&req],
        };
        let mut seq = fl.cseq;
        for part in parts {
            f.tcp(t_us, c, server, seq, 0x18, part)?;
            seq = seq.wrapping_add(part.len() as u32);
        }
        fl.cseq = fl.cseq.wrapping_add(req.len() as u32);
        f.tcp(t_us + 50, server, c, fl.sseq, 0x18, &response)?;
        fl.sseq = fl.sseq.wrapping_add(response.len() as u32);
        f.tcp(t_us + 60, c, server, fl.cseq, 0x10, b"")?;
        fl.left -= 1;
        if fl.left == 0 {
            f.tcp(t_us + 70, c, server, fl.cseq, 0x11, b"")?;
            flows.swap_remove(i);
        }
    }
    let packets = f.packets;
    f.finish()?;
    Ok((packets, requests))
}

/// Where benchmarks keep their generated captures: `rctl-bench` under
/// `CARGO_TARGET_DIR`, else under the workspace's `target` (created).
pub fn bench_dir() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or(root.join("target"))
        .join("rctl-bench");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The [`write`] capture of `mb` megabytes in [`bench_dir`], written the
/// first time it is asked for (and said so on stderr).
pub fn cached(mb: u64) -> std::path::PathBuf {
    let path = bench_dir().join(format!("large-{mb}mb.pcap"));
    if !path.exists() {
        let t = std::time::Instant::now();
        let (p, r) = write(&path, mb << 20).unwrap();
        eprintln!(
            "wrote {} ({p} packets, {r} requests) in {:.1?}",
            path.display(),
            t.elapsed()
        );
    }
    path
}

//! A streaming reader for pcap (microsecond and nanosecond, either byte
//! order) and pcapng (section headers, interface descriptions, enhanced and
//! simple packet blocks; other blocks are skipped). It reads from any
//! `Read`, keeps the byte offset of everything, and reports malformed input
//! with the offset where it was found; what was read before stays valid.

use std::fmt;
use std::io::{BufRead, Read};

/// Link types this reader's users decode (LINKTYPE_* values).
pub mod linktype {
    /// BSD loopback: a 4-byte address family in host order.
    pub const NULL: u32 = 0;
    /// Ethernet II.
    pub const ETHERNET: u32 = 1;
    /// Raw IP (the old DLT_RAW values on some systems).
    pub const RAW_OLD: u32 = 12;
    /// Raw IP, as OpenBSD writes it.
    pub const RAW_OLD2: u32 = 14;
    /// Raw IPv4 or IPv6.
    pub const RAW: u32 = 101;
    /// Linux cooked capture v1 (`tcpdump -i any`).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: u32 = 276;
}

/// Whether this reader's users decode the link type.
pub fn supported(link: u32) -> bool {
    use linktype::*;
    matches!(
        link,
        NULL | ETHERNET | RAW_OLD | RAW_OLD2 | RAW | LINUX_SLL | IPV4 | IPV6 | LINUX_SLL2
    )
}

fn unsupported(offset: u64, link: u32) -> CaptureError {
    CaptureError { offset, message: format!("link type {link} is not supported (Ethernet, Linux cooked v1/v2, raw IP and BSD loopback are)") }
}

/// One captured packet.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Capture time, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// Link type of the interface it was captured on.
    pub linktype: u32,
    /// The captured bytes (possibly cut by the snap length).
    pub data: Vec<u8>,
    /// The packet's length on the wire.
    pub orig_len: u32,
    /// Byte offset of the packet's record in the file.
    pub offset: u64,
}

/// A frame borrowed from the reader's buffer (or from a spare [`Frame`]).
#[derive(Debug, Clone, Copy)]
pub struct FrameRef<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// Link type of the interface it was captured on.
    pub linktype: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The packet's length on the wire.
    pub orig_len: u32,
    /// Byte offset of the packet's record in the file.
    pub offset: u64,
}

impl Frame {
    /// This frame, borrowed.
    pub fn as_ref(&self) -> FrameRef<'_> {
        FrameRef {
            time_ns: self.time_ns,
            linktype: self.linktype,
            data: &self.data,
            orig_len: self.orig_len,
            offset: self.offset,
        }
    }
}

/// Why a capture could not be read further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError {
    /// Byte offset of the problem.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte offset {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for CaptureError {}

#[derive(Debug, Clone, Copy)]
enum Format {
    Pcap {
        big: bool,
        nanos: bool,
        linktype: u32,
        snaplen: u32,
    },
    PcapNg {
        big: bool,
    },
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    /// Timestamp units per second.
    units: u64,
}

/// The largest record this reader accepts (a 256 MiB block is corrupt, not
/// a packet).
const MAX_RECORD: usize = 16 << 20;

/// Reads frames one at a time.
pub struct CaptureReader<R> {
    inner: R,
    offset: u64,
    /// Bytes of the input's buffer handed out by the last
    /// [`CaptureReader::next_frame_ref`], consumed on the next call.
    lent: usize,
    format: Format,
    interfaces: Vec<Interface>,
    block: Vec<u8>,
}

impl<R: BufRead> CaptureReader<R> {
    /// The next frame, `Ok(None)` at a clean end of file. A classic pcap
    /// record that sits whole in the input's buffer is lent in place, with
    /// no copy; anything else is read into `spare`.
    pub fn next_frame_ref<'a>(
        &'a mut self,
        spare: &'a mut Frame,
    ) -> Result<Option<FrameRef<'a>>, CaptureError> {
        self.inner.consume(std::mem::take(&mut self.lent));
        if let Format::Pcap {
            big,
            nanos,
            linktype,
            snaplen,
        } = self.format
        {
            // Look first (owned results, so the borrow ends), then lend.
            let whole = match self.inner.fill_buf() {
                Ok(buf) if buf.len() >= 16 => {
                    let caplen = u32_at(&buf[8..], big) as usize;
                    let sane = caplen <= MAX_RECORD
                        && (snaplen == 0 || caplen <= snaplen.max(262_144) as usize);
                    (sane && buf.len() >= 16 + caplen).then_some(caplen)
                }
                _ => None,
            };
            if let Some(caplen) = whole {
                let start = self.offset;
                let buf = self.inner.fill_buf().map_err(|e| CaptureError {
                    offset: start,
                    message: format!("read error: {e}"),
                })?;
                let (sec, frac) = (
                    u64::from(u32_at(buf, big)),
                    u64::from(u32_at(&buf[4..], big)),
                );
                self.lent = 16 + caplen;
                self.offset += self.lent as u64;
                return Ok(Some(FrameRef {
                    time_ns: sec * 1_000_000_000 + if nanos { frac } else { frac * 1_000 },
                    linktype,
                    data: &buf[16..16 + caplen],
                    orig_len: u32_at(&buf[12..], big),
                    offset: start,
                }));
            }
        }
        Ok(self.next_frame_into(spare)?.then(|| spare.as_ref()))
    }
}

fn u16_at(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

fn u32_at(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header and detects the format.
    pub fn new(mut inner: R) -> Result<Self, CaptureError> {
        let mut magic = [0u8; 4];
        let n = read_full(&mut inner, &mut magic).map_err(|m| CaptureError {
            offset: 0,
            message: m,
        })?;
        if n == 0 {
            return Err(CaptureError {
                offset: 0,
                message: "empty file: no capture header".into(),
            });
        }
        if n < 4 {
            return Err(CaptureError {
                offset: n as u64,
                message: "truncated capture header".into(),
            });
        }
        let mut r = CaptureReader {
            inner,
            offset: 4,
            lent: 0,
            format: Format::PcapNg { big: false },
            interfaces: Vec::new(),
            block: Vec::new(),
        };
        match magic {
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d] => {
                let big = magic[0] == 0xa1;
                let nanos = matches!(magic, [0x4d, ..] | [.., 0x4d]);
                let mut rest = [0u8; 20];
                r.fill(&mut rest, "truncated pcap file header")?;
                let snaplen = u32_at(&rest[12..], big);
                let linktype = u32_at(&rest[16..], big) & 0x0fff_ffff;
                if !supported(linktype) {
                    return Err(unsupported(20, linktype));
                }
                r.format = Format::Pcap {
                    big,
                    nanos,
                    linktype,
                    snaplen,
                };
            }
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                let mut len = [0u8; 4];
                r.fill(&mut len, "truncated pcapng section header")?;
                r.section_rest(0, len)?;
            }
            _ => {
                return Err(CaptureError {
                    offset: 0,
                    message: format!(
                        "not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})",
                        magic[0], magic[1], magic[2], magic[3]
                    ),
                })
            }
        }
        Ok(r)
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<(), CaptureError> {
        let n = read_full(&mut self.inner, buf).map_err(|m| CaptureError {
            offset: self.offset,
            message: m,
        })?;
        if n < buf.len() {
            return Err(CaptureError {
                offset: self.offset + n as u64,
                message: what.to_string(),
            });
        }
        self.offset += n as u64;
        Ok(())
    }

    /// Reads a section header block whose type bytes were already read.
    /// Reads the rest of a section header block, whose 4 type bytes and 4
    /// length bytes (`len_bytes`, in the section's yet unknown byte order)
    /// were read; `start` is the block's offset. Sets the byte order.
    fn section_rest(&mut self, start: u64, len_bytes: [u8; 4]) -> Result<(), CaptureError> {
        let mut bom = [0u8; 4];
        self.fill(&mut bom, "truncated pcapng section header")?;
        let big = match bom {
            [0x1a, 0x2b, 0x3c, 0x4d] => true,
            [0x4d, 0x3c, 0x2b, 0x1a] => false,
            _ => {
                return Err(CaptureError {
                    offset: start + 8,
                    message: "bad pcapng byte-order magic".into(),
                })
            }
        };
        let len = u32_at(&len_bytes, big) as usize;
        if !(28..=MAX_RECORD).contains(&len) || !len.is_multiple_of(4) {
            return Err(CaptureError {
                offset: start + 4,
                message: format!("corrupt block length {len}"),
            });
        }
        let mut rest = vec![0u8; len - 12];
        self.fill(&mut rest, "truncated pcapng section header")?;
        self.format = Format::PcapNg { big };
        self.interfaces.clear();
        Ok(())
    }

    /// Reads an `N`-byte record or block header: `None` at a clean end of
    /// file, an error for a partial one.
    fn record_header<const N: usize>(
        &mut self,
        what: &str,
    ) -> Result<Option<[u8; N]>, CaptureError> {
        let start = self.offset;
        let mut hdr = [0u8; N];
        let n = read_full(&mut self.inner, &mut hdr).map_err(|m| CaptureError {
            offset: start,
            message: m,
        })?;
        if n == 0 {
            return Ok(None);
        }
        if n < N {
            return Err(CaptureError {
                offset: start,
                message: format!("truncated {what} header ({n} of {N} bytes)"),
            });
        }
        self.offset += N as u64;
        Ok(Some(hdr))
    }

    /// The next frame, `Ok(None)` at a clean end of file.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, CaptureError> {
        let mut f = Frame {
            time_ns: 0,
            linktype: 0,
            data: Vec::new(),
            orig_len: 0,
            offset: 0,
        };
        Ok(self.next_frame_into(&mut f)?.then_some(f))
    }

    /// Reads the next frame into `f`, reusing its buffer; `Ok(false)` at a
    /// clean end of file.
    pub fn next_frame_into(&mut self, f: &mut Frame) -> Result<bool, CaptureError> {
        match self.format {
            Format::Pcap {
                big,
                nanos,
                linktype,
                snaplen,
            } => {
                let start = self.offset;
                let Some(hdr) = self.record_header::<16>("record")? else {
                    return Ok(false);
                };
                let (sec, frac) = (
                    u64::from(u32_at(&hdr, big)),
                    u64::from(u32_at(&hdr[4..], big)),
                );
                let caplen = u32_at(&hdr[8..], big) as usize;
                let orig_len = u32_at(&hdr[12..], big);
                if caplen > MAX_RECORD || (snaplen > 0 && caplen > snaplen.max(262_144) as usize) {
                    return Err(CaptureError {
                        offset: start + 8,
                        message: format!("corrupt record length {caplen}"),
                    });
                }
                f.data.resize(caplen, 0);
                self.fill(&mut f.data, "truncated packet data")?;
                f.time_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1_000 };
                f.linktype = linktype;
                f.orig_len = orig_len;
                f.offset = start;
                Ok(true)
            }
            Format::PcapNg { .. } => self.next_ng(f),
        }
    }

    fn next_ng(&mut self, out: &mut Frame) -> Result<bool, CaptureError> {
        loop {
            let Format::PcapNg { big } = self.format else {
                return Ok(false);
            };
            let start = self.offset;
            let Some(hdr) = self.record_header::<8>("block")? else {
                return Ok(false);
            };
            if hdr[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                // A new section, with its own byte order.
                self.section_rest(start, [hdr[4], hdr[5], hdr[6], hdr[7]])?;
                continue;
            }
            let kind = u32_at(&hdr, big);
            let len = u32_at(&hdr[4..], big) as usize;
            if !(12..=MAX_RECORD).contains(&len) || !len.is_multiple_of(4) {
                return Err(CaptureError {
                    offset: start + 4,
                    message: format!("corrupt block length {len}"),
                });
            }
            let mut body = std::mem::take(&mut self.block);
            body.resize(len - 8, 0);
            let filled = self.fill(&mut body, "truncated pcapng block");
            self.block = body;
            filled?;
            let body = &self.block;
            let trailer = u32_at(&body[len - 12..], big) as usize;
            if trailer != len {
                return Err(CaptureError {
                    offset: start + len as u64 - 4,
                    message: format!("block length {len} and trailing length {trailer} differ"),
                });
            }
            let body = &body[..len - 12];
            let bad = |m: &str| CaptureError {
                offset: start,
                message: m.to_string(),
            };
            match kind {
                1 => {
                    if body.len() < 8 {
                        return Err(bad("interface description block too short"));
                    }
                    let linktype = u32::from(u16_at(body, big));
                    if !supported(linktype) {
                        return Err(unsupported(start + 8, linktype));
                    }
                    let snaplen = u32_at(&body[4..], big);
                    let units = if_tsresol(&body[8..], big);
                    self.interfaces.push(Interface {
                        linktype,
                        snaplen,
                        units,
                    });
                }
                6 => {
                    if body.len() < 20 {
                        return Err(bad("enhanced packet block too short"));
                    }
                    let iface = u32_at(body, big) as usize;
                    let Some(&i) = self.interfaces.get(iface) else {
                        return Err(bad(&format!(
                            "packet names interface {iface}, which was not described"
                        )));
                    };
                    let ts = (u64::from(u32_at(&body[4..], big)) << 32)
                        | u64::from(u32_at(&body[8..], big));
                    let caplen = u32_at(&body[12..], big) as usize;
                    let orig_len = u32_at(&body[16..], big);
                    let Some(data) = body.get(20..20 + caplen) else {
                        return Err(CaptureError {
                            offset: start + 20,
                            message: format!("captured length {caplen} exceeds the block"),
                        });
                    };
                    out.data.clear();
                    out.data.extend_from_slice(data);
                    (out.time_ns, out.linktype, out.orig_len, out.offset) =
                        (scale(ts, i.units), i.linktype, orig_len, start);
                    return Ok(true);
                }
                3 => {
                    if body.len() < 4 {
                        return Err(bad("simple packet block too short"));
                    }
                    let Some(&i) = self.interfaces.first() else {
                        return Err(bad("simple packet block before any interface description"));
                    };
                    let orig_len = u32_at(body, big);
                    let cap = (orig_len as usize)
                        .min(body.len() - 4)
                        .min(if i.snaplen == 0 {
                            usize::MAX
                        } else {
                            i.snaplen as usize
                        });
                    out.data.clear();
                    out.data.extend_from_slice(&body[4..4 + cap]);
                    (out.time_ns, out.linktype, out.orig_len, out.offset) =
                        (0, i.linktype, orig_len, start);
                    return Ok(true);
                }
                _ => {}
            }
        }
    }
}

/// Timestamp units per second from an IDB's options (default microseconds).
fn if_tsresol(mut opts: &[u8], big: bool) -> u64 {
    while opts.len() >= 4 {
        let code = u16_at(opts, big);
        let len = u16_at(&opts[2..], big) as usize;
        let padded = len.div_ceil(4) * 4;
        if code == 0 || opts.len() < 4 + len {
            break;
        }
        if code == 9 && len >= 1 {
            let v = opts[4];
            let exp = u32::from(v & 0x7f);
            return if v & 0x80 == 0 {
                10u64.checked_pow(exp).unwrap_or(1_000_000)
            } else {
                1u64.checked_shl(exp).unwrap_or(1_000_000)
            };
        }
        opts = opts.get(4 + padded..).unwrap_or(&[]);
    }
    1_000_000
}

fn scale(ts: u64, units: u64) -> u64 {
    (u128::from(ts) * 1_000_000_000 / u128::from(units.max(1))) as u64
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read error: {e}")),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcap(records: &[(u32, &[u8])]) -> Vec<u8> {
        let mut f = vec![
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ];
        for (t, d) in records {
            f.extend_from_slice(&t.to_le_bytes());
            f.extend_from_slice(&5u32.to_le_bytes());
            f.extend_from_slice(&(d.len() as u32).to_le_bytes());
            f.extend_from_slice(&(d.len() as u32).to_le_bytes());
            f.extend_from_slice(d);
        }
        f
    }

    /// Records lent in place and records copied (those that straddle the
    /// input buffer's end) come out the same as through `next_frame`,
    /// whatever the buffer size, truncated tail included.
    #[test]
    fn lent_frames_match_copied_frames() {
        let data: Vec<Vec<u8>> = (0..40u8)
            .map(|i| vec![i; 1 + (i as usize * 7) % 50])
            .collect();
        let recs: Vec<(u32, &[u8])> = data
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u32, &d[..]))
            .collect();
        let mut f = pcap(&recs);
        f.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 9, 0, 0, 0, 1, 2]);
        let mut plain = CaptureReader::new(&f[..]).unwrap();
        let mut want = Vec::new();
        let want_err = loop {
            match plain.next_frame() {
                Ok(Some(fr)) => want.push((fr.time_ns, fr.data, fr.offset)),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        for cap in [1, 7, 16, 37, 100, 4096] {
            let mut r = CaptureReader::new(std::io::BufReader::with_capacity(cap, &f[..])).unwrap();
            let mut spare = Frame {
                time_ns: 0,
                linktype: 0,
                data: Vec::new(),
                orig_len: 0,
                offset: 0,
            };
            let mut got = Vec::new();
            let err = loop {
                match r.next_frame_ref(&mut spare) {
                    Ok(Some(fr)) => got.push((fr.time_ns, fr.data.to_vec(), fr.offset)),
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            assert_eq!(got, want, "buffer of {cap}");
            assert_eq!(err, want_err, "buffer of {cap}");
        }
        assert!(want_err.is_some());
    }

    #[test]
    fn reads_pcap_records_and_times() {
        let f = pcap(&[(10, b"abc"), (11, b"de")]);
        let mut r = CaptureReader::new(&f[..]).unwrap();
        let a = r.next_frame().unwrap().unwrap();
        assert_eq!(
            (a.time_ns, a.data.as_slice(), a.linktype, a.offset),
            (10_000_005_000, &b"abc"[..], 1, 24)
        );
        let b = r.next_frame().unwrap().unwrap();
        assert_eq!(b.offset, 24 + 16 + 3);
        assert!(r.next_frame().unwrap().is_none());
    }

    #[test]
    fn errors_carry_offsets() {
        assert_eq!(CaptureReader::new(&b""[..]).err().unwrap().offset, 0);
        let e = CaptureReader::new(&b"GIF89a..."[..]).err().unwrap();
        assert!(e.message.contains("not a pcap"), "{e}");
        let f = pcap(&[(1, b"abcdef")]);
        let mut r = CaptureReader::new(&f[..f.len() - 2]).unwrap();
        let e = r.next_frame().unwrap_err();
        assert_eq!(e.offset, f.len() as u64 - 2);
        let mut f = pcap(&[(1, b"abc")]);
        f[24 + 8..24 + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        let e = CaptureReader::new(&f[..])
            .unwrap()
            .next_frame()
            .unwrap_err();
        assert_eq!(e.offset, 32);
        assert!(e.message.contains("corrupt record length"));
    }
}

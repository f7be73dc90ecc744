//! Opening inputs: files, directories (their files, sorted by name),
//! `-` for standard input; gzip and zstd recognised by their magic
//! numbers and decompressed as they are read.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Expands directories into their files, and their folders' files
/// (sorted by path, as a table partitioned by hour, `…/hour=0/…`, is
/// laid out; names starting with `.` or `_` left out: hidden files,
/// and the `_SUCCESS` markers and `_temporary` folders jobs write);
/// other paths, and `-`, are kept as they are.
pub fn expand(paths: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v = Vec::new();
            walk(p, &mut v, 0)?;
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Folders are followed this deep (a partitioned table is a few deep).
const MAX_DEPTH: usize = 8;

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if n.starts_with('.') || n.starts_with('_') {
            continue;
        }
        // Links are not followed into folders: a tree is read as it is.
        let t = e.file_type()?;
        if t.is_dir() && depth < MAX_DEPTH {
            walk(&e.path(), out, depth + 1)?;
        } else if t.is_file() || (t.is_symlink() && e.path().is_file()) {
            out.push(e.path());
        }
    }
    Ok(())
}

/// Whether the file at `path` starts with `magic` (false if it cannot
/// be read: opening it again reports why).
pub fn starts_with(path: &Path, magic: &[u8]) -> bool {
    let mut head = vec![0u8; magic.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == magic
}

/// How an input is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Not at all.
    None,
    /// gzip (also several members back to back, as rotated logs are).
    Gzip,
    /// zstd.
    Zstd,
}

/// Recognises a compressed stream by its first bytes.
pub fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Opens `path` (`-`: standard input), decompressing if it must.
pub fn open(path: &Path) -> io::Result<(Box<dyn Read + Send>, Compression)> {
    let raw: Box<dyn Read + Send> = if path == Path::new("-") {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    decompress(raw)
}

/// Wraps a stream in the decompressor its first bytes call for.
///
/// gzip members and zstd frames back to back (as `cat` of two rotated
/// files leaves them) are read one after the other. Every decoded byte
/// is handed on as soon as it is decoded, so an input cut short or
/// damaged gives all it holds before the damage, then an error that
/// says where in the compressed bytes it came.
pub fn decompress(raw: Box<dyn Read + Send>) -> io::Result<(Box<dyn Read + Send>, Compression)> {
    let mut r = Consumed {
        inner: BufReader::with_capacity(1 << 16, raw),
        n: 0,
    };
    let c = sniff(r.fill_buf()?);
    Ok(match c {
        Compression::None => (Box::new(r.inner), c),
        Compression::Gzip => {
            let d = flate2::bufread::MultiGzDecoder::new(r);
            (Box::new(Located::new("gzip", d, |d| d.get_ref().n)), c)
        }
        Compression::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(r)
                .map_err(|e| io::Error::new(e.kind(), format!("zstd: {e}")))?;
            (Box::new(Located::new("zstd", d, |d| d.get_ref().n)), c)
        }
    })
}

/// A buffered reader that counts the bytes its reader has consumed.
struct Consumed<R> {
    inner: R,
    n: u64,
}

impl<R: BufRead> Read for Consumed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n += k as u64;
        Ok(k)
    }
}

impl<R: BufRead> BufRead for Consumed<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, k: usize) {
        self.n += k as u64;
        self.inner.consume(k);
    }
}

/// A decoder whose errors name the compression and how far into the
/// compressed bytes they came.
struct Located<D> {
    what: &'static str,
    inner: D,
    consumed: fn(&D) -> u64,
}

impl<D> Located<D> {
    fn new(what: &'static str, inner: D, consumed: fn(&D) -> u64) -> Self {
        Located {
            what,
            inner,
            consumed,
        }
    }
}

impl<D: Read> Read for Located<D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::UnexpectedEof {
                " (the input ends inside the compressed stream: cut short, or still being written?)"
            } else {
                ""
            };
            io::Error::new(
                e.kind(),
                format!(
                    "{}: {e}, after {} compressed bytes{hint}",
                    self.what,
                    (self.consumed)(&self.inner)
                ),
            )
        })
    }
}

/// Reads the first lines of a stream without losing them: the stream
/// that follows still starts at its first byte. An error after some
/// bytes (a compressed file cut short within its first lines) comes
/// after them, so that they are judged; one before any byte is
/// returned.
pub(crate) fn peek(mut r: Box<dyn Read + Send>) -> io::Result<(Vec<u8>, Box<dyn Read + Send>)> {
    let mut head = vec![0u8; 64 << 10];
    let mut n = 0;
    let mut failed = None;
    while n < head.len() {
        match r.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if memchr::memchr_iter(b'\n', &head[..n]).count() >= 20 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if n == 0 => return Err(e),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    head.truncate(n);
    let then: Box<dyn Read + Send> = match failed {
        Some(e) => Box::new(Failed(Some(e))),
        None => r,
    };
    let rest: Box<dyn Read + Send> = Box::new(io::Cursor::new(head.clone()).chain(then));
    Ok((head, rest))
}

/// A stream that failed: its error once, then its end.
struct Failed(Option<io::Error>);

impl Read for Failed {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        self.0.take().map_or(Ok(0), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// Lines of a log, `n` of them, about 120 bytes each, none alike.
    fn log(n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            writeln!(v, "192.0.2.{} - - [13/May/2026:12:00:00 +0000] \"GET /wiki/T{h:x} HTTP/1.1\" 200 {} \"-\" \"ua/{}\"", i % 250, h % 99_991, h >> 40).unwrap();
        }
        v
    }

    /// Decompresses `bytes` to its end or first error.
    fn read(bytes: Vec<u8>) -> (Vec<u8>, Option<io::Error>) {
        let (mut r, _) = decompress(Box::new(io::Cursor::new(bytes))).unwrap();
        let (mut out, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    /// Streams back to back (`cat` of two rotated files) are read one
    /// after the other, in both compressions.
    #[test]
    fn streams_back_to_back_are_all_read() {
        let (a, b) = (log(300), log(700));
        let mut whole = a.clone();
        whole.extend_from_slice(&b);
        let mut z = zstd::stream::encode_all(&a[..], 3).unwrap();
        z.extend(zstd::stream::encode_all(&b[..], 3).unwrap());
        let mut g = gzip(&a);
        g.extend(gzip(&b));
        for (what, c) in [("zstd", z), ("gzip", g)] {
            let (out, err) = read(c);
            assert!(err.is_none(), "{what}: {err:?}");
            assert!(
                out == whole,
                "{what}: {} of {} bytes",
                out.len(),
                whole.len()
            );
        }
    }

    /// A compressed file cut short gives every byte decoded before the
    /// cut (a decoder that holds back its window until the frame ends
    /// gave a quarter of a 3 MB log cut at 99%), then an error that says
    /// where.
    #[test]
    fn a_stream_cut_short_gives_all_before_the_cut_then_says_where() {
        let plain = log(25_000);
        for (what, c) in [
            ("zstd", zstd::stream::encode_all(&plain[..], 3).unwrap()),
            ("gzip", gzip(&plain)),
        ] {
            for keep in [0.5, 0.9, 0.999] {
                let cut = (c.len() as f64 * keep) as usize;
                let (out, err) = read(c[..cut].to_vec());
                assert!(plain.starts_with(&out), "{what}: not a prefix");
                // Within a block or so of the cut: far more than a window
                // short of it.
                let least = (plain.len() as f64 * keep) as usize - (300 << 10);
                assert!(
                    out.len() >= least,
                    "{what} cut at {keep}: {} bytes of {}",
                    out.len(),
                    plain.len()
                );
                let err = err.expect("an error at the cut");
                assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{what}: {err}");
                let msg = err.to_string();
                assert!(
                    msg.starts_with(&format!("{what}: "))
                        && msg.contains(&format!("after {cut} compressed bytes"))
                        && msg.contains("cut short"),
                    "{msg}"
                );
            }
        }
    }

    /// A stream that fails within its first lines: they are still read,
    /// then the error comes; one that fails at once fails the peek.
    #[test]
    fn peek_keeps_what_came_before_an_error() {
        // A whole frame of ten lines, then one cut short.
        let plain = log(10);
        let mut z = zstd::stream::encode_all(&plain[..], 3).unwrap();
        let second = zstd::stream::encode_all(&log(10)[..], 3).unwrap();
        z.extend_from_slice(&second[..second.len() - 20]);
        let (r, _) = decompress(Box::new(io::Cursor::new(z))).unwrap();
        let (head, mut rest) = peek(r).unwrap();
        assert!(head == plain, "{} bytes", head.len());
        let mut out = Vec::new();
        let err = rest.read_to_end(&mut out).unwrap_err();
        assert!(err.to_string().starts_with("zstd: "), "{err}");
        assert!(out == plain);
        // Its error once, then its end.
        assert_eq!(rest.read(&mut [0u8; 8]).unwrap(), 0);
        let tiny = zstd::stream::encode_all(&plain[..], 3).unwrap();
        assert!(decompress(Box::new(io::Cursor::new(tiny[..6].to_vec())))
            .and_then(|(r, _)| peek(r))
            .is_err());
    }
}

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
pub fn decompress(raw: Box<dyn Read + Send>) -> io::Result<(Box<dyn Read + Send>, Compression)> {
    let mut r = BufReader::with_capacity(1 << 16, raw);
    let c = sniff(r.fill_buf()?);
    Ok(match c {
        Compression::None => (Box::new(r), c),
        Compression::Gzip => (Box::new(flate2::bufread::MultiGzDecoder::new(r)), c),
        Compression::Zstd => {
            let d = ruzstd::decoding::StreamingDecoder::new(r)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
            (Box::new(d), c)
        }
    })
}

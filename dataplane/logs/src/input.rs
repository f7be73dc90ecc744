//! Opening inputs: files, directories (their files, sorted by name),
//! `-` for standard input; gzip and zstd recognised by their magic
//! numbers and decompressed as they are read.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Expands directories into their files (sorted; hidden files left out);
/// other paths, and `-`, are kept as they are.
pub fn expand(paths: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
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

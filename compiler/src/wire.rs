//! Little-endian primitives for the artifact: a writer, and a bounds-checked
//! reader that never panics and reports the byte offset of any problem.

use std::fmt;

/// Why an artifact was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArtifactErrorKind {
    /// Not an rctl artifact.
    BadMagic,
    /// Written by another format version.
    UnsupportedVersion(u16),
    /// Ends early.
    Truncated,
    /// The content hash does not match.
    ChecksumMismatch,
    /// A field holds a value the format does not allow.
    Invalid(String),
}

/// An artifact read error, with the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactError {
    /// What.
    pub kind: ArtifactErrorKind,
    /// Where, in bytes from the start of the file.
    pub offset: usize,
}

impl fmt::Display for ArtifactError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ArtifactErrorKind::BadMagic => write!(f, "not an rctl artifact (bad magic number)"),
            ArtifactErrorKind::UnsupportedVersion(v) => write!(
                f,
                "artifact format version {v} is not supported (this rctl reads version {}); recompile the rules with this rctl",
                crate::artifact::FORMAT_VERSION
            ),
            ArtifactErrorKind::Truncated => write!(f, "artifact is truncated at byte {}", self.offset),
            ArtifactErrorKind::ChecksumMismatch => write!(f, "artifact content hash does not match; the file is corrupt"),
            ArtifactErrorKind::Invalid(m) => write!(f, "invalid artifact at byte {}: {m}", self.offset),
        }
    }
}

impl std::error::Error for ArtifactError {}

/// Appends little-endian values to a buffer.
#[derive(Default)]
pub(crate) struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u128(&mut self, v: u128) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.buf.extend_from_slice(s.as_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
}

/// Reads little-endian values with bounds checks.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn err<T>(&self, msg: impl Into<String>) -> Result<T, ArtifactError> {
        Err(ArtifactError {
            kind: ArtifactErrorKind::Invalid(msg.into()),
            offset: self.offset(),
        })
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ArtifactError> {
        if n > self.remaining() {
            return Err(ArtifactError {
                kind: ArtifactErrorKind::Truncated,
                offset: self.base + self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], ArtifactError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, ArtifactError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, ArtifactError> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub fn u32(&mut self) -> Result<u32, ArtifactError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn i32(&mut self) -> Result<i32, ArtifactError> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> Result<u64, ArtifactError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub fn u128(&mut self) -> Result<u128, ArtifactError> {
        Ok(u128::from_le_bytes(self.arr()?))
    }
    pub fn sha(&mut self) -> Result<[u8; 32], ArtifactError> {
        self.arr()
    }
    pub fn bool(&mut self) -> Result<bool, ArtifactError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => self.err(format!("boolean byte {b}")),
        }
    }
    /// A count of items each at least `min_size` bytes: rejected if the
    /// rest of the buffer cannot hold them, so no allocation is unbounded.
    pub fn count(&mut self, min_size: usize) -> Result<usize, ArtifactError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.remaining() {
            return self.err(format!(
                "count {n} exceeds the remaining {} bytes",
                self.remaining()
            ));
        }
        Ok(n)
    }
    pub fn str(&mut self) -> Result<String, ArtifactError> {
        let n = self.count(1)?;
        let at = self.offset();
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| ArtifactError {
            kind: ArtifactErrorKind::Invalid("string is not UTF-8".into()),
            offset: at,
        })
    }
}

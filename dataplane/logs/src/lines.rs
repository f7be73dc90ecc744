//! A line reader in the manner of ripgrep's: big reads into one buffer,
//! newlines found with memchr (SIMD), lines lent straight from the buffer.
//! Nothing is allocated per line.
//!
//! Memory is bounded: a line longer than the bound is not held. It is
//! reported once, with its line number and byte offset, and the reader
//! skips to the next newline, reading the rest of it in buffer-sized
//! pieces; a 1 GB line costs one buffer, not a gigabyte.

use std::io::{self, Read};

/// Default bound on a line's length.
pub const MAX_LINE: usize = 1 << 20;

/// The largest bound a reader takes: a value's place in a line is kept
/// in 32 bits ([`crate::template::Span`]).
pub const MAX_LINE_LIMIT: usize = 1 << 30;

/// Bytes read at a time, at most.
const CHUNK: usize = 1 << 20;

/// The buffer's first size: lines are rarely longer, and an input waiting
/// its turn among many costs no more than this (it grows to hold a long
/// line, up to the bound).
const INITIAL: usize = 128 << 10;

/// What [`LineReader::advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A line is current (see [`LineReader::line`]).
    Line,
    /// A line longer than the bound was skipped.
    TooLong {
        /// Its length in bytes (up to its newline or the end of input).
        len: u64,
    },
    /// The end of the input (or, when following, of what is there now).
    End,
}

/// Splits a byte stream into lines.
pub struct LineReader<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    cur: (usize, usize),
    eof: bool,
    max_line: usize,
    /// 1-based number of the current line.
    line_no: u64,
    /// Offset in the stream of `buf[0]`.
    base: u64,
    /// Offset in the stream of the current line.
    line_offset: u64,
    /// Whether a partial last line (no newline yet) waits for more input
    /// instead of being a line (following a growing file).
    pub wait_for_newline: bool,
    /// The source's error, held while the line it cut is handed out.
    failed: Option<io::Error>,
}

impl<R: Read> LineReader<R> {
    /// A reader of `src` whose lines are at most `max_line` bytes (at
    /// least 16, at most [`MAX_LINE_LIMIT`]).
    pub fn new(src: R, max_line: usize) -> Self {
        let max_line = max_line.clamp(16, MAX_LINE_LIMIT);
        LineReader {
            src,
            buf: vec![0; INITIAL.min(max_line + 1)],
            start: 0,
            end: 0,
            cur: (0, 0),
            eof: false,
            max_line,
            line_no: 0,
            base: 0,
            line_offset: 0,
            wait_for_newline: false,
            failed: None,
        }
    }

    /// The current line, without its newline (and without a `\r` before
    /// it).
    pub fn line(&self) -> &[u8] {
        &self.buf[self.cur.0..self.cur.1]
    }

    /// The current line's 1-based number.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// The current line's byte offset in the stream.
    pub fn offset(&self) -> u64 {
        self.line_offset
    }

    /// Bytes consumed so far: the offset just after the current line.
    pub fn consumed(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Lets a followed input be read on after it reached its end.
    pub fn resume(&mut self) {
        self.eof = false;
    }

    /// The source, for a follower that checks its file.
    pub fn get_ref(&self) -> &R {
        &self.src
    }

    fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(self.max_line + CHUNK);
            if grown <= self.buf.len() {
                return Ok(0);
            }
            self.buf.resize(grown, 0);
        }
        loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    if n == 0 {
                        self.eof = true;
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves to the next line. When the source fails, the line it was
    /// in the middle of comes first, as it is, then the error.
    pub fn advance(&mut self) -> io::Result<Next> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let (s, e) = (self.start, self.start + i);
                self.start = e + 1;
                if e - s > self.max_line {
                    self.line_no += 1;
                    self.line_offset = self.base + s as u64;
                    return Ok(Next::TooLong {
                        len: (e - s) as u64,
                    });
                }
                return Ok(self.found(s, e));
            }
            if self.end - self.start > self.max_line {
                return self.skip_long();
            }
            if self.eof {
                if self.start == self.end || self.wait_for_newline {
                    return Ok(Next::End);
                }
                return Ok(self.rest());
            }
            if let Err(err) = self.fill() {
                if self.start == self.end {
                    return Err(err);
                }
                self.failed = Some(err);
                return Ok(self.rest());
            }
        }
    }

    /// What is held, without a newline, as the current line.
    fn rest(&mut self) -> Next {
        let (s, e) = (self.start, self.end);
        self.start = e;
        self.found(s, e)
    }

    fn found(&mut self, s: usize, mut e: usize) -> Next {
        if e > s && self.buf[e - 1] == b'\r' {
            e -= 1;
        }
        self.cur = (s, e);
        self.line_no += 1;
        self.line_offset = self.base + s as u64;
        Next::Line
    }

    /// Skips a line over the bound: drops what is held and reads on to
    /// the next newline, one buffer at a time.
    fn skip_long(&mut self) -> io::Result<Next> {
        self.line_no += 1;
        self.line_offset = self.base + self.start as u64;
        let mut len = (self.end - self.start) as u64;
        self.base += self.end as u64;
        self.start = 0;
        self.end = 0;
        loop {
            if self.eof {
                return Ok(Next::TooLong { len });
            }
            let n = self.fill()?;
            if let Some(i) = memchr::memchr(b'\n', &self.buf[..self.end]) {
                len += i as u64;
                self.start = i + 1;
                return Ok(Next::TooLong { len });
            }
            len += n as u64;
            self.base += self.end as u64;
            self.end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(data: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(data, max);
        let mut out = Vec::new();
        loop {
            match r.advance().unwrap() {
                Next::Line => out.push(format!(
                    "{}@{}:{}",
                    String::from_utf8_lossy(r.line()),
                    r.line_no(),
                    r.offset()
                )),
                Next::TooLong { len } => {
                    out.push(format!("long {len}@{}:{}", r.line_no(), r.offset()))
                }
                Next::End => return out,
            }
        }
    }

    #[test]
    fn lines_and_positions() {
        assert_eq!(
            all(b"a\nbc\r\n\nd", 100),
            ["a@1:0", "bc@2:2", "@3:6", "d@4:7"]
        );
        assert_eq!(all(b"", 100), Vec::<String>::new());
    }

    #[test]
    fn a_long_line_is_skipped_with_its_position() {
        let mut data = b"ok\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 3_000_000));
        data.extend_from_slice(b"\nnext\n");
        assert_eq!(
            all(&data, 1000),
            ["ok@1:0", "long 3000000@2:3", "next@3:3000004"]
        );
        // At the end of the input, without a newline.
        let data = vec![b'y'; 200_000];
        assert_eq!(all(&data, 1000), ["long 200000@1:0"]);
    }

    #[test]
    fn a_long_line_costs_no_more_than_the_bound() {
        // A reader that makes 256 MiB of one line, never held at once.
        struct Endless(u64);
        impl Read for Endless {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                let n = (b.len() as u64).min(self.0) as usize;
                b[..n].fill(b'z');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let mut r = LineReader::new(Endless(256 << 20), 4096);
        assert_eq!(r.advance().unwrap(), Next::TooLong { len: 256 << 20 });
        assert!(r.buf.len() <= 4096 + CHUNK);
        assert_eq!(r.advance().unwrap(), Next::End);
    }

    /// A source that fails in the middle of a line: the lines before it,
    /// then that line as far as it came, then the error, once.
    #[test]
    fn the_line_a_failure_cuts_comes_before_the_error() {
        struct Fails;
        impl Read for Fails {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::ErrorKind::UnexpectedEof.into())
            }
        }
        let data: &[u8] = b"one\ntwo\nthr";
        let src = data.chain(Fails);
        let mut r = LineReader::new(src, 100);
        let mut got = Vec::new();
        while let Ok(Next::Line) = r.advance() {
            got.push(format!(
                "{}@{}",
                String::from_utf8_lossy(r.line()),
                r.offset()
            ));
        }
        assert_eq!(got, ["one@0", "two@4", "thr@8"]);
        let mut r = LineReader::new(data.chain(Fails), 100);
        for _ in 0..3 {
            assert_eq!(r.advance().unwrap(), Next::Line);
        }
        assert_eq!(
            r.advance().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        // At a line's end, the error comes alone.
        let mut r = LineReader::new(b"one\n".chain(Fails), 100);
        assert_eq!(r.advance().unwrap(), Next::Line);
        assert!(r.advance().is_err());
    }
}

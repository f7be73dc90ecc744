//! The compact records that the request path appends for the threads
//! that read them later ([`crate::top`], [`crate::tap`]): fields written
//! after their length, and a cursor that reads them back, ending at a
//! record cut short rather than panicking.

/// Appends `b` cut at `max` bytes (at most `u16::MAX`), after its
/// length; whether it was cut.
pub(crate) fn push_field(out: &mut Vec<u8>, b: &[u8], max: usize) -> bool {
    let kept = &b[..b.len().min(max).min(u16::MAX as usize)];
    out.extend_from_slice(&(kept.len() as u16).to_le_bytes());
    out.extend_from_slice(kept);
    kept.len() < b.len()
}

/// A cursor over records.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// At the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, at: 0 }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    /// The next byte.
    pub(crate) fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// The next field ([`push_field`]).
    pub(crate) fn field(&mut self) -> Option<&'a [u8]> {
        let len = self.take(2)?;
        self.take(u16::from_le_bytes([len[0], len[1]]) as usize)
    }

    /// The next address: 4 or 6, then its octets.
    pub(crate) fn ip(&mut self) -> Option<std::net::IpAddr> {
        use std::net::IpAddr;
        Some(match self.byte()? {
            4 => IpAddr::from(<[u8; 4]>::try_from(self.take(4)?).ok()?),
            _ => IpAddr::from(<[u8; 16]>::try_from(self.take(16)?).ok()?),
        })
    }
}

/// Appends `ip` as [`Cursor::ip`] reads it.
pub(crate) fn push_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        std::net::IpAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
    }
}

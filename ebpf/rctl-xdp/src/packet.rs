//! Bounds-checked packet access: every read goes through [`at`].

use aya_ebpf::programs::XdpContext;

/// A pointer to a `T` at `offset`, if the packet holds it.
#[inline(always)]
pub fn at<T>(ctx: &XdpContext, offset: usize) -> Option<*const T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + core::mem::size_of::<T>() > end {
        return None;
    }
    Some((start + offset) as *const T)
}

/// A byte.
#[inline(always)]
pub fn u8_at(ctx: &XdpContext, offset: usize) -> Option<u8> {
    // SAFETY: `at` checked that the byte is inside the packet.
    at::<u8>(ctx, offset).map(|p| unsafe { *p })
}

/// A big-endian u16.
#[inline(always)]
pub fn be16_at(ctx: &XdpContext, offset: usize) -> Option<u16> {
    // SAFETY: `at` checked that both bytes are inside the packet.
    at::<[u8; 2]>(ctx, offset).map(|p| u16::from_be_bytes(unsafe { *p }))
}

/// Four bytes.
#[inline(always)]
pub fn bytes4_at(ctx: &XdpContext, offset: usize) -> Option<[u8; 4]> {
    // SAFETY: `at` checked the range.
    at::<[u8; 4]>(ctx, offset).map(|p| unsafe { *p })
}

/// Sixteen bytes.
#[inline(always)]
pub fn bytes16_at(ctx: &XdpContext, offset: usize) -> Option<[u8; 16]> {
    // SAFETY: `at` checked the range.
    at::<[u8; 16]>(ctx, offset).map(|p| unsafe { *p })
}

/// Writes four bytes at `offset`, if the packet holds them.
#[inline(always)]
pub fn put4(ctx: &XdpContext, offset: usize, v: [u8; 4]) -> Option<()> {
    let p = at::<[u8; 4]>(ctx, offset)?.cast_mut();
    // SAFETY: `at` checked the range; XDP packet data is writable.
    unsafe { p.write_unaligned(v) };
    Some(())
}

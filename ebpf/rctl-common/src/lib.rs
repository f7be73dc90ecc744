//! The kernel/user-space ABI of the rctl XDP program: `#[repr(C)]`, `Copy`,
//! no `bool`, no implicit padding (sizes are checked at compile time).

#![no_std]

/// Map names, as the program declares them.
pub mod maps {
    /// `Array<Term>`: the packet plane's rules as DNF terms, in order.
    pub const TERMS: &str = "RCTL_TERMS";
    /// `Array<u32>`: `[0]` is the number of terms in use.
    pub const CONFIG: &str = "RCTL_CONFIG";
    /// `LpmTrie<[u8; 4], u64>`: IPv4 prefixes to ip-set membership bits.
    pub const V4: &str = "RCTL_V4";
    /// `LpmTrie<[u8; 16], u64>`: IPv6 prefixes to ip-set membership bits.
    pub const V6: &str = "RCTL_V6";
    /// `Array<u64>` indexed by destination port: port-predicate bits.
    pub const PORTS: &str = "RCTL_PORTS";
    /// `Array<u32>` indexed by [`super::PROTO_TCP`] etc.: protocol bits.
    pub const PROTOS: &str = "RCTL_PROTOS";
    /// `PerCpuArray<Counters>` indexed by rule.
    pub const COUNTERS: &str = "RCTL_COUNTERS";
}

/// Index of TCP in the protocol table.
pub const PROTO_TCP: u32 = 0;
/// Index of UDP in the protocol table.
pub const PROTO_UDP: u32 = 1;
/// Index of ICMP (and ICMPv6) in the protocol table.
pub const PROTO_ICMP: u32 = 2;
/// Index of any other protocol.
pub const PROTO_OTHER: u32 = 3;

/// Most terms the program evaluates.
pub const MAX_TERMS: u32 = 64;
/// Most rules that can have counters.
pub const MAX_RULES: u32 = 1024;

/// Term kinds.
pub mod kind {
    /// An L3/L4 allow: pass.
    pub const ALLOW: u32 = 0;
    /// The address projection of an allow with HTTP parts: pass.
    pub const EXEMPT: u32 = 1;
    /// Drop.
    pub const DROP: u32 = 2;
}

/// One DNF term of a packet-plane rule: it matches when every `*_pos` bit
/// is set and no `*_neg` bit is set in the packet's bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Term {
    /// Ip-set bits that must be set.
    pub set_pos: u64,
    /// Ip-set bits that must be clear.
    pub set_neg: u64,
    /// Port-predicate bits that must be set.
    pub port_pos: u64,
    /// Port-predicate bits that must be clear.
    pub port_neg: u64,
    /// Protocol-predicate bits that must be set.
    pub proto_pos: u32,
    /// Protocol-predicate bits that must be clear.
    pub proto_neg: u32,
    /// Rule index (for counters and verdicts).
    pub rule: u32,
    /// One of [`kind`].
    pub kind: u32,
}

/// Per-rule counters (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets the rule decided.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

const _: () = assert!(core::mem::size_of::<Term>() == 48);
const _: () = assert!(core::mem::size_of::<Counters>() == 16);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data: repr(C), Copy, no padding (sizes asserted).
    unsafe impl aya::Pod for super::Term {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Counters {}
}

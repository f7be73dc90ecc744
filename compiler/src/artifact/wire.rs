//! Little-endian primitives for the artifact: a writer, and a bounds-checked
//! reader that never panics and reports the byte offset of any problem.

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Deepest condition tree the reader accepts.
pub const MAX_COND_DEPTH: usize = 512;

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
    /// The bytes do not encode a ruleset, or the ruleset breaks an
    /// invariant the compiler guarantees (see [`crate::validate`]).
    Invalid(Invalid),
}

/// Which tagged union held an unknown tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagOf {
    /// A string field.
    Field,
    /// A string operator.
    Operator,
    /// A predicate.
    Atom,
    /// A condition node.
    Condition,
    /// An action.
    Action,
    /// A throttle unit.
    Unit,
    /// A throttle key.
    Key,
    /// A plan entry.
    Plan,
    /// A protocol number.
    Protocol,
}

/// What is wrong inside an artifact whose header and checksum are fine:
/// first the encoding, then each invariant of [`crate::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Invalid {
    /// The reserved header field is not zero.
    ReservedHeader,
    /// The endianness marker is not `0x01020304`.
    Endianness,
    /// Bytes after the declared payload, or after the plan.
    TrailingBytes(u64),
    /// A count of items cannot fit in the bytes that are left.
    CountPastEnd(u32),
    /// A string is not UTF-8.
    NotUtf8,
    /// A boolean byte other than 0 or 1.
    Bool(u8),
    /// An unknown tag.
    Tag(TagOf, u8),
    /// A condition's postfix code is not one tree: a `not`, `and` or `or`
    /// without its operands, or operands left over.
    CondShape,
    /// A condition nests deeper than [`MAX_COND_DEPTH`].
    CondDepth,
    /// More rules than `Options::max_rules`.
    TooManyRules(usize),
    /// More regexes than `Options::max_regexes`.
    TooManyRegexes(usize),
    /// More prefixes in ipblocks than `Options::max_prefixes`.
    TooManyPrefixes(usize),
    /// A regex that does not compile, nests too deep, or is larger than
    /// `Options::max_regex_bytes` compiled.
    Regex(String),
    /// One field's prefix, suffix, substring and regex tests do not compile
    /// into one automaton within the engine's size limit.
    FieldScan(String),
    /// An ip set name that is neither `inline` nor `scope/name`.
    IpSetName(String),
    /// Two ipblocks with one name.
    DuplicateIpSet(String),
    /// A prefix length beyond the address width.
    PrefixLength(u8),
    /// A prefix with bits set past its length.
    HostBits,
    /// Prefixes out of order, overlapping, or not merged.
    PrefixesNotMerged,
    /// A header name that is empty, not visible ASCII, has `:` or upper case.
    HeaderName(String),
    /// A `host` value with upper case, or a case-sensitive `host` regex.
    HostCase,
    /// An `in { … }` string set not sorted and deduplicated.
    StrSetOrder,
    /// `present` on a field other than `header(…)` or `query(…)`.
    PresentField,
    /// An address predicate names an ip set that does not exist.
    MissingIpSet(u32),
    /// A port range whose start is above its end.
    PortRange,
    /// Port ranges out of order, overlapping or adjacent.
    PortsNotMerged,
    /// Protocols not sorted and deduplicated.
    ProtosNotSorted,
    /// A predicate that is in the table twice.
    DuplicateAtom,
    /// A rule name that does not follow the grammar (`name` or `scope/name`
    /// of letters, digits, `_`, `-`, `.`).
    RuleName(String),
    /// Two rules with one name.
    DuplicateRule(String),
    /// A priority outside -1,000,000 to 1,000,000.
    Priority(i32),
    /// Rules not in evaluation order (priority, then file order).
    Order,
    /// A file-order position that is out of range or repeated.
    Seq(u32),
    /// A site name that is not an identifier.
    SiteName(String),
    /// Sites not sorted and deduplicated.
    Sites,
    /// A condition names a predicate that does not exist.
    MissingAtom(u32),
    /// An HTTP status outside 400 to 599.
    Status(u16),
    /// A reason phrase with a control or bidi character.
    Reason(char),
    /// A throttle limit or burst of zero.
    ThrottleZero,
    /// A throttle period outside 1 ms to 366 days.
    Period(u64),
    /// A ban longer than 366 days.
    Ban(u64),
    /// A throttle without keys.
    NoKeys,
    /// A `shared` throttle that does not count requests.
    SharedPackets,
    /// A throttle key given twice.
    DuplicateKey,
    /// `global` or `server` combined with other keys.
    GlobalNotAlone,
    /// A vsthrottle bucket on packets or connections, or with a burst
    /// other than its limit.
    VsthrottleShape,
    /// A packet or connection limit keyed by something other than the
    /// address.
    PacketKey,
    /// A `prefix(…)` key length beyond the address width.
    PrefixKeyLength,
    /// A `header(…)` key with upper case.
    KeyHeaderCase,
    /// A packet or connection limit whose condition reads HTTP fields.
    PacketLimitReadsHttp,
    /// A rule's origin names a file that is not among the sources.
    OriginFile(String),
    /// A rule's origin line or column is 0.
    OriginPosition,
    /// Plans and rules differ in number.
    PlanCount {
        /// Plans.
        plans: usize,
        /// Rules.
        rules: usize,
    },
    /// An XDP term names a predicate that does not exist or is not L3/L4.
    PlanAtom(u32),
    /// An XDP plan that does not fit its rule (kind against action, a
    /// disabled or shadow rule, HTTP fields where XDP decides alone).
    PlanKind,
    /// An XDP term names a predicate its rule's condition does not read.
    PlanForeignAtom(u32),
    /// An XDP plan with more than `Options::max_dnf_terms` terms.
    PlanTerms(usize),
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Invalid::*;
        match self {
            ReservedHeader => write!(f, "the reserved header field is not zero"),
            Endianness => write!(f, "endianness marker mismatch"),
            TrailingBytes(n) => write!(f, "{n} trailing bytes"),
            CountPastEnd(n) => write!(f, "count {n} exceeds the bytes left"),
            NotUtf8 => write!(f, "string is not UTF-8"),
            Bool(b) => write!(f, "boolean byte {b}"),
            Tag(of, t) => write!(f, "unknown {of:?} tag {t}"),
            CondShape => write!(f, "condition does not form one tree"),
            CondDepth => write!(f, "condition nests deeper than {}", MAX_COND_DEPTH),
            TooManyRules(n) => write!(f, "{n} rules, more than the limit"),
            TooManyRegexes(n) => write!(f, "{n} regexes, more than the limit"),
            TooManyPrefixes(n) => write!(f, "{n} prefixes in ipblocks, more than the limit"),
            Regex(m) => write!(f, "invalid regex: {m}"),
            FieldScan(field) => write!(f, "the tests on `{field}` do not fit in one automaton"),
            IpSetName(n) => write!(f, "ip set name {n:?} is neither `inline` nor scope/name"),
            DuplicateIpSet(n) => write!(f, "ipblock {n:?} is defined twice"),
            PrefixLength(l) => write!(f, "prefix length {l} is beyond the address width"),
            HostBits => write!(f, "a prefix has host bits set"),
            PrefixesNotMerged => write!(f, "prefixes are out of order, overlapping or not merged"),
            HeaderName(n) => write!(f, "{n:?} is not a lower-case header name"),
            HostCase => write!(f, "a host test is case-sensitive"),
            StrSetOrder => write!(f, "string set is not sorted and deduplicated"),
            PresentField => write!(f, "present/absent on a field that is always there"),
            MissingIpSet(i) => write!(f, "ip set {i} does not exist"),
            PortRange => write!(f, "port range is reversed"),
            PortsNotMerged => write!(f, "port ranges are out of order, overlapping or adjacent"),
            ProtosNotSorted => write!(f, "protocols are not sorted and deduplicated"),
            DuplicateAtom => write!(f, "predicate is in the table twice"),
            RuleName(n) => write!(f, "rule name {n:?} does not follow the grammar"),
            DuplicateRule(n) => write!(f, "rule {n:?} is defined twice"),
            Priority(p) => write!(f, "priority {p} is outside -1000000 to 1000000"),
            Order => write!(f, "rules are not in evaluation order"),
            Seq(s) => write!(f, "file position {s} is out of range or repeated"),
            SiteName(n) => write!(f, "site name {n:?} is not an identifier"),
            Sites => write!(f, "sites are not sorted and deduplicated"),
            MissingAtom(a) => write!(f, "predicate {a} does not exist"),
            Status(s) => write!(f, "HTTP status {s} is outside 400 to 599"),
            Reason(c) => write!(
                f,
                "reason has the control or bidi character U+{:04X}",
                u32::from(*c)
            ),
            ThrottleZero => write!(f, "throttle limit and burst must be above 0"),
            Period(ms) => write!(f, "throttle period of {ms} ms is outside 1 ms to 366 days"),
            Ban(ms) => write!(f, "ban of {ms} ms is longer than 366 days"),
            NoKeys => write!(f, "throttle has no key"),
            SharedPackets => write!(f, "a shared throttle counts packets or connections"),
            DuplicateKey => write!(f, "throttle key given twice"),
            GlobalNotAlone => write!(f, "`global` or `server` is combined with other keys"),
            VsthrottleShape => write!(
                f,
                "a vsthrottle bucket counts requests and holds exactly its limit"
            ),
            PacketKey => write!(f, "packet and connection limits are keyed by address only"),
            PrefixKeyLength => write!(f, "prefix key length out of range"),
            KeyHeaderCase => write!(f, "header key name has upper case"),
            PacketLimitReadsHttp => write!(f, "packet or connection limit reads HTTP fields"),
            OriginFile(p) => write!(f, "origin {p:?} is not one of the sources"),
            OriginPosition => write!(f, "origin line or column is 0"),
            PlanCount { plans, rules } => write!(f, "{plans} plans for {rules} rules"),
            PlanAtom(a) => write!(
                f,
                "XDP term names predicate {a}, which is missing or not L3/L4"
            ),
            PlanKind => write!(f, "XDP plan does not fit its rule"),
            PlanForeignAtom(a) => write!(
                f,
                "XDP term names predicate {a}, which its rule does not read"
            ),
            PlanTerms(n) => write!(f, "XDP plan has {n} terms, more than the limit"),
        }
    }
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
                FORMAT_VERSION
            ),
            ArtifactErrorKind::Truncated => write!(f, "artifact is truncated at byte {}", self.offset),
            ArtifactErrorKind::ChecksumMismatch => write!(f, "artifact content hash does not match; the file is corrupt"),
            ArtifactErrorKind::Invalid(m) => {
                let what_to_do = match m {
                    Invalid::TooManyRules(_)
                    | Invalid::TooManyRegexes(_)
                    | Invalid::TooManyPrefixes(_)
                    | Invalid::PlanTerms(_) => {
                        "an artifact compiled with raised limits is read only with the same limits"
                    }
                    _ => "it was not written by rctl's compiler, or was altered since; recompile the rules with this rctl",
                };
                write!(f, "invalid artifact at byte {}: {m}; {what_to_do}", self.offset)
            }
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
    pub fn err<T>(&self, what: Invalid) -> Result<T, ArtifactError> {
        Err(ArtifactError {
            kind: ArtifactErrorKind::Invalid(what),
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
            b => self.err(Invalid::Bool(b)),
        }
    }
    /// A count of items each at least `min_size` bytes: rejected if the
    /// rest of the buffer cannot hold them, so no allocation is unbounded.
    pub fn count(&mut self, min_size: usize) -> Result<usize, ArtifactError> {
        let n = self.u32()?;
        if (n as usize).saturating_mul(min_size.max(1)) > self.remaining() {
            return self.err(Invalid::CountPastEnd(n));
        }
        Ok(n as usize)
    }
    pub fn str(&mut self) -> Result<String, ArtifactError> {
        let n = self.count(1)?;
        let at = self.offset();
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| ArtifactError {
            kind: ArtifactErrorKind::Invalid(Invalid::NotUtf8),
            offset: at,
        })
    }
}

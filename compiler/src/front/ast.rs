//! The AST: what the operator wrote, with a [`Span`] on every node.
//!
//! Values that need checking (numbers, durations, CIDRs, statuses) are kept
//! as raw [`Word`]s here; lowering to the IR checks them, so each error can
//! point at its own token.

use crate::source::Span;

/// A token as written: a bare word or the unescaped body of a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The text (for strings: after unescaping).
    pub text: String,
    /// Whether it was written as a quoted string.
    pub quoted: bool,
    /// Where.
    pub span: Span,
}

/// One parsed `.rctl` file.
#[derive(Debug, Clone, Default)]
pub struct File {
    /// Top-level items in source order.
    pub items: Vec<Item>,
}

/// A top-level item.
#[derive(Debug, Clone)]
pub enum Item {
    /// `include "path"`.
    Include(Word),
    /// `ipblock scope/name { … }`.
    Ipblock(IpblockDecl),
    /// `pattern scope/name { … }`.
    Pattern(PatternDecl),
    /// `rule name { … }`.
    Rule(RuleDecl),
    /// `test "name" { … }`.
    Test(TestDecl),
}

impl Item {
    /// The span of the whole item.
    pub fn span(&self) -> Span {
        match self {
            Item::Include(w) => w.span,
            Item::Ipblock(d) => d.span,
            Item::Pattern(d) => d.span,
            Item::Rule(d) => d.span,
            Item::Test(d) => d.span,
        }
    }
}

/// An ipblock entry.
#[derive(Debug, Clone)]
pub enum IpblockEntry {
    /// An inline CIDR or address, unchecked.
    Cidr(Word),
    /// `file "path"`: a list file, one CIDR a line, `#` comments.
    File(Word),
    /// `comment "…"`.
    Comment(Word),
}

/// `ipblock scope/name { … }`: a set of IPv4 and IPv6 prefixes.
#[derive(Debug, Clone)]
pub struct IpblockDecl {
    /// `scope/name`.
    pub name: Word,
    /// Entries in source order.
    pub entries: Vec<IpblockEntry>,
    /// The whole declaration.
    pub span: Span,
}

/// `pattern scope/name { [comment "…"] expr }`.
#[derive(Debug, Clone)]
pub struct PatternDecl {
    /// `scope/name`.
    pub name: Word,
    /// Optional description.
    pub comment: Option<Word>,
    /// The condition.
    pub body: Expr,
    /// The whole declaration.
    pub span: Span,
}

/// A boolean expression.
#[derive(Debug, Clone)]
pub struct Expr {
    /// What kind.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// The kinds of expression.
#[derive(Debug, Clone)]
pub enum ExprKind {
    /// `a or b or …` (two or more).
    Or(Vec<Expr>),
    /// `a and b and …` (two or more).
    And(Vec<Expr>),
    /// `not a`.
    Not(Box<Expr>),
    /// `( a )`, kept so that fmt can reproduce it.
    Paren(Box<Expr>),
    /// `pattern@scope/name`.
    PatternRef(Word),
    /// `ipblock@scope/name`: the client address is in the block.
    IpblockRef(Word),
    /// `true` or `false`.
    Bool(bool),
    /// `field op value`.
    Cond(Condition),
}

/// A request field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The HTTP method.
    Method,
    /// The Host header (case-insensitive).
    Host,
    /// The path, without the query string, normalised.
    Path,
    /// The request target as sent: path plus `?query`, not normalised
    /// (what VCL calls `req.url`).
    Url,
    /// The whole query string, without `?`.
    Query,
    /// One query parameter's value.
    QueryParam(Word),
    /// One header's value; the name is case-insensitive.
    Header(Word),
    /// The client address.
    Ip,
    /// The destination address (the edge's address the client reached).
    DstIp,
    /// The destination (service) port.
    Port,
    /// The transport protocol: tcp, udp or icmp.
    Proto,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `~`: regex match, case-sensitive.
    Match,
    /// `~*`: regex match, case-insensitive.
    IMatch,
    /// `!~`
    NotMatch,
    /// `!~*`
    NotIMatch,
    /// `starts_with`
    StartsWith,
    /// `ends_with`
    EndsWith,
    /// `contains`
    Contains,
}

impl CmpOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Match => "~",
            CmpOp::IMatch => "~*",
            CmpOp::NotMatch => "!~",
            CmpOp::NotIMatch => "!~*",
            CmpOp::StartsWith => "starts_with",
            CmpOp::EndsWith => "ends_with",
            CmpOp::Contains => "contains",
        }
    }
}

/// The right-hand side of `in`.
#[derive(Debug, Clone)]
pub enum SetExpr {
    /// `{ v, v, … }`.
    Literal(Vec<Word>, Span),
    /// `ipblock@scope/name`.
    Ipblock(Word),
}

/// The test applied to a field.
#[derive(Debug, Clone)]
pub enum Test {
    /// `op value`.
    Cmp(CmpOp, Word),
    /// `[not] in set`.
    In {
        /// `not in`.
        negated: bool,
        /// The set.
        set: SetExpr,
    },
    /// `present`.
    Present,
    /// `absent`.
    Absent,
}

/// `field test`.
#[derive(Debug, Clone)]
pub struct Condition {
    /// The field.
    pub field: Field,
    /// The field's span.
    pub field_span: Span,
    /// The test.
    pub test: Test,
    /// The operator's span.
    pub op_span: Span,
}

/// A rate-limit key.
#[derive(Debug, Clone)]
pub enum KeyDecl {
    /// `global`, `ip`, `host`, `path`, `method` or an unknown word.
    Word(Word),
    /// `header("x")`.
    Header(Word),
    /// `query("p")`.
    Query(Word),
    /// `prefix(v4len[, v6len])`.
    Prefix(Word, Option<Word>, Span),
}

/// `throttle N UNIT per DURATION …`.
#[derive(Debug, Clone)]
pub struct ThrottleDecl {
    /// N.
    pub limit: Word,
    /// `requests`, `packets` or `connections`.
    pub unit: Word,
    /// The period.
    pub period: Word,
    /// `burst N`.
    pub burst: Option<Word>,
    /// `by k, …` (the whole clause's span is in `by_span`).
    pub by: Vec<KeyDecl>,
    /// Span of the `by` clause, if any.
    pub by_span: Option<Span>,
    /// `ban D`.
    pub ban: Option<Word>,
    /// `status S`.
    pub status: Option<Word>,
    /// `reason "…"`.
    pub reason: Option<Word>,
    /// `bucket gcra|vsthrottle`.
    pub bucket: Option<Word>,
    /// `shared`: counted site-wide rather than per host.
    pub shared: Option<Span>,
}

/// A rule's action, as written.
#[derive(Debug, Clone)]
pub enum ActionDecl {
    /// `allow`
    Allow,
    /// `log`
    Log,
    /// `drop`
    Drop,
    /// `deny [status] ["reason"]`
    Deny(Option<Word>, Option<Word>),
    /// `throttle …`
    Throttle(Box<ThrottleDecl>),
}

/// One property of a rule body.
#[derive(Debug, Clone)]
pub enum RuleProp {
    /// `when expr`
    When(Expr),
    /// `priority N`
    Priority(Word),
    /// `sites { a, b }`
    Sites(Vec<Word>),
    /// `enabled true|false`
    Enabled(Word),
    /// `shadow`
    Shadow,
    /// `allow_undecided`: accept this allow even if the compiler cannot
    /// decide whether it wins over every earlier enforcing rule.
    AllowUndecided,
    /// `comment "…"`
    Comment(Word),
    /// An action.
    Action(ActionDecl),
}

/// A spanned rule property.
#[derive(Debug, Clone)]
pub struct Prop {
    /// The property.
    pub prop: RuleProp,
    /// Its span.
    pub span: Span,
}

/// `rule name { … }` (requestctl's *action*).
#[derive(Debug, Clone)]
pub struct RuleDecl {
    /// The name.
    pub name: Word,
    /// Properties in source order; lowering checks counts and duplicates.
    pub props: Vec<Prop>,
    /// The whole rule.
    pub span: Span,
}

/// `request [label] { … }` or `packet [label] { … }` in a test.
#[derive(Debug, Clone)]
pub struct SampleDecl {
    /// Packet (L3/L4 path) or request (HTTP path).
    pub is_packet: bool,
    /// Optional label, for `expect for label …`.
    pub label: Option<Word>,
    /// `name value` fields: method, host, path, ip, port, proto.
    pub fields: Vec<(Word, Word)>,
    /// `header "name" "value"`.
    pub headers: Vec<(Word, Word)>,
    /// `syn` flag (packets).
    pub syn: Option<Span>,
    /// `repeat N [over D]`.
    pub repeat: Option<(Word, Option<Word>)>,
    /// `at D`: start offset.
    pub at: Option<Word>,
    /// The whole block.
    pub span: Span,
}

/// `replay [label] "file" [format "F"] [captured "H[:LEN],…"] [ip CIDR]`
/// in a test.
#[derive(Debug, Clone)]
pub struct ReplayDecl {
    /// Optional label, for `expect for label …`.
    pub label: Option<Word>,
    /// The log or capture, relative to the source file.
    pub path: Word,
    /// `format "F"`: the log's format, as `--log-format` takes it.
    pub format: Option<Word>,
    /// `captured "User-Agent:64,Host"`: the headers HAProxy captured,
    /// in its slots' order, each with the `len` it cuts values at.
    pub captured: Option<Word>,
    /// `ip CIDR`: only the requests of these clients.
    pub ip: Option<Word>,
    /// A `format`, `captured` or `ip` given again on the line (an error).
    pub repeated: Vec<Word>,
    /// The whole line.
    pub span: Span,
}

/// `expect [for label] quantity verdict [by rule]`.
#[derive(Debug, Clone)]
pub struct ExpectDecl {
    /// Which sample block, or all of them.
    pub label: Option<Word>,
    /// `all`, `none`, `first`, `last` or a count.
    pub quantity: Word,
    /// `pass`, `allow`, `deny`, `throttle`, `drop` or `logged`.
    pub verdict: Word,
    /// The deciding rule.
    pub rule: Option<Word>,
    /// The whole line.
    pub span: Span,
}

/// `test "name" { … }`.
#[derive(Debug, Clone)]
pub struct TestDecl {
    /// The name.
    pub name: Word,
    /// `site S`: which site's rules apply.
    pub site: Option<Word>,
    /// Samples in order.
    pub samples: Vec<SampleDecl>,
    /// Traffic replayed from files, in order.
    pub replays: Vec<ReplayDecl>,
    /// Expectations.
    pub expects: Vec<ExpectDecl>,
    /// The whole test.
    pub span: Span,
}

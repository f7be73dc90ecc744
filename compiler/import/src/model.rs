//! requestctl's objects, read from YAML with requestctl's schema: its
//! fields, their types and their defaults (conftool's
//! `extensions/reqconfig/schema.py`). Every value keeps the span it was
//! read from, or the object's span when it took its default.

use crate::yaml::{Kind, Node, Plain};
use rctl_compiler::diag::{code, Diagnostic, Diagnostics};
use rctl_compiler::source::Span;
use std::collections::HashMap;

/// A value and where it came from.
#[derive(Debug, Clone)]
pub struct Val<T> {
    /// The value (the schema's default when not given).
    pub v: T,
    /// The value's span, or the object's when it was not given.
    pub span: Span,
    /// Whether the file gave it.
    pub given: bool,
}

/// The kinds of requestctl object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entity {
    /// `request-ipblocks/<scope>/<name>`.
    Ipblock,
    /// `request-patterns/<scope>/<name>`.
    Pattern,
    /// `request-actions/<cluster>/<name>`: Varnish (VCL).
    Action,
    /// `request-haproxy-actions/<cluster>/<name>`: HAProxy.
    HaproxyAction,
}

impl Entity {
    /// The tree directory and the dump's `metadata.type`.
    pub const ALL: [(Entity, &'static str, &'static str); 4] = [
        (Entity::Ipblock, "request-ipblocks", "ipblock"),
        (Entity::Pattern, "request-patterns", "pattern"),
        (Entity::Action, "request-actions", "action"),
        (
            Entity::HaproxyAction,
            "request-haproxy-actions",
            "haproxy_action",
        ),
    ];
}

/// An ipblock.
#[derive(Debug, Clone)]
pub struct Ipblock {
    /// `cidrs`.
    pub cidrs: Vec<Val<String>>,
    /// `comment`.
    pub comment: Val<String>,
}

/// A pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// `method`.
    pub method: Val<String>,
    /// `request_body`.
    pub request_body: Val<String>,
    /// `url_path`.
    pub url_path: Val<String>,
    /// `header`.
    pub header: Val<String>,
    /// `header_value`.
    pub header_value: Val<String>,
    /// `header_is_set` (the newer schema).
    pub header_is_set: Val<bool>,
    /// `query_parameter`.
    pub query_parameter: Val<String>,
    /// `query_parameter_value`.
    pub query_parameter_value: Val<String>,
}

/// What both kinds of action have.
#[derive(Debug, Clone)]
pub struct Common {
    /// `enabled`.
    pub enabled: Val<bool>,
    /// `priority` (0-255, lower first; default 100).
    pub priority: Val<i64>,
    /// `comment`.
    pub comment: Val<String>,
    /// `expression`.
    pub expression: Val<String>,
    /// `resp_status`.
    pub resp_status: Val<i64>,
    /// `resp_reason`.
    pub resp_reason: Val<String>,
    /// `sites`.
    pub sites: Vec<Val<String>>,
    /// `log_matching`.
    pub log_matching: Val<bool>,
}

/// A Varnish action.
#[derive(Debug, Clone)]
pub struct Action {
    /// The common fields.
    pub common: Common,
    /// `cache_miss_only` (default true).
    pub cache_miss_only: Val<bool>,
    /// `do_throttle`.
    pub do_throttle: Val<bool>,
    /// `throttle_requests` (default 500).
    pub throttle_requests: Val<i64>,
    /// `throttle_interval`, seconds (default 30).
    pub throttle_interval: Val<i64>,
    /// `throttle_duration`, seconds (default 1000).
    pub throttle_duration: Val<i64>,
    /// `throttle_per_ip`.
    pub throttle_per_ip: Val<bool>,
}

/// An HAProxy action.
#[derive(Debug, Clone)]
pub struct HaproxyAction {
    /// The common fields.
    pub common: Common,
    /// `silent_drop`.
    pub silent_drop: Val<bool>,
    /// `bw_throttle`.
    pub bw_throttle: Val<bool>,
    /// `per_ip_concurrency`.
    pub per_ip_concurrency: Val<bool>,
}

/// One object's body.
#[derive(Debug, Clone)]
pub enum Body {
    /// An ipblock.
    Ipblock(Ipblock),
    /// A pattern.
    Pattern(Pattern),
    /// A Varnish action.
    Action(Action),
    /// An HAProxy action.
    HaproxyAction(HaproxyAction),
}

/// One requestctl object.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its scope (ipblocks, patterns) or cluster (actions).
    pub tag: String,
    /// Its name.
    pub name: String,
    /// The whole object (its YAML document or mapping).
    pub span: Span,
    /// Its fields.
    pub body: Body,
}

impl Object {
    /// `tag/name`.
    pub fn slug(&self) -> String {
        format!("{}/{}", self.tag, self.name)
    }
}

/// Fields that requestctl keeps for its own bookkeeping: read and left out.
const BOOKKEEPING: &[&str] = &[
    "last_modified",
    "created",
    "keep",
    "bw_throttle_rate",
    "bw_throttle_duration",
    "per_ip_concurrency_limit",
    "per_ip_concurrency_counter_index",
];

struct Reader<'a> {
    fields: HashMap<String, &'a Node>,
    span: Span,
    diags: &'a mut Diagnostics,
}

impl Reader<'_> {
    fn bad(&mut self, n: &Node, field: &str, want: &str) {
        self.diags.push(
            Diagnostic::error(
                code::IMPORT_SHAPE,
                format!("`{field}` must be {want}, not {}", n.what()),
            )
            .primary(n.span, format!("{} here", n.what()))
            .hint(format!("requestctl's schema has `{field}` as {want}")),
        );
    }

    fn string(&mut self, f: &str) -> Val<String> {
        let mut v = Val {
            v: String::new(),
            span: self.span,
            given: false,
        };
        if let Some(n) = self.fields.get(f).copied() {
            match (&n.kind, n.plain()) {
                (_, Some(Plain::Null)) => v.span = n.span,
                (Kind::Scalar { text, .. }, _) => {
                    v = Val {
                        v: text.clone(),
                        span: n.span,
                        given: true,
                    }
                }
                _ => self.bad(n, f, "a string"),
            }
        }
        v
    }

    /// A typed scalar field: `pick` takes the value out of its resolved
    /// type, or it is an error naming `want`.
    fn typed<T>(
        &mut self,
        f: &str,
        default: T,
        want: &str,
        pick: fn(Plain) -> Option<T>,
    ) -> Val<T> {
        let Some(n) = self.fields.get(f).copied() else {
            return Val {
                v: default,
                span: self.span,
                given: false,
            };
        };
        match n.plain().and_then(pick) {
            Some(v) => Val {
                v,
                span: n.span,
                given: true,
            },
            None => {
                self.bad(n, f, want);
                Val {
                    v: default,
                    span: n.span,
                    given: false,
                }
            }
        }
    }

    fn boolean(&mut self, f: &str, default: bool) -> Val<bool> {
        self.typed(f, default, "true or false", |p| match p {
            Plain::Bool(b) => Some(b),
            _ => None,
        })
    }

    fn int(&mut self, f: &str, default: i64) -> Val<i64> {
        self.typed(f, default, "a whole number", |p| match p {
            Plain::Int(i) => Some(i),
            _ => None,
        })
    }

    fn strings(&mut self, f: &str) -> Vec<Val<String>> {
        let Some(n) = self.fields.get(f).copied() else {
            return Vec::new();
        };
        match &n.kind {
            Kind::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    match (&it.kind, it.plain()) {
                        (Kind::Scalar { text, .. }, Some(p)) if p != Plain::Null => out.push(Val {
                            v: text.clone(),
                            span: it.span,
                            given: true,
                        }),
                        _ => self.bad(it, f, "a list of strings"),
                    }
                }
                out
            }
            _ if n.plain() == Some(Plain::Null) => Vec::new(),
            _ => {
                self.bad(n, f, "a list");
                Vec::new()
            }
        }
    }

    fn common(&mut self) -> Common {
        Common {
            enabled: self.boolean("enabled", false),
            priority: self.int("priority", 100),
            comment: self.string("comment"),
            expression: self.string("expression"),
            resp_status: self.int("resp_status", 429),
            resp_reason: self.string("resp_reason"),
            sites: self.strings("sites"),
            log_matching: self.boolean("log_matching", false),
        }
    }
}

/// The schema's fields of each entity (besides the bookkeeping ones).
fn known(e: Entity) -> &'static [&'static str] {
    match e {
        Entity::Ipblock => &["cidrs", "comment"],
        Entity::Pattern => &[
            "method",
            "request_body",
            "url_path",
            "header",
            "header_value",
            "header_is_set",
            "query_parameter",
            "query_parameter_value",
        ],
        Entity::Action => &[
            "enabled",
            "priority",
            "cache_miss_only",
            "comment",
            "expression",
            "resp_status",
            "resp_reason",
            "sites",
            "do_throttle",
            "throttle_requests",
            "throttle_interval",
            "throttle_duration",
            "throttle_per_ip",
            "log_matching",
        ],
        Entity::HaproxyAction => &[
            "enabled",
            "priority",
            "comment",
            "expression",
            "resp_status",
            "resp_reason",
            "sites",
            "silent_drop",
            "bw_throttle",
            "per_ip_concurrency",
            "log_matching",
        ],
    }
}

/// Reads one object of kind `e` from a mapping (an empty document is an
/// object with every default, as requestctl reads it).
pub fn read(
    e: Entity,
    tag: &str,
    name: &str,
    node: Option<&Node>,
    whole: Span,
    diags: &mut Diagnostics,
) -> Option<Object> {
    let mut fields = HashMap::new();
    if let Some(n) = node {
        match &n.kind {
            Kind::Map(entries) => {
                for (k, v) in entries {
                    let Kind::Scalar { text, .. } = &k.kind else {
                        diags.push(
                            Diagnostic::error(code::IMPORT_SHAPE, "a field name must be a string")
                                .primary(k.span, "not a field name"),
                        );
                        continue;
                    };
                    if !known(e).contains(&text.as_str()) && !BOOKKEEPING.contains(&text.as_str()) {
                        diags.push(
                            Diagnostic::warning(
                                code::IMPORT_CHANGED,
                                format!("unknown field `{text}` is left out"),
                            )
                            .primary(k.span, "not in requestctl's schema")
                            .hint(format!("the fields are: {}", known(e).join(", "))),
                        );
                        continue;
                    }
                    if fields.insert(text.clone(), v).is_some() {
                        diags.push(
                            Diagnostic::error(
                                code::IMPORT_SHAPE,
                                format!("field `{text}` given twice"),
                            )
                            .primary(k.span, "again here"),
                        );
                    }
                }
            }
            _ if n.plain() == Some(Plain::Null) => {}
            _ => {
                diags.push(
                    Diagnostic::error(
                        code::IMPORT_SHAPE,
                        format!("a requestctl object is a mapping, not {}", n.what()),
                    )
                    .primary(n.span, "expected field: value lines"),
                );
                return None;
            }
        }
    }
    let mut r = Reader {
        fields,
        span: whole,
        diags,
    };
    let body = match e {
        Entity::Ipblock => Body::Ipblock(Ipblock {
            cidrs: r.strings("cidrs"),
            comment: r.string("comment"),
        }),
        Entity::Pattern => Body::Pattern(Pattern {
            method: r.string("method"),
            request_body: r.string("request_body"),
            url_path: r.string("url_path"),
            header: r.string("header"),
            header_value: r.string("header_value"),
            header_is_set: r.boolean("header_is_set", false),
            query_parameter: r.string("query_parameter"),
            query_parameter_value: r.string("query_parameter_value"),
        }),
        Entity::Action => Body::Action(Action {
            common: r.common(),
            cache_miss_only: r.boolean("cache_miss_only", true),
            do_throttle: r.boolean("do_throttle", false),
            throttle_requests: r.int("throttle_requests", 500),
            throttle_interval: r.int("throttle_interval", 30),
            throttle_duration: r.int("throttle_duration", 1000),
            throttle_per_ip: r.boolean("throttle_per_ip", false),
        }),
        Entity::HaproxyAction => Body::HaproxyAction(HaproxyAction {
            common: r.common(),
            silent_drop: r.boolean("silent_drop", false),
            bw_throttle: r.boolean("bw_throttle", false),
            per_ip_concurrency: r.boolean("per_ip_concurrency", false),
        }),
    };
    Some(Object {
        tag: tag.to_string(),
        name: name.to_string(),
        span: whole,
        body,
    })
}

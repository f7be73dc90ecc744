//! NOTIFY -> decision -> ACK.
//!
//! The message the agent understands is `rctl-req` ([`MESSAGE`]); its
//! arguments, by name (others are ignored):
//!
//! | argument | HAProxy sample | type | field |
//! |---|---|---|---|
//! | `method` | `method` | string | method |
//! | `host` | `req.hdr(host)` | string | host |
//! | `target` | `pathq` | string | path and query, as sent |
//! | `src` | `src` | ipv4/ipv6 (or a string holding an address) | client address (required) |
//! | `client` | `req.hdr_ip(H,-1)` (`emit --client-ip-header H`) | ipv4/ipv6; NULL when absent | the client address, when present, instead of `src` |
//! | `dst` | `dst` | ipv4/ipv6 | destination address |
//! | `dst_port` | `dst_port` | integer | destination port |
//! | `h.<name>` | `req.fhdr(<name>)` | string; NULL when absent | header `<name>` |
//!
//! Strings are bytes: invalid UTF-8 is decided on like any other bytes.
//! A `rctl-req` without a usable `src` cannot be decided: it is acked
//! without actions (the request goes on unchecked) and reported to the
//! observer as `spop-args`. Other messages are acked without actions.
//! An ACK that would carry no action carries `unset-var(txn, action)`
//! instead: HAProxy 3.1 stalls a request on an empty ACK until `timeout
//! processing` (fixed in 3.2); 2.6 accepts both.
//!
//! Each `rctl-req` is decided by one snapshot of the generation in force,
//! and answered with `set-var` actions in scope `txn` (HAProxy prefixes
//! them: `txn.<var-prefix>.<name>`): `action` (string), `status` (int,
//! deny and throttle), `reason` (string, deny and throttle), `retry_after`
//! (int seconds, throttle), `rule` (string, when a rule decided), `tags`
//! (string, comma-separated names of matching log and shadow rules, when
//! any) and `generation` (int). The ACK always fits the negotiated frame
//! size: long strings are cut (tags at a comma), `tags` first.

use super::Ctx;
use crate::judge::{Fields, Generation, Outcome};
use crate::spop::data::Value;
use crate::spop::frame::{Action, Encoder, FrameType, Messages, Scope};
use crate::spop::varint;
use rctl_dataplane::Scratch;
use std::net::IpAddr;
use std::sync::{Arc, Weak};
use std::time::Instant;

/// The name of the `spoe-message` the agent decides.
pub const MESSAGE: &[u8] = b"rctl-req";
/// The name of the `spoe-message` that says what HAProxy's configuration
/// covers (`cfg`: `rctl_emit::coverage::Coverage` in hex; see
/// [`crate::proxies`]).
pub const CONFIG_MESSAGE: &[u8] = b"rctl-cfg";

/// Decides the messages of NOTIFY frames for one connection.
pub(crate) struct Decider<'c> {
    ctx: &'c Ctx,
    max_frame: usize,
    /// The engine's working memory, for the generation it was made by
    /// (held weakly: an idle connection does not keep an old engine alive,
    /// and the allocation a `Weak` pins cannot be reused by a new one).
    scratch: Option<(Weak<Generation>, Scratch)>,
}

impl<'c> Decider<'c> {
    /// A decider whose ACKs fit in `max_frame_size`.
    pub(crate) fn new(ctx: &'c Ctx, max_frame_size: u32) -> Self {
        Decider {
            ctx,
            max_frame: max_frame_size as usize,
            scratch: None,
        }
    }

    /// Decides every `rctl-req` of `msgs` and appends the ACK to `out`.
    pub(crate) fn ack(
        &mut self,
        stream_id: u64,
        frame_id: u64,
        msgs: &Messages<'_>,
        out: &mut Vec<u8>,
    ) {
        let mut e = Encoder::new(out, FrameType::Ack, stream_id, frame_id);
        let empty = e.len();
        for msg in msgs.iter().filter(|m| m.name == CONFIG_MESSAGE) {
            if let Some(cfg) = msg.args.get(b"cfg").and_then(|v| v.as_bytes()) {
                self.ctx
                    .judge
                    .proxies()
                    .saw(crate::proxies::Proxy::Haproxy, cfg, true);
            }
        }
        for msg in msgs.iter().filter(|m| m.name == MESSAGE) {
            let mut headers = Vec::with_capacity(msg.args.len());
            let Some(fields) = fields(msg.args.iter(), &mut headers) else {
                self.ctx.observer.failed(
                    "spop-args",
                    "rctl-req without a usable src argument: not checked",
                );
                continue;
            };
            let judge = &self.ctx.judge;
            let t0 = Instant::now();
            let generation = judge.current();
            let scratch = match &mut self.scratch {
                Some((g, s)) if std::ptr::eq(g.as_ptr(), Arc::as_ptr(&generation)) => s,
                slot => {
                    let s = generation.engine.scratch();
                    &mut slot.insert((Arc::downgrade(&generation), s)).1
                }
            };
            let (outcome, decision) = judge.decide_in(&generation, &fields, scratch);
            let elapsed = t0.elapsed();
            self.ctx
                .observer
                .decided(&generation, &fields, &outcome, &decision, elapsed);
            set_vars(&mut e, &outcome, self.max_frame);
        }
        if e.len() == empty {
            e.action(&Action::UnsetVar {
                scope: Scope::Transaction,
                name: b"action",
            });
        }
        e.finish();
    }
}

/// The request fields of one message's arguments; `None` without `src`.
fn fields<'a: 'h, 'h>(
    args: impl Iterator<Item = (&'a [u8], Value<'a>)>,
    headers: &'h mut Vec<(&'a [u8], &'a [u8])>,
) -> Option<Fields<'h>> {
    let mut f = Fields {
        method: b"",
        host: b"",
        target: b"",
        headers: &[],
        ip: IpAddr::from([0, 0, 0, 0]),
        dst: None,
        port: 0,
    };
    let (mut src, mut client) = (None, None);
    for (name, value) in args {
        match name {
            b"method" => f.method = value.as_bytes().unwrap_or_default(),
            b"host" => f.host = value.as_bytes().unwrap_or_default(),
            b"target" => f.target = value.as_bytes().unwrap_or_default(),
            b"src" => src = ip(value),
            b"client" => client = ip(value),
            b"dst" => f.dst = ip(value),
            b"dst_port" => {
                f.port = value
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(0)
            }
            _ => {
                if let (Some(h), Some(v)) = (name.strip_prefix(b"h."), value.as_bytes()) {
                    headers.push((h, v));
                }
            }
        }
    }
    f.ip = client.or(src)?;
    f.headers = headers;
    Some(f)
}

fn ip(v: Value<'_>) -> Option<IpAddr> {
    match v {
        Value::Ipv4(a) => Some(a.into()),
        Value::Ipv6(a) => Some(a.into()),
        Value::String(s) => std::str::from_utf8(s).ok()?.parse().ok(),
        _ => None,
    }
}

/// Appends the outcome's set-var actions, within `max` bytes of frame.
fn set_vars(e: &mut Encoder<'_>, o: &Outcome, max: usize) {
    let int = |v: u64| Value::Int64(i64::try_from(v).unwrap_or(i64::MAX));
    set(
        e,
        b"action",
        Value::String(o.action.as_str().as_bytes()),
        max,
    );
    if o.status != 0 {
        set(e, b"status", Value::Int32(i32::from(o.status)), max);
    }
    if o.action == crate::judge::Action::Throttle {
        set(e, b"retry_after", int(o.retry_after_s), max);
    }
    set(e, b"generation", int(o.generation), max);
    if let Some(rule) = &o.rule {
        set_str(e, b"rule", rule.as_bytes(), None, max);
    }
    if !o.reason.is_empty() {
        set_str(e, b"reason", o.reason.as_bytes(), None, max);
    }
    if !o.tags.is_empty() {
        set_str(e, b"tags", o.tags.join(",").as_bytes(), Some(b','), max);
    }
}

/// Appends one set-var, unless the frame would exceed `max`.
fn set(e: &mut Encoder<'_>, name: &[u8], value: Value<'_>, max: usize) -> bool {
    let before = e.len();
    e.action(&Action::SetVar {
        scope: Scope::Transaction,
        name,
        value,
    });
    if e.len() > max {
        e.truncate(before);
        return false;
    }
    true
}

/// Appends a string set-var, cut (at the last `sep` that fits, if given)
/// so that the frame stays within `max`.
fn set_str(e: &mut Encoder<'_>, name: &[u8], s: &[u8], sep: Option<u8>, max: usize) {
    // type, nb-args, scope, name, value type, length (at most 3 bytes for
    // anything that fits a frame of < 264,432 bytes).
    let overhead = 3 + varint::encoded_len(name.len() as u64) + name.len() + 1 + 3;
    let room = max.saturating_sub(e.len() + overhead);
    let mut cut = s.len().min(room);
    if cut < s.len() {
        if let Some(sep) = sep {
            cut = s[..cut].iter().rposition(|&b| b == sep).unwrap_or(0);
        }
        if cut == 0 {
            return;
        }
    }
    set(e, name, Value::String(&s[..cut]), max);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Action as Verdict;
    use crate::spop::frame::{parse, Body, Limits, Parsed};

    fn outcome(tags: usize) -> Outcome {
        Outcome {
            action: Verdict::Throttle,
            status: 429,
            reason: "slow down".into(),
            retry_after_s: 7,
            rule: Some("scrapers".into()),
            shadowed: None,
            tags: (0..tags).map(|i| format!("tag{i}")).collect(),
            generation: 3,
        }
    }

    fn vars(out: &[u8]) -> Vec<(String, String)> {
        let Ok(Parsed::Frame(f, _)) = parse(out, &Limits::default()) else {
            panic!("bad ack")
        };
        let Body::Actions(a) = f.body else { panic!() };
        a.iter()
            .map(|a| match a {
                Action::SetVar { scope, name, value } => {
                    assert_eq!(scope, Scope::Transaction);
                    let v = match value {
                        Value::String(s) => String::from_utf8_lossy(s).into_owned(),
                        Value::Int32(i) => i.to_string(),
                        Value::Int64(i) => i.to_string(),
                        v => panic!("{v:?}"),
                    };
                    (String::from_utf8_lossy(name).into_owned(), v)
                }
                a => panic!("{a:?}"),
            })
            .collect()
    }

    #[test]
    fn a_throttle_sets_every_var_issue_11_fixes() {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, FrameType::Ack, 1, 2);
        set_vars(&mut e, &outcome(2), 16380);
        e.finish();
        let got = vars(&out);
        let want: Vec<(String, String)> = [
            ("action", "throttle"),
            ("status", "429"),
            ("retry_after", "7"),
            ("generation", "3"),
            ("rule", "scrapers"),
            ("reason", "slow down"),
            ("tags", "tag0,tag1"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_pass_sets_only_action_and_generation() {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, FrameType::Ack, 1, 2);
        let o = Outcome {
            action: Verdict::Pass,
            status: 0,
            reason: String::new(),
            retry_after_s: 0,
            rule: None,
            tags: vec![],
            ..outcome(0)
        };
        set_vars(&mut e, &o, 16380);
        e.finish();
        let names: Vec<String> = vars(&out).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["action", "generation"]);
    }

    #[test]
    fn thousands_of_tags_are_cut_at_a_comma_to_fit_the_frame() {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, FrameType::Ack, 1, 2);
        set_vars(&mut e, &outcome(5_000), 256);
        let len = e.finish();
        assert!(len <= 256, "{len}");
        let got = vars(&out);
        let tags = &got.iter().find(|(n, _)| n == "tags").unwrap().1;
        assert!(tags.starts_with("tag0,tag1,"), "{tags}");
        assert!(
            tags.split(',').all(|t| t.starts_with("tag") && t.len() > 3),
            "{tags}"
        );
    }

    #[test]
    fn arguments_map_to_fields_and_unknown_ones_are_ignored() {
        let args: Vec<(&[u8], Value<'_>)> = vec![
            (b"method", Value::String(b"POST")),
            (b"host", Value::String(b"query.example.org")),
            (b"target", Value::String(b"/sparql?q=\xff")),
            (b"src", Value::Ipv6("2001:db8::7".parse().unwrap())),
            (b"dst", Value::Ipv4([10, 0, 0, 1].into())),
            (b"dst_port", Value::Int64(443)),
            (b"h.user-agent", Value::String(b"bot/1")),
            (b"h.cache-control", Value::Null),
            (b"unknown", Value::String(b"x")),
            (b"", Value::Int32(1)),
        ];
        let mut h = Vec::new();
        let f = fields(args.iter().copied(), &mut h).unwrap();
        assert_eq!(
            (f.method, f.host),
            (&b"POST"[..], &b"query.example.org"[..])
        );
        assert_eq!(f.target, b"/sparql?q=\xff");
        assert_eq!(f.ip, "2001:db8::7".parse::<IpAddr>().unwrap());
        assert_eq!((f.dst, f.port), (Some([10, 0, 0, 1].into()), 443));
        assert_eq!(f.headers, &[(&b"user-agent"[..], &b"bot/1"[..])]);
        let mut h = Vec::new();
        assert!(fields(args[..3].iter().copied(), &mut h).is_none());
        let mut h = Vec::new();
        let src = [(&b"src"[..], Value::String(b"192.0.2.1"))];
        assert_eq!(
            fields(src.iter().copied(), &mut h).unwrap().ip,
            IpAddr::from([192, 0, 2, 1])
        );
    }
}

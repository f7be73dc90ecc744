//! The HTTP check endpoint (`--http ADDR`): nginx `auth_request` and
//! Envoy's HTTP ext_authz ask it about a request and act on the answer.
//!
//! **The request**, at `/check` (Envoy: `path_prefix: /check`) or
//! `/check/nginx`; its fields come from headers:
//!
//! | field | header | default |
//! |---|---|---|
//! | method | `X-Rctl-Method` | the check request's own method |
//! | host | `X-Rctl-Host` | `Host` |
//! | target | `X-Rctl-Target` (path and query as sent) | the check request's own path and query less the `/check` prefix (Envoy); required at `/check/nginx` |
//! | client | `X-Rctl-Client-Ip` | `X-Real-Ip`, else the last address of the last `X-Forwarded-For` (the one the proxy in front added); else the request is refused |
//! | destination | `X-Rctl-Dst-Ip` | none (`dst_ip` rules do not match) |
//! | port | `X-Rctl-Port` | 443 |
//! | headers | every other header, as itself (`X-Rctl-*` excepted) | |
//!
//! `X-Rctl-Config` says what the nginx configuration covers (see
//! [`crate::proxies`]); it is not a request field.
//!
//! **The answer.** Pass and allow: `200`. A block (deny, throttle, drop):
//! for Envoy the verdict's status (drop: `403`) with the reason as body;
//! in nginx mode (`/check/nginx` or `X-Rctl-Mode: nginx`), since
//! `auth_request` only understands 2xx, 401 and 403, always `403`, the
//! verdict's status in `X-Rctl-Status` (`444`, nginx's close-without-answer,
//! for drop). Every answer carries `X-Rctl-Action`, `X-Rctl-Generation`,
//! `X-Rctl-Rule` (the deciding rule), `X-Rctl-Reason` and `Retry-After`
//! (throttle) when meaningful, `X-Requestctl` (the matching `log` and
//! `shadow` rules) when any matched, and `X-Rctl-Shadow` (what `--shadow`
//! kept from being enforced).
//!
//! **Hostile input** never panics: a missing or malformed field is a `400`
//! with `X-Rctl-Error` saying which; headers past [`Limits`] get hyper's
//! `431`, malformed HTTP a `400`; each counts as a listener error.
//! Connections are bounded, and so is the time to send a request head.

use crate::judge::{Action, Fields, Generation, Judge, Observer, Outcome};
use crate::listen::Listener;
use crate::shutdown::{Shutdown, Tasks};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rctl_dataplane::{Decision, Scratch};
use std::cell::RefCell;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Bounds on what one client may make the endpoint hold (how many
/// connections, and from whom, is the listener's: [`crate::listen::Bind`]).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes of a request head (request line and headers).
    pub max_header_bytes: usize,
    /// Headers in a request.
    pub max_headers: usize,
    /// Time to send a request head, and how long a kept-alive connection
    /// may sit idle between requests: longer than the proxy keeps idle
    /// connections to the agent (nginx's upstream `keepalive_timeout`,
    /// 60 s by default), so that the proxy closes them first.
    pub header_timeout: Duration,
    /// On shutdown, how long connections get to finish.
    pub drain: Duration,
}

impl Default for Limits {
    /// A request head of at most 64 KiB and 1,100 headers, 75 s to send
    /// it or to sit idle between requests, 10 s to drain.
    ///
    /// The head's bounds hold every check request Debian's nginx 1.22
    /// sends with its defaults (`client_header_buffer_size 1k`,
    /// `large_client_header_buffers 4 8k`), so that no request nginx takes
    /// is refused here (a refusal fails open: the request goes unchecked,
    /// and nginx logs it so). nginx holds at most 1 KiB + 4 × 8 KiB =
    /// 33,792 bytes of a client's head, no line longer than 8 KiB. To the
    /// agent it sends its own request line, every header but Host as
    /// `name: value` and CRLF, Host, and seven `X-Rctl-*` headers of its
    /// own, two of which repeat the host and the target: at most about
    /// 59,300 bytes. Debian's nginx 1.22.1 refuses requests of more than
    /// 1,000 header lines, which keeps it to 1,007 headers sent (measured:
    /// 37,928 bytes). A build without that cap could send up to 11,264
    /// three-byte headers; past 1,100 they go unchecked, counted, rather
    /// than make every parse allocate room for that many (hyper sizes its
    /// header array by this bound on each request).
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            max_headers: 1_100,
            header_timeout: Duration::from_secs(75),
            drain: Duration::from_secs(10),
        }
    }
}

/// An answer to one HTTP request.
pub(crate) type Answer = Response<Full<Bytes>>;

/// Serves HTTP/1 on `listener` with `handler` until `shutdown` fires,
/// then lets connections finish the request in hand (at most
/// [`Limits::drain`]). Failures are reported to `observer` as
/// `http-parse`, `http-too-large`, `http-timeout`, `http-io`,
/// `http-accept`, and refused peers as `http-peer` (closed at once).
pub(crate) async fn serve_with<H>(
    listener: Listener,
    limits: &Limits,
    mut shutdown: Shutdown,
    observer: Arc<dyn Observer>,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> Answer + Clone + Send + Sync + 'static,
{
    let listener = match listener.into_tokio() {
        Ok(l) => l,
        Err(e) => {
            observer.failed("http-accept", &e.to_string());
            return;
        }
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(8192) * 2)
        .max_headers(limits.max_headers);
    let builder = Arc::new(builder);
    let mut tasks = Tasks::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.fired() => break,
        };
        let a = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, or a peer gone before accept: wait a
                // moment rather than spin.
                observer.failed("http-accept", &e.to_string());
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (stream, slot) = match a.slot {
            Ok(slot) => (a.stream, slot),
            Err(refusal) => {
                observer.failed("http-peer", &format!("{}: {refusal}", a.peer.shown));
                continue;
            }
        };
        let (builder, handler, observer) =
            (Arc::clone(&builder), handler.clone(), Arc::clone(&observer));
        let mut shutdown = shutdown.clone();
        tasks.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = shutdown.fired() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                let kind = if e.is_parse_too_large() {
                    "http-too-large"
                } else if e.is_parse() {
                    "http-parse"
                } else if e.is_timeout() {
                    "http-timeout"
                } else {
                    "http-io"
                };
                observer.failed(kind, &e.to_string());
            }
            drop(slot);
        });
    }
    drop(listener);
    tasks.drain(limits.drain).await;
}

/// Serves the check endpoint on `listener` until `shutdown` fires.
pub async fn serve(
    listener: Listener,
    judge: Arc<Judge>,
    observer: Arc<dyn Observer>,
    limits: Limits,
    shutdown: Shutdown,
) {
    let obs = Arc::clone(&observer);
    serve_with(listener, &limits, shutdown, observer, move |req| {
        check(&req, &judge, obs.as_ref())
    })
    .await;
}

/// Which proxy asks, and so how blocks are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Envoy,
    Nginx,
}

/// Answers one check request.
pub(crate) fn check(req: &Request<Incoming>, judge: &Judge, observer: &dyn Observer) -> Answer {
    check_parts(req.method(), req.uri(), req.headers(), judge, observer)
}

fn check_parts(
    method: &hyper::Method,
    uri: &hyper::Uri,
    headers: &HeaderMap,
    judge: &Judge,
    observer: &dyn Observer,
) -> Answer {
    let path = uri.path();
    let mut mode = if path == "/check/nginx" {
        Mode::Nginx
    } else if path == "/check" || path.starts_with("/check/") {
        Mode::Envoy
    } else {
        observer.failed("http-path", path);
        return plain(
            StatusCode::NOT_FOUND,
            "the check endpoint is /check (Envoy) or /check/nginx (nginx auth_request)",
        );
    };
    match headers.get("x-rctl-mode").map(HeaderValue::as_bytes) {
        None => {}
        Some(b"nginx") => mode = Mode::Nginx,
        Some(b"envoy") => mode = Mode::Envoy,
        Some(_) => return refuse(observer, "X-Rctl-Mode: expected nginx or envoy".into()),
    }
    // Envoy's path_prefix: the original path and query follow /check.
    let own_target = (mode == Mode::Envoy && path != "/check/nginx").then(|| {
        let pq = uri.path_and_query().map_or(path, |pq| pq.as_str());
        match pq.strip_prefix("/check") {
            Some(rest) if rest.starts_with('/') => rest.to_string(),
            Some(rest) => format!("/{rest}"),
            None => pq.to_string(),
        }
    });
    if let Some(cfg) = header(headers, "x-rctl-config") {
        judge
            .proxies()
            .saw(crate::proxies::Proxy::Nginx, cfg, false);
    }
    let fields = match request_fields(method, headers, own_target.as_deref()) {
        Ok(f) => f,
        Err(why) => return refuse(observer, why),
    };
    let hdrs: Vec<(&[u8], &[u8])> = headers
        .iter()
        .filter(|(n, _)| !n.as_str().starts_with("x-rctl-"))
        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
        .collect();
    let f = Fields {
        method: fields.method,
        host: fields.host,
        target: fields.target,
        headers: &hdrs,
        ip: fields.ip,
        dst: fields.dst,
        port: fields.port,
    };
    let started = Instant::now();
    let generation = judge.current();
    let (outcome, decision) = decide(judge, &generation, &f);
    let elapsed = started.elapsed();
    observer.decided(&generation, &f, &outcome, &decision, elapsed);
    answer(&outcome, mode)
}

thread_local! {
    /// This thread's decision memory and the generation it belongs to,
    /// held weakly: the allocation of a generation stays while the entry
    /// holds it, so no later generation can have its address.
    static SCRATCH: RefCell<Option<(Weak<Generation>, Scratch)>> = const { RefCell::new(None) };
}

/// [`Judge::decide_in`] with this thread's scratch for `generation`: a
/// fresh scratch per request (cold lazy-DFA caches) cost more than the
/// decision itself.
fn decide(judge: &Judge, generation: &Arc<Generation>, f: &Fields<'_>) -> (Outcome, Decision) {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        if !matches!(&*slot, Some((g, _)) if std::ptr::eq(g.as_ptr(), Arc::as_ptr(generation))) {
            *slot = None;
        }
        let (_, scratch) =
            slot.get_or_insert_with(|| (Arc::downgrade(generation), generation.engine.scratch()));
        judge.decide_in(generation, f, scratch)
    })
}

/// The fields a check request names, borrowed from its headers.
struct Named<'a> {
    method: &'a [u8],
    host: &'a [u8],
    target: &'a [u8],
    ip: IpAddr,
    dst: Option<IpAddr>,
    port: u16,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    h.get(name).map(HeaderValue::as_bytes)
}

fn parsed<T: std::str::FromStr>(
    h: &HeaderMap,
    name: &str,
    what: &str,
) -> Result<Option<T>, String> {
    let Some(v) = header(h, name) else {
        return Ok(None);
    };
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| format!("{}: not {what}", rctl_compiler::value::header_case(name)))
}

/// The client: `X-Rctl-Client-Ip`, else `X-Real-Ip`, else the last
/// address of the last `X-Forwarded-For`.
fn client(h: &HeaderMap) -> Result<IpAddr, String> {
    if let Some(ip) = parsed(h, "x-rctl-client-ip", "an IP address")? {
        return Ok(ip);
    }
    if let Some(ip) = parsed(h, "x-real-ip", "an IP address")? {
        return Ok(ip);
    }
    if let Some(xff) = h.get_all("x-forwarded-for").iter().next_back() {
        let last = std::str::from_utf8(xff.as_bytes())
            .ok()
            .and_then(|s| s.rsplit(',').next())
            .map(str::trim)
            .unwrap_or_default();
        return last
            .parse()
            .map_err(|_| "X-Forwarded-For: its last entry is not an IP address".to_string());
    }
    Err(
        "no client address: send X-Rctl-Client-Ip (nginx: $remote_addr; Envoy: \
         %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%), or X-Real-Ip or X-Forwarded-For"
            .into(),
    )
}

fn request_fields<'a>(
    method: &'a hyper::Method,
    h: &'a HeaderMap,
    own_target: Option<&'a str>,
) -> Result<Named<'a>, String> {
    let target = header(h, "x-rctl-target")
        .or(own_target.map(str::as_bytes))
        .ok_or(
            "no target: send X-Rctl-Target with the path and query as sent (nginx: $request_uri)",
        )?;
    Ok(Named {
        method: header(h, "x-rctl-method").unwrap_or(method.as_str().as_bytes()),
        host: header(h, "x-rctl-host")
            .or_else(|| header(h, "host"))
            .unwrap_or_default(),
        target,
        ip: client(h)?,
        dst: parsed(h, "x-rctl-dst-ip", "an IP address")?,
        port: parsed(h, "x-rctl-port", "a port number")?.unwrap_or(443),
    })
}

fn plain(status: StatusCode, body: &str) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn refuse(observer: &dyn Observer, why: String) -> Answer {
    observer.failed("http-request", &why);
    let mut r = plain(StatusCode::BAD_REQUEST, &why);
    set(r.headers_mut(), "x-rctl-error", &why);
    r
}

/// Sets a header; bytes a header value cannot hold become `?`.
fn set(h: &mut HeaderMap, name: &'static str, value: &str) {
    let v = HeaderValue::from_str(value).unwrap_or_else(|_| {
        let clean: String = value
            .chars()
            .map(|c| {
                if c == '\t' || (' '..='~').contains(&c) {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        HeaderValue::from_str(&clean).unwrap_or(HeaderValue::from_static("?"))
    });
    h.insert(HeaderName::from_static(name), v);
}

/// The answer for an outcome.
fn answer(o: &Outcome, mode: Mode) -> Answer {
    let blocked = o.action.blocks();
    let status = match (blocked, mode, o.action) {
        (false, _, _) => StatusCode::OK,
        (true, Mode::Nginx, _) | (true, Mode::Envoy, Action::Drop) => StatusCode::FORBIDDEN,
        (true, Mode::Envoy, _) => StatusCode::from_u16(o.status).unwrap_or(StatusCode::FORBIDDEN),
    };
    let mut r = if blocked {
        plain(status, &o.reason)
    } else {
        Response::new(Full::new(Bytes::new()))
    };
    *r.status_mut() = status;
    let h = r.headers_mut();
    set(h, "x-rctl-action", o.action.as_str());
    set(h, "x-rctl-generation", &o.generation.to_string());
    if let Some(rule) = &o.rule {
        set(h, "x-rctl-rule", rule);
    }
    if blocked {
        let code = if o.action == Action::Drop {
            444
        } else {
            o.status
        };
        set(h, "x-rctl-status", &code.to_string());
        if !o.reason.is_empty() {
            set(h, "x-rctl-reason", &o.reason);
        }
    }
    if o.action == Action::Throttle {
        set(h, "retry-after", &o.retry_after_s.to_string());
    }
    if !o.tags.is_empty() {
        set(h, "x-requestctl", &o.tags.join(","));
    }
    if let Some(would) = o.shadowed {
        set(h, "x-rctl-shadow", would.as_str());
    }
    r
}

/// Serves `/metrics` (Prometheus text) on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: Listener,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    observer: Arc<dyn Observer>,
    shutdown: Shutdown,
) {
    let limits = Limits::default();
    serve_with(listener, &limits, shutdown, observer, move |req| {
        if req.uri().path() != "/metrics" {
            return plain(StatusCode::NOT_FOUND, "metrics are at /metrics");
        }
        let mut r = plain(StatusCode::OK, "");
        *r.body_mut() = Full::new(Bytes::from(render()));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static(prometheus_client::encoding::prometheus_text::CONTENT_TYPE),
        );
        r
    })
    .await;
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;

//! The control socket's server side: one task per connection, one pending
//! prepare for the whole agent.

use super::{
    build, from_hex, AgentStatus, Committed, ControlRequest, FleetStatus, Load, LogTotals,
    PendingInfo, Prepared, MAX_LINE,
};
use crate::judge::{Generation, Judge, Observer as _};
use crate::listen::Listener;
use crate::metrics::Metrics;
use crate::reqlog::ReqLog;
use crate::shutdown::{Shutdown, Tasks};
use rctl_dataplane::carry::Carry;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// How loads are built.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The agent's `--site` (what a load without `site` uses).
    pub site: Option<String>,
    /// Most keys each limiter tracks.
    pub max_keys_per_limiter: usize,
    /// How long a prepare waits for its commit.
    pub prepare_ttl: Duration,
    /// What the agent listens on, for status.
    pub listeners: Vec<String>,
}

/// A prepared generation waiting for its commit.
struct Pending {
    id: String,
    conn: u64,
    generation: Generation,
    /// The artifact's bytes (kept in the state directory once committed).
    bytes: Vec<u8>,
    /// The generation it was prepared against (and carried from).
    base: u64,
    carry: Carry,
    at: Instant,
}

enum Slot {
    Empty,
    /// A prepare is being built.
    Building {
        at: Instant,
    },
    Ready(Box<Pending>),
}

/// The agent's side of the control socket.
pub struct Control {
    judge: Arc<Judge>,
    metrics: Arc<Metrics>,
    log: Option<Arc<ReqLog>>,
    top: Arc<crate::top::TopCounts>,
    /// The open taps (`{"op":"tap"}`): the listeners record into them.
    taps: Arc<crate::tap::Taps>,
    /// Whether the listeners count into `top` (`rctl serve --top`).
    counting: std::sync::atomic::AtomicBool,
    config: ControlConfig,
    slot: Mutex<Slot>,
    next_conn: AtomicU64,
    extra: std::sync::OnceLock<StatusExtra>,
    persist: std::sync::OnceLock<Arc<crate::persist::Persist>>,
}

/// Where a prepare's artifact comes from.
enum Source {
    /// A control request.
    Load(Load),
    /// Bytes from an in-process client, a site, and the number the
    /// generation is to have.
    Bytes(Vec<u8>, Option<String>, Option<u64>),
}

/// What a status adds, from whoever runs beside the agent (the fleet
/// agent: etcd and the shared limits).
pub type StatusExtra = Box<dyn Fn() -> FleetStatus + Send + Sync>;

impl Control {
    /// The control of the agent deciding with `judge`.
    pub fn new(
        judge: Arc<Judge>,
        metrics: Arc<Metrics>,
        log: Option<Arc<ReqLog>>,
        config: ControlConfig,
    ) -> Control {
        Control {
            judge,
            metrics,
            log,
            top: Arc::default(),
            taps: Arc::default(),
            counting: std::sync::atomic::AtomicBool::new(false),
            config,
            slot: Mutex::new(Slot::Empty),
            next_conn: AtomicU64::new(1),
            extra: std::sync::OnceLock::new(),
            persist: std::sync::OnceLock::new(),
        }
    }

    /// The recent traffic's counters (`rctl top`): the listeners count
    /// into them, the control socket reads them.
    pub fn top(&self) -> Arc<crate::top::TopCounts> {
        Arc::clone(&self.top)
    }

    /// The open taps: the listeners record every decided request into
    /// them (nothing but one load while none is open).
    pub fn taps(&self) -> Arc<crate::tap::Taps> {
        Arc::clone(&self.taps)
    }

    /// The webrequest headers the agent receives from the proxies in
    /// front, for the ruleset in force.
    fn tap_headers(&self) -> Vec<String> {
        let g = self.judge.current();
        crate::tap::Taps::received(self.judge.proxies(), g.engine.ruleset())
    }

    /// Has the listeners count for `rctl top` (before they start).
    pub fn count_top(&self) {
        self.counting.store(true, Ordering::Relaxed);
    }

    /// Whether the listeners count for `rctl top`.
    pub fn counts_top(&self) -> bool {
        self.counting.load(Ordering::Relaxed)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answers one request line from connection `conn`.
    pub async fn handle(self: &Arc<Self>, conn: u64, line: &[u8]) -> Value {
        let answer = match serde_json::from_slice::<ControlRequest>(line) {
            Err(e) => Err(format!(
                "not a request: {e} (send one JSON object a line, such as {{\"op\":\"status\"}})"
            )),
            Ok(ControlRequest::Status) => Ok(self.status()),
            Ok(ControlRequest::Top { .. }) if !self.counts_top() => Err(
                "this agent does not count its traffic for rctl top: start it with --top (what that costs each request is in the agent manual)".to_string(),
            ),
            Ok(ControlRequest::Top { seconds, n }) => Ok(json!(self
                .top
                .top(seconds.unwrap_or(crate::top::WINDOW_S), n.unwrap_or(20)))),
            Ok(ControlRequest::Tap { .. }) => Err(
                "a tap streams on its own connection: send it on the control socket".to_string(),
            ),
            Ok(ControlRequest::Prepare(l)) => {
                self.prepare(conn, Source::Load(l)).await.map(|p| json!(p))
            }
            Ok(ControlRequest::Commit { id }) => self.commit(&id, None).map(|c| json!(c)),
            Ok(ControlRequest::Abort { id }) => self.abort(&id).map(|()| json!({})),
            Ok(ControlRequest::Load(l)) => match self.prepare(conn, Source::Load(l)).await {
                Ok(p) => self.commit(&p.id, Some(p.carried)).map(|c| json!(c)),
                Err(e) => Err(e),
            },
        };
        match answer {
            Ok(mut v) => {
                v["ok"] = json!(true);
                v
            }
            Err(e) => json!({"ok": false, "error": e}),
        }
    }

    /// Drops what connection `conn` prepared and did not commit.
    pub fn disconnected(&self, conn: u64) {
        let mut slot = self.slot();
        if matches!(&*slot, Slot::Ready(p) if p.conn == conn) {
            *slot = Slot::Empty;
        }
    }

    /// A connection id for an in-process client (such as the fleet
    /// agent): what it prepares is its own, as a socket connection's is.
    pub fn connection(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Prepares the artifact `bytes` for `site` (default: the agent's) as
    /// connection `conn`: what `{"op":"prepare"}` does, in process. With
    /// `number` above the generation in force, the new generation has
    /// that number (the fleet's), else the next one.
    pub async fn prepare_artifact(
        self: &Arc<Self>,
        conn: u64,
        bytes: Vec<u8>,
        site: Option<String>,
        number: Option<u64>,
    ) -> Result<Prepared, String> {
        self.prepare(conn, Source::Bytes(bytes, site, number)).await
    }

    async fn prepare(self: &Arc<Self>, conn: u64, load: Source) -> Result<Prepared, String> {
        let ttl = self.config.prepare_ttl;
        {
            let mut slot = self.slot();
            let busy = match &*slot {
                Slot::Empty => None,
                Slot::Ready(p) if p.conn == conn || p.at.elapsed() > ttl => None,
                Slot::Ready(p) => Some((p.at, format!(" (id {})", p.id))),
                Slot::Building { at, .. } => Some((*at, String::new())),
            };
            if let Some((at, id)) = busy {
                let left = ttl.saturating_sub(at.elapsed()).as_secs();
                return Err(format!(
                    "another prepare{id} is pending, {} s old: it ends when its client commits \
                     or aborts it or disconnects, or in {left} s; try again then",
                    at.elapsed().as_secs()
                ));
            }
            *slot = Slot::Building { at: Instant::now() };
        }
        let this = Arc::clone(self);
        let started = Instant::now();
        let built = tokio::task::spawn_blocking(move || this.build(load))
            .await
            .map_err(|e| format!("building the engine failed: {e}"))
            .and_then(|r| r);
        let mut slot = self.slot();
        let (pending, prepared) = match built {
            Ok(v) => v,
            Err(e) => {
                *slot = Slot::Empty;
                drop(slot);
                self.metrics.reloaded(false);
                let why = format!(
                    "not prepared (generation {} keeps serving): {e}",
                    self.judge.current().number
                );
                crate::event::line(&format!("reload failed: {why}"));
                return Err(why);
            }
        };
        let prepared = Prepared {
            prepare_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ..prepared
        };
        *slot = Slot::Ready(Box::new(Pending { conn, ..pending }));
        Ok(prepared)
    }

    /// Reads and builds; runs on a blocking thread.
    fn build(&self, source: Source) -> Result<(Pending, Prepared), String> {
        let (bytes, site, number) = match source {
            Source::Bytes(b, site, number) => (b, site, number),
            Source::Load(load) => {
                let bytes = match (load.artifact_hex, load.path) {
                    (Some(h), None) => from_hex(&h).map_err(|e| e.0)?,
                    (None, Some(p)) => rctl_compiler::files::read_binary(
                        &p,
                        rctl_compiler::files::MAX_BINARY_BYTES,
                    )
                    .map_err(|e| format!("reading {}: {e}", p.display()))?,
                    _ => {
                        return Err(
                            "give the artifact as exactly one of artifact_hex or path".into()
                        )
                    }
                };
                (bytes, load.site, None)
            }
        };
        let site = site.or_else(|| self.config.site.clone());
        let old = self.judge.current();
        let (generation, carry, warnings) = build(
            &bytes,
            site.as_deref(),
            self.config.max_keys_per_limiter,
            number.filter(|n| *n > old.number).unwrap_or(old.number + 1),
            Some(&old),
        )
        .map_err(|e| e.0)?;
        let id = super::to_hex(&random_id());
        let prepared = Prepared {
            id: id.clone(),
            generation: generation.number,
            artifact_sha256: generation.sha256.clone(),
            rules: generation.engine.ruleset().rules.len(),
            carried: carry.clone(),
            prepare_ms: 0,
            stale_proxies: self
                .judge
                .proxies()
                .against(generation.engine.ruleset())
                .into_iter()
                .flat_map(|p| p.stale)
                .collect(),
            warnings,
        };
        let pending = Pending {
            id,
            conn: 0,
            generation,
            bytes,
            base: old.number,
            carry,
            at: Instant::now(),
        };
        Ok((pending, prepared))
    }

    /// Installs prepare `id` (one atomic swap); `carried` is echoed in the
    /// answer (a load's).
    pub fn commit(&self, id: &str, carried: Option<Carry>) -> Result<Committed, String> {
        let mut slot = self.slot();
        let ttl = self.config.prepare_ttl;
        let p = match std::mem::replace(&mut *slot, Slot::Empty) {
            Slot::Ready(p) if p.id == id && p.at.elapsed() <= ttl => p,
            Slot::Ready(p) if p.id == id => {
                return Err(format!(
                    "prepare {id} expired ({} s old, the limit is {} s): prepare again",
                    p.at.elapsed().as_secs(),
                    ttl.as_secs()
                ));
            }
            other => {
                *slot = other;
                return Err(format!(
                    "no pending prepare {id} (aborted, expired, or its connection closed)"
                ));
            }
        };
        let current = self.judge.current().number;
        if current != p.base {
            return Err(format!(
                "generation {current} came into force after prepare {id} (made against {}): \
                 prepare again",
                p.base
            ));
        }
        let Pending {
            mut generation,
            carry,
            bytes,
            ..
        } = *p;
        generation.installed_unix = crate::now_unix();
        let (number, sha) = (generation.number, generation.sha256.clone());
        let rules = generation.engine.ruleset().rules.len();
        let old = self.judge.install(generation);
        drop(slot);
        self.metrics.reloaded(true);
        let stale = self
            .judge
            .proxies()
            .against(self.judge.current().engine.ruleset());
        let stale: Vec<String> = stale.into_iter().flat_map(|p| p.stale).collect();
        crate::event::line(&format!(
            "applied generation {number} (artifact {}, {rules} rules), replacing {}{}",
            crate::event::short(&sha),
            old.number,
            if stale.is_empty() {
                String::new()
            } else {
                format!(
                    "; the proxies' configuration is stale for it: {}",
                    stale.join("; ")
                )
            }
        ));
        // What a restart starts from (with a state directory).
        if let Some(p) = self.persist.get() {
            p.keep_artifact(&bytes);
        }
        Ok(Committed {
            generation: number,
            artifact_sha256: sha,
            replaced: old.number,
            carried: carried.map(|_| carry),
        })
    }

    /// Drops prepare `id`.
    pub fn abort(&self, id: &str) -> Result<(), String> {
        let mut slot = self.slot();
        match &*slot {
            Slot::Ready(p) if p.id == id => {
                *slot = Slot::Empty;
                Ok(())
            }
            _ => Err(format!(
                "no pending prepare {id} (committed, aborted, expired, or its connection closed)"
            )),
        }
    }

    /// Shows what the saver of bans and buckets did in every status.
    pub fn set_persist(&self, p: Arc<crate::persist::Persist>) {
        let _ = self.persist.set(p);
    }

    /// Adds what `extra` says to every status from now on, as its `fleet`
    /// (the first one set stays).
    pub fn set_status_extra(&self, extra: StatusExtra) {
        let _ = self.extra.set(extra);
    }

    /// The agent's status.
    pub fn status(&self) -> Value {
        let g = self.judge.current();
        let started = self.metrics.started_unix();
        let pending = match &*self.slot() {
            Slot::Ready(p) if p.at.elapsed() <= self.config.prepare_ttl => Some(PendingInfo {
                id: p.id.clone(),
                age_s: p.at.elapsed().as_secs(),
            }),
            _ => None,
        };
        let log = self.log.as_ref().map(|l| {
            let t = l.totals();
            LogTotals {
                written: t.written,
                suppressed: t.suppressed,
                dropped: t.dropped,
                failed: t.failed,
                over_size: t.over_size,
            }
        });
        json!(AgentStatus {
            generation: g.number,
            artifact_sha256: g.sha256.clone(),
            installed_unix: g.installed_unix,
            started_unix: started,
            uptime_s: crate::now_unix().saturating_sub(started),
            site: self.config.site.clone(),
            shadow: self.judge.shadow(),
            rules: g.engine.ruleset().rules.len(),
            listeners: self.config.listeners.clone(),
            counts: self.metrics.counts(),
            log,
            pending,
            proxies: self.judge.proxies().against(g.engine.ruleset()),
            limit_state: self.persist.get().map(|p| p.status()),
            fleet: self.extra.get().map(|f| f()),
        })
    }
}

/// 128 unpredictable bits (the standard library's randomly keyed hasher).
fn random_id() -> [u8; 16] {
    use std::hash::BuildHasher as _;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = std::hash::RandomState::new().hash_one(t);
    let b = std::hash::RandomState::new().hash_one((t, a));
    let mut id = [0; 16];
    id[..8].copy_from_slice(&a.to_le_bytes());
    id[8..].copy_from_slice(&b.to_le_bytes());
    id
}

/// Serves the control socket on `listener` until `shutdown` fires. Only
/// peers the listener trusts (root, the agent's user, the control
/// group's members) are served: anyone else gets one refusal line and is
/// closed, whatever the socket file's mode lets through.
pub async fn serve(listener: Listener, control: Arc<Control>, mut shutdown: Shutdown) {
    let Ok(listener) = listener.into_tokio() else {
        return;
    };
    let mut tasks = Tasks::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.fired() => break,
        };
        let Ok(a) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (stream, slot) = match a.slot {
            Ok(slot) => (a.stream, slot),
            Err(refusal) => {
                control
                    .metrics
                    .failed("control-peer", &format!("{}: {refusal}", a.peer.shown));
                let e = json!({"ok": false, "error": refusal.to_string()});
                a.stream.try_write_now(format!("{e}\n").as_bytes());
                continue;
            }
        };
        let crate::listen::Stream::Unix(stream) = stream else {
            continue;
        };
        let control = Arc::clone(&control);
        let conn = control.next_conn.fetch_add(1, Ordering::Relaxed);
        let mut shutdown = shutdown.clone();
        tasks.spawn(async move {
            let _slot = slot;
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut line = Vec::new();
            loop {
                line.clear();
                let mut limited = (&mut read).take(MAX_LINE as u64 + 1);
                let n = tokio::select! {
                    n = limited.read_until(b'\n', &mut line) => n,
                    () = shutdown.fired() => break,
                };
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.len() > MAX_LINE => {
                        let e = json!({"ok": false, "error": format!("a request line is longer than {MAX_LINE} bytes")});
                        let _ = write.write_all(format!("{e}\n").as_bytes()).await;
                        break;
                    }
                    Ok(_) => {}
                }
                if let Ok(ControlRequest::Tap { seconds }) = serde_json::from_slice(&line) {
                    let c = Arc::clone(&control);
                    let headers = move || c.tap_headers();
                    let io = (&mut read, &mut write);
                    super::tap::stream(&control.taps, seconds, headers, io, &mut shutdown).await;
                    break;
                }
                let answer = control.handle(conn, &line).await;
                if write
                    .write_all(format!("{answer}\n").as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            control.disconnected(conn);
        });
    }
    tasks.drain(Duration::from_secs(5)).await;
}

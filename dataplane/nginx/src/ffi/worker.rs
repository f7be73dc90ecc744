//! What a worker holds: the shared zone (counters and buckets), the
//! generation in force, and the timer that watches the artifact's file.

use super::{MainConf, Module};
use crate::counters::{Counters, Failure};
use crate::generation::{FileId, Generation};
use ngx::ffi::{
    ngx_add_timer, ngx_cycle_t, ngx_event_t, ngx_exiting, ngx_http_conf_ctx_t, ngx_http_module,
    ngx_int_t, ngx_log_t, ngx_pid, ngx_process, ngx_quit, ngx_shm_zone_t, ngx_slab_alloc,
    ngx_slab_pool_t, ngx_terminate, NGX_LOG_ERR, NGX_LOG_NOTICE, NGX_PROCESS_SINGLE,
    NGX_PROCESS_WORKER,
};
use ngx::http::HttpModule;
use ngx::ngx_log_error;
use rctl_dataplane::limiter::zone::{Zone, ZoneHeader, ZoneSlot, SLOT_BYTES};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The zone's region: its length (one word, padded to 64 bytes), the
/// counters, then the bucket table's header and its slots, each part
/// 64-byte aligned.
const LEN_BYTES: usize = 64;
const COUNTERS_BYTES: usize = std::mem::size_of::<Counters>().next_multiple_of(64);
const HEADER_BYTES: usize = std::mem::size_of::<ZoneHeader>().next_multiple_of(64);

/// The shared memory of one zone, as every process maps it.
#[derive(Clone, Copy)]
pub struct Shared {
    /// What the workers count.
    pub counters: &'static Counters,
    /// The buckets.
    pub zone: Zone,
}

/// A worker's state.
pub struct Live {
    /// The generation in force; each request is decided by it alone.
    pub current: Generation,
    /// The zone.
    pub shared: Shared,
    /// This worker's line in the counters.
    slot: Option<usize>,
    /// A file that failed to load (tried again only once it changes).
    failed: Option<FileId>,
    timer: Box<ngx_event_t>,
}

/// The shared zone's region at `data`.
///
/// # Safety
/// `data` is null or a region [`zone_init`] made: mapped in every
/// process of the cycle for as long as the process lives (nginx unmaps a
/// zone only in the master, after the cycle that used it is gone; workers
/// keep theirs until they exit).
unsafe fn shared(data: *mut u8) -> Option<Shared> {
    if data.is_null() {
        return None;
    }
    // SAFETY: as the caller says; every type is atomics only, so any
    // bytes are valid, and the region is aligned to a page.
    let bytes = unsafe { (*(data as *const AtomicU64)).load(Ordering::Acquire) } as usize;
    let fixed = LEN_BYTES + COUNTERS_BYTES + HEADER_BYTES;
    let slots = bytes.checked_sub(fixed)? / SLOT_BYTES;
    let (counters, header, slots) = unsafe {
        (
            &*(data.add(LEN_BYTES) as *const Counters),
            &*(data.add(LEN_BYTES + COUNTERS_BYTES) as *const ZoneHeader),
            std::slice::from_raw_parts(data.add(fixed) as *const ZoneSlot, slots),
        )
    };
    Some(Shared {
        counters,
        zone: Zone::attach(header, slots).ok()?,
    })
}

/// nginx calls it when a cycle's zones are mapped, `data` being the
/// previous cycle's region when the zone is the same (a reload): the
/// buckets and counters carry on.
pub extern "C" fn zone_init(
    shm_zone: *mut ngx_shm_zone_t,
    data: *mut std::ffi::c_void,
) -> ngx_int_t {
    // SAFETY: nginx's zone, mapped.
    let z = unsafe { &mut *shm_zone };
    if !data.is_null() {
        z.data = data;
        return ngx::core::Status::NGX_OK.into();
    }
    // SAFETY: a zone's memory starts with its slab pool.
    let sp = unsafe { &mut *(z.shm.addr as *mut ngx_slab_pool_t) };
    if z.shm.exists != 0 && !sp.data.is_null() {
        z.data = sp.data;
        return ngx::core::Status::NGX_OK.into();
    }
    // Every free page, in one allocation (the pool is new: they are
    // contiguous), less one for the allocator's own use.
    let pages = sp.pfree.saturating_sub(1);
    let bytes = pages * 4096;
    // SAFETY: the pool is the zone's; the master alone runs now.
    let region = unsafe { ngx_slab_alloc(sp, bytes) } as *mut u8;
    if region.is_null() {
        return ngx::core::Status::NGX_ERROR.into();
    }
    // SAFETY: just allocated, `bytes` long and page-aligned.
    unsafe {
        ptr::write_bytes(region, 0, bytes);
        (*(region as *const AtomicU64)).store(bytes as u64, Ordering::Release);
    }
    sp.data = region.cast();
    z.data = region.cast();
    ngx::core::Status::NGX_OK.into()
}

/// The module's main configuration in `cycle`, if the http block has one.
///
/// # Safety
/// `cycle` is nginx's running cycle.
pub unsafe fn main_conf(cycle: *mut ngx_cycle_t) -> Option<&'static MainConf> {
    // SAFETY: the http module's conf ctx, if there is an http block.
    unsafe {
        let ctx = *(*cycle).conf_ctx.add(ngx_http_module.index);
        if ctx.is_null() {
            return None;
        }
        let ctx = &*(ctx as *const ngx_http_conf_ctx_t);
        (*ctx.main_conf.add(Module::module().ctx_index) as *const MainConf).as_ref()
    }
}

pub fn alive(pid: u64) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks whether the process exists.
    unsafe { libc::kill(p, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A worker starts: binds the generation loaded with the configuration
/// to the zone, says so in the counters and starts watching the file.
pub extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    let ok = std::panic::catch_unwind(|| {
        // SAFETY: nginx's globals and cycle, in the process they describe.
        let (process, log) = unsafe { (ngx_process as u32, (*cycle).log) };
        if process != NGX_PROCESS_WORKER && process != NGX_PROCESS_SINGLE {
            return;
        }
        let Some(mcf) = (unsafe { main_conf(cycle) }) else {
            return;
        };
        let Some(mut current) = mcf.loaded.borrow_mut().take() else {
            return;
        };
        // SAFETY: the zone nginx mapped for this cycle (zone_init ran).
        let Some(shared) = (unsafe {
            mcf.shm_zone
                .as_ref()
                .and_then(|z| shared(z.data as *mut u8))
        }) else {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rctl: the shared zone is unusable: requests go unchecked"
            );
            return;
        };
        current.own_buckets = current.engine.count_in_zone(shared.zone);
        current.number = shared.counters.generation_of(&current.sha256);
        // SAFETY: nginx's global.
        let pid = unsafe { ngx_pid } as u64;
        let slot = shared.counters.register(pid, alive);
        if let Some(s) = slot {
            let rules = current.engine.ruleset().rules.len() as u64;
            shared
                .counters
                .running(s, current.number, &current.sha256, rules, unix_now());
        }
        let timer = Box::new(timer_event(log));
        *mcf.live.borrow_mut() = Some(Live {
            current,
            shared,
            slot,
            failed: None,
            timer,
        });
        if mcf.watch_ms > 0 {
            arm(mcf);
        }
    });
    let _ = ok;
    ngx::core::Status::NGX_OK.into()
}

/// A worker stops: frees its line.
pub extern "C" fn exit_process(cycle: *mut ngx_cycle_t) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: nginx's cycle and global.
        let (Some(mcf), pid) = (unsafe { main_conf(cycle) }, unsafe { ngx_pid } as u64) else {
            return;
        };
        if let Some(live) = mcf.live.borrow().as_ref() {
            if let Some(s) = live.slot {
                live.shared.counters.unregister(s, pid);
            }
        }
    });
}

fn timer_event(log: *mut ngx_log_t) -> ngx_event_t {
    // nginx logs a timer's "connection" fd: this looks like one of -1's
    // kin (its fourth word), as the ngx crate's own timers do.
    static IDENT: [usize; 4] = [0, 0, 0, 0x7263_746c];
    // SAFETY: an event is plain data; zero is its idle state.
    let mut ev: ngx_event_t = unsafe { std::mem::zeroed() };
    ev.data = ptr::addr_of!(IDENT).cast_mut().cast();
    ev.handler = Some(on_timer);
    ev.log = log;
    // A worker that is shutting down does not wait for it.
    ev.set_cancelable(1);
    ev
}

fn arm(mcf: &MainConf) {
    if let Some(live) = mcf.live.borrow_mut().as_mut() {
        // SAFETY: the event is boxed in the worker's state, which lives
        // until the process exits.
        unsafe { ngx_add_timer(&mut *live.timer, mcf.watch_ms as _) };
    }
}

extern "C" fn on_timer(_ev: *mut ngx_event_t) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: nginx's globals, in this worker.
        let (cycle, stopping) = unsafe {
            (
                ngx::ffi::ngx_cycle as *mut ngx_cycle_t,
                ngx_exiting != 0 || ngx_quit != 0 || ngx_terminate != 0,
            )
        };
        let Some(mcf) = (unsafe { main_conf(cycle) }) else {
            return;
        };
        if stopping {
            return;
        }
        // SAFETY: the running cycle's log.
        watch(mcf, unsafe { (*cycle).log });
        arm(mcf);
    });
}

/// Loads the artifact again if its file changed, and makes it the
/// generation in force; a file that fails keeps the old one.
fn watch(mcf: &MainConf, log: *mut ngx_log_t) {
    let Some(path) = &mcf.artifact else {
        return;
    };
    let mut guard = mcf.live.borrow_mut();
    let Some(live) = guard.as_mut() else {
        return;
    };
    let now = FileId::of(path);
    if now.is_none() || now == Some(live.current.file) || now == live.failed {
        return;
    }
    match Generation::load(path, mcf.site.as_deref(), Some(live.shared.zone)) {
        Ok(mut g) => {
            g.number = live.shared.counters.generation_of(&g.sha256);
            if let Some(s) = live.slot {
                let rules = g.engine.ruleset().rules.len() as u64;
                live.shared
                    .counters
                    .running(s, g.number, &g.sha256, rules, unix_now());
            }
            ngx_log_error!(
                NGX_LOG_NOTICE,
                log,
                "rctl: generation {} (artifact {}) replaces generation {}",
                g.number,
                &g.sha256_hex()[..16],
                live.current.number
            );
            live.current = g;
            live.failed = None;
        }
        Err(e) => {
            live.shared.counters.failed(Failure::Reload);
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rctl: generation {} keeps serving: {e}",
                live.current.number
            );
            live.failed = now;
        }
    }
}

/// The worker's state, for a request.
pub fn with_live<T>(mcf: &MainConf, f: impl FnOnce(&mut Live) -> T) -> Option<T> {
    mcf.live.try_borrow_mut().ok()?.as_mut().map(f)
}

/// Shared memory without a worker (the status of a process that has no
/// generation yet).
pub fn shared_of(mcf: &MainConf) -> Option<Shared> {
    mcf.live.try_borrow().ok()?.as_ref().map(|l| l.shared)
}

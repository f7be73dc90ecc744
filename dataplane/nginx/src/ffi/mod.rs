//! The nginx side: the module's definition, its directives and
//! configuration (this file), the request handler and variables
//! (`handler.rs`), and what each worker holds: the shared zone, the
//! generation in force and the artifact watch (`worker.rs`).
//!
//! Every function nginx calls is `extern "C"` and catches panics at its
//! boundary (a panic must not unwind into C): a request whose decision
//! panicked is served, and counted.

mod handler;
mod worker;

use crate::generation::Generation;
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ffi::{
    ngx_array_push, ngx_command_t, ngx_conf_t, ngx_http_add_variable, ngx_http_conf_ctx_t,
    ngx_http_core_loc_conf_t, ngx_http_core_main_conf_t, ngx_http_core_module,
    ngx_http_get_variable_index, ngx_http_handler_pt, ngx_http_module_t,
    ngx_http_phases_NGX_HTTP_PREACCESS_PHASE, ngx_int_t, ngx_module_t, ngx_parse_size,
    ngx_parse_time, ngx_shared_memory_add, ngx_shm_zone_t, ngx_str_t, ngx_uint_t, NGX_CONF_NOARGS,
    NGX_CONF_TAKE1, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF,
    NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF, NGX_HTTP_VAR_NOCACHEABLE,
    NGX_LOG_EMERG,
};
use ngx::http::{HttpModule, HttpModuleLocationConf, HttpModuleMainConf, Merge, MergeConfigError};
use ngx::{ngx_conf_log_error, ngx_string};
use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::ptr;

/// The module's handle for the `ngx` crate's traits.
pub struct Module;

/// The shared zone's name and default size.
const ZONE_NAME: &str = "rctl";
const DEFAULT_ZONE_BYTES: usize = 16 << 20;
const DEFAULT_WATCH_MS: u64 = 1_000;

/// The `http` block's settings, and what the process holds for them.
pub struct MainConf {
    artifact: Option<PathBuf>,
    site: Option<String>,
    zone_bytes: usize,
    /// How often a worker looks at the artifact's file (0: never).
    watch_ms: u64,
    /// Whether some `rctl on|shadow` needs the artifact.
    enabled_somewhere: bool,
    shm_zone: *mut ngx_shm_zone_t,
    /// Loaded when the configuration is read (so `nginx -t` checks it);
    /// a worker binds it to the zone when it starts.
    loaded: RefCell<Option<Generation>>,
    /// This process's state, once it is a worker.
    live: RefCell<Option<worker::Live>>,
}

impl Default for MainConf {
    fn default() -> Self {
        MainConf {
            artifact: None,
            site: None,
            zone_bytes: 0,
            watch_ms: u64::MAX,
            enabled_somewhere: false,
            shm_zone: ptr::null_mut(),
            loaded: RefCell::new(None),
            live: RefCell::new(None),
        }
    }
}

/// `rctl on|off|shadow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Not set here: inherited.
    #[default]
    Unset,
    /// Decide and enforce.
    On,
    /// Not asked.
    Off,
    /// Decide, tag and count; never block.
    Shadow,
}

/// A `server` or `location` block's settings.
#[derive(Debug, Clone, Copy)]
pub struct LocConf {
    mode: Mode,
    /// `rctl_client_ip`'s variable index (-1: the connection's peer).
    client_ip: isize,
}

impl Default for LocConf {
    fn default() -> Self {
        LocConf {
            mode: Mode::Unset,
            client_ip: -2,
        }
    }
}

impl Merge for LocConf {
    fn merge(&mut self, prev: &LocConf) -> Result<(), MergeConfigError> {
        if self.mode == Mode::Unset {
            self.mode = prev.mode;
        }
        if self.client_ip == -2 {
            self.client_ip = prev.client_ip;
        }
        Ok(())
    }
}

impl HttpModule for Module {
    fn module() -> &'static ngx_module_t {
        // SAFETY: the module's static, which nginx only writes while it
        // loads the module (its indices), before any of this runs.
        unsafe { &*ptr::addr_of!(ngx_http_rctl_module) }
    }

    unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
        for (i, (name, _)) in crate::reply::VARS.iter().enumerate() {
            let mut n = str_of(name);
            // SAFETY: cf is nginx's; the name lives in a static.
            let v = unsafe { ngx_http_add_variable(cf, &mut n, NGX_HTTP_VAR_NOCACHEABLE as _) };
            if v.is_null() {
                return ngx::core::Status::NGX_ERROR.into();
            }
            // SAFETY: non-null, just made by nginx.
            unsafe {
                (*v).get_handler = Some(handler::variable);
                (*v).data = i;
            }
        }
        ngx::core::Status::NGX_OK.into()
    }

    unsafe extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
        // SAFETY: cf is nginx's, in the http block.
        match unsafe { postconfiguration(cf) } {
            Ok(()) => ngx::core::Status::NGX_OK.into(),
            Err(why) => {
                ngx_conf_log_error!(NGX_LOG_EMERG, cf, "rctl: {why}");
                ngx::core::Status::NGX_ERROR.into()
            }
        }
    }
}

/// Registers the request handler, loads the artifact and asks for the
/// shared zone.
unsafe fn postconfiguration(cf: *mut ngx_conf_t) -> Result<(), String> {
    // SAFETY: in the http block, cf->ctx is the http conf ctx.
    let ctx = unsafe { &*((*cf).ctx as *const ngx_http_conf_ctx_t) };
    let mcf = unsafe { &mut *main_conf(ctx) };
    let cmcf = unsafe {
        &mut *(*ctx.main_conf.add(ngx_http_core_module.ctx_index) as *mut ngx_http_core_main_conf_t)
    };
    let Some(path) = mcf.artifact.clone() else {
        if mcf.enabled_somewhere {
            return Err(
                "`rctl on` and `rctl shadow` need `rctl_artifact PATH;` in the http block".into(),
            );
        }
        return Ok(());
    };
    let phase = &mut cmcf.phases[ngx_http_phases_NGX_HTTP_PREACCESS_PHASE as usize].handlers;
    // SAFETY: nginx's array of handlers, of ngx_http_handler_pt.
    let h = unsafe { ngx_array_push(phase) } as *mut ngx_http_handler_pt;
    if h.is_null() {
        return Err("out of memory".into());
    }
    // SAFETY: just pushed.
    unsafe { *h = Some(handler::preaccess) };
    let generation =
        Generation::load(&path, mcf.site.as_deref(), None).map_err(|e| e.to_string())?;
    *mcf.loaded.borrow_mut() = Some(generation);
    if mcf.zone_bytes == 0 {
        mcf.zone_bytes = DEFAULT_ZONE_BYTES;
    }
    if mcf.watch_ms == u64::MAX {
        mcf.watch_ms = DEFAULT_WATCH_MS;
    }
    let mut name = str_of(ZONE_NAME);
    // SAFETY: cf is nginx's; the module static outlives the cycle.
    let zone = unsafe {
        ngx_shared_memory_add(
            cf,
            &mut name,
            mcf.zone_bytes,
            ptr::addr_of_mut!(ngx_http_rctl_module).cast(),
        )
    };
    if zone.is_null() {
        return Err("cannot add the shared zone".into());
    }
    // SAFETY: non-null, nginx's.
    unsafe {
        (*zone).init = Some(worker::zone_init);
        (*zone).data = ptr::null_mut();
    }
    mcf.shm_zone = zone;
    Ok(())
}

/// The module's main configuration in `ctx`.
///
/// # Safety
/// `ctx` is an http conf ctx of a cycle that loaded this module.
unsafe fn main_conf(ctx: &ngx_http_conf_ctx_t) -> *mut MainConf {
    // SAFETY: as the caller says; the entry is a MainConf (create_main_conf).
    unsafe { *ctx.main_conf.add(Module::module().ctx_index) as *mut MainConf }
}

// nginx allocates the configurations from its pools, aligned to
// NGX_ALIGNMENT (the size of an unsigned long, 8): a type that needs
// more (an i128 anywhere inside) would be dereferenced misaligned.
const _: () = assert!(
    std::mem::align_of::<MainConf>() <= 8 && std::mem::align_of::<LocConf>() <= 8,
    "nginx aligns its configurations to 8 bytes"
);

// SAFETY: the configuration types are the ones create_*_conf allocates.
unsafe impl HttpModuleMainConf for Module {
    type MainConf = MainConf;
}

// SAFETY: as above.
unsafe impl HttpModuleLocationConf for Module {
    type LocationConf = LocConf;
}

fn str_of(s: &'static str) -> ngx_str_t {
    ngx_str_t {
        len: s.len(),
        data: s.as_ptr() as *mut u8,
    }
}

/// The directive's arguments, after its name.
///
/// # Safety
/// `cf` is nginx's, inside a directive handler.
unsafe fn args<'a>(cf: *mut ngx_conf_t) -> &'a [ngx_str_t] {
    // SAFETY: cf->args is an array of ngx_str_t, the name first.
    let a = unsafe { &*(*cf).args };
    let all = unsafe { std::slice::from_raw_parts(a.elts as *const ngx_str_t, a.nelts) };
    &all[1.min(all.len())..]
}

fn text(s: &ngx_str_t) -> Option<&str> {
    if s.len == 0 {
        return Some("");
    }
    // SAFETY: nginx's string of len bytes.
    std::str::from_utf8(unsafe { std::slice::from_raw_parts(s.data, s.len) }).ok()
}

/// A directive handler: `f` sets `T` (the conf nginx passes) from the
/// arguments, or says why not.
fn directive<T>(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    f: impl FnOnce(*mut ngx_conf_t, &mut T, &[ngx_str_t]) -> Result<(), String>,
) -> *mut c_char {
    // SAFETY: nginx passes its cf and the conf this directive's offset names.
    let (conf, a) = unsafe { (&mut *(conf as *mut T), args(cf)) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(cf, conf, a))) {
        Ok(Ok(())) => NGX_CONF_OK,
        Ok(Err(why)) => {
            ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{why}");
            NGX_CONF_ERROR
        }
        Err(_) => NGX_CONF_ERROR,
    }
}

extern "C" fn set_artifact(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |_, m: &mut MainConf, a| {
        let p = text(&a[0]).ok_or("rctl_artifact: the path is not UTF-8")?;
        if !p.starts_with('/') {
            return Err(format!("rctl_artifact {p:?}: give an absolute path"));
        }
        m.artifact = Some(PathBuf::from(p));
        Ok(())
    })
}

extern "C" fn set_site(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |_, m: &mut MainConf, a| {
        m.site = Some(text(&a[0]).ok_or("rctl_site: not UTF-8")?.to_string());
        Ok(())
    })
}

extern "C" fn set_zone(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |_, m: &mut MainConf, a| {
        let mut v = a[0];
        // SAFETY: nginx's string.
        let n = unsafe { ngx_parse_size(&mut v) };
        // At least 64 pages (256 KiB): the counters and some buckets.
        if n < (256 << 10) {
            return Err(format!(
                "rctl_zone {:?}: give a size of at least 256k",
                text(&a[0]).unwrap_or("?")
            ));
        }
        m.zone_bytes = n as usize;
        Ok(())
    })
}

extern "C" fn set_watch(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |_, m: &mut MainConf, a| {
        if text(&a[0]) == Some("off") {
            m.watch_ms = 0;
            return Ok(());
        }
        let mut v = a[0];
        // SAFETY: nginx's string; 0: milliseconds.
        let ms = unsafe { ngx_parse_time(&mut v, 0) };
        if ms <= 0 {
            return Err("rctl_watch: give an interval (100ms, 1s, ...) or off".into());
        }
        m.watch_ms = ms as u64;
        Ok(())
    })
}

extern "C" fn set_mode(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |cf, l: &mut LocConf, a| {
        l.mode = match text(&a[0]) {
            Some("on") => Mode::On,
            Some("off") => Mode::Off,
            Some("shadow") => Mode::Shadow,
            _ => return Err("rctl: expected on, off or shadow".into()),
        };
        if l.mode != Mode::Off {
            // SAFETY: inside the http block, cf->ctx is an http conf ctx.
            unsafe {
                (*main_conf(&*((*cf).ctx as *const ngx_http_conf_ctx_t))).enabled_somewhere = true
            };
        }
        Ok(())
    })
}

extern "C" fn set_client_ip(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |cf, l: &mut LocConf, a| {
        let v = text(&a[0]).unwrap_or("");
        let Some(name) = v.strip_prefix('$').filter(|n| !n.is_empty()) else {
            return Err(format!("rctl_client_ip {v:?}: give a variable ($name)"));
        };
        let mut n = ngx_str_t {
            len: name.len(),
            data: name.as_ptr() as *mut u8,
        };
        // SAFETY: cf is nginx's; nginx copies the name.
        let i = unsafe { ngx_http_get_variable_index(cf, &mut n) };
        if i < 0 {
            return Err(format!("rctl_client_ip: no variable {v}"));
        }
        l.client_ip = i as isize;
        Ok(())
    })
}

extern "C" fn set_status(
    cf: *mut ngx_conf_t,
    _: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    directive(cf, conf, |cf, _: &mut LocConf, _| {
        // SAFETY: in a location, cf->ctx is its http conf ctx.
        let clcf = unsafe {
            let ctx = &*((*cf).ctx as *const ngx_http_conf_ctx_t);
            &mut *(*ctx.loc_conf.add(ngx_http_core_module.ctx_index)
                as *mut ngx_http_core_loc_conf_t)
        };
        clcf.handler = Some(handler::status);
        Ok(())
    })
}

macro_rules! command {
    ($name:literal, $type:expr, $set:expr, $conf:expr) => {
        ngx_command_t {
            name: ngx_string!($name),
            type_: ($type) as ngx_uint_t,
            set: Some($set),
            conf: $conf as ngx_uint_t,
            offset: 0,
            post: ptr::null_mut(),
        }
    };
}

const ANYWHERE: u32 = NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF;

static mut COMMANDS: [ngx_command_t; 8] = [
    command!(
        "rctl_artifact",
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        set_artifact,
        NGX_HTTP_MAIN_CONF_OFFSET
    ),
    command!(
        "rctl_site",
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        set_site,
        NGX_HTTP_MAIN_CONF_OFFSET
    ),
    command!(
        "rctl_zone",
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        set_zone,
        NGX_HTTP_MAIN_CONF_OFFSET
    ),
    command!(
        "rctl_watch",
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        set_watch,
        NGX_HTTP_MAIN_CONF_OFFSET
    ),
    command!(
        "rctl",
        ANYWHERE | NGX_CONF_TAKE1,
        set_mode,
        NGX_HTTP_LOC_CONF_OFFSET
    ),
    command!(
        "rctl_client_ip",
        ANYWHERE | NGX_CONF_TAKE1,
        set_client_ip,
        NGX_HTTP_LOC_CONF_OFFSET
    ),
    command!(
        "rctl_status",
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
        set_status,
        NGX_HTTP_LOC_CONF_OFFSET
    ),
    ngx_command_t::empty(),
];

static CTX: ngx_http_module_t = ngx_http_module_t {
    preconfiguration: Some(Module::preconfiguration),
    postconfiguration: Some(Module::postconfiguration),
    create_main_conf: Some(Module::create_main_conf),
    init_main_conf: None,
    create_srv_conf: None,
    merge_srv_conf: None,
    create_loc_conf: Some(Module::create_loc_conf),
    merge_loc_conf: Some(Module::merge_loc_conf),
};

ngx::ngx_modules!(ngx_http_rctl_module);

/// The module nginx loads (`load_module modules/ngx_http_rctl_module.so;`).
#[used]
#[no_mangle]
pub static mut ngx_http_rctl_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(CTX) as _,
    commands: ptr::addr_of_mut!(COMMANDS) as *mut _,
    type_: NGX_HTTP_MODULE as _,
    init_process: Some(worker::init_process),
    exit_process: Some(worker::exit_process),
    ..ngx_module_t::default()
};

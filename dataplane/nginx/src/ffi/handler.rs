//! Each request: its fields read from nginx's request, one decision by
//! the generation in force, the answer, and what the variables and the
//! access log see.

use super::worker::{self, Live};
use super::{LocConf, MainConf, Mode, Module};
use crate::counters::Failure;
use crate::reply::{Decided, Reply, Var, VARS};
use ngx::ffi::{
    ngx_connection_local_sockaddr, ngx_http_complex_value_t, ngx_http_finalize_request,
    ngx_http_get_indexed_variable, ngx_http_request_t, ngx_http_send_response,
    ngx_http_variable_value_t, ngx_int_t, ngx_list_part_t, ngx_pnalloc, ngx_pool_cleanup_add,
    ngx_pool_cleanup_t, ngx_str_t, ngx_table_elt_t, sockaddr, NGX_DECLINED, NGX_DONE, NGX_ERROR,
    NGX_HTTP_CLOSE, NGX_OK,
};
use ngx::http::HttpModule;
use rctl_dataplane::answer::Outcome;
use rctl_dataplane::Request;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// The module's configurations for `r`.
///
/// # Safety
/// `r` is a request of a cycle that loaded the module.
unsafe fn confs<'a>(r: *mut ngx_http_request_t) -> (&'a MainConf, &'a LocConf) {
    let i = Module::module().ctx_index;
    // SAFETY: as the caller says: create_*_conf made these entries.
    unsafe {
        (
            &*(*(*r).main_conf.add(i) as *const MainConf),
            &*(*(*r).loc_conf.add(i) as *const LocConf),
        )
    }
}

fn bytes<'a>(s: &ngx_str_t) -> &'a [u8] {
    if s.len == 0 || s.data.is_null() {
        return &[];
    }
    // SAFETY: nginx's string of len bytes, alive as long as the request.
    unsafe { std::slice::from_raw_parts(s.data, s.len) }
}

/// The address and port in `sa`.
///
/// # Safety
/// `sa` is null or an address nginx filled.
unsafe fn address(sa: *const sockaddr) -> Option<(IpAddr, u16)> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the family says which layout the address has.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let a = &*(sa as *const libc::sockaddr_in);
                Some((
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let a = &*(sa as *const libc::sockaddr_in6);
                Some((
                    IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

/// The request's headers, in order.
///
/// # Safety
/// `r` is a live request.
unsafe fn headers<'a>(r: *mut ngx_http_request_t) -> Vec<(&'a [u8], &'a [u8])> {
    let mut out = Vec::with_capacity(16);
    // SAFETY: nginx's list of ngx_table_elt_t, parts linked by next.
    unsafe {
        let mut part: *const ngx_list_part_t = &(*r).headers_in.headers.part;
        while !part.is_null() {
            let elts = (*part).elts as *const ngx_table_elt_t;
            for i in 0..(*part).nelts {
                let h = &*elts.add(i);
                out.push((bytes(&h.key), bytes(&h.value)));
            }
            part = (*part).next;
        }
    }
    out
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Decides `r` with the generation in force.
///
/// # Safety
/// `r` is a live main request.
unsafe fn decide(r: *mut ngx_http_request_t, lcf: &LocConf, live: &mut Live) -> Decided {
    let counters = live.shared.counters;
    // SAFETY: r and its connection are live.
    let c = unsafe { &mut *(*r).connection };
    let mut ip = None;
    if lcf.client_ip >= 0 {
        // SAFETY: an index ngx_http_get_variable_index gave.
        let v = unsafe { ngx_http_get_indexed_variable(r, lcf.client_ip as usize) };
        // SAFETY: nginx's value, if any.
        if let Some(v) = unsafe { v.as_ref() }.filter(|v| v.not_found() == 0 && v.valid() != 0) {
            let val = if v.data.is_null() {
                &[][..]
            } else {
                // SAFETY: the value's bytes.
                unsafe { std::slice::from_raw_parts(v.data, v.len() as usize) }
            };
            ip = crate::reply::client_ip(val);
        }
        if ip.is_none() {
            counters.failed(Failure::ClientIpValue);
        }
    }
    // SAFETY: the connection's peer address.
    let ip = match ip.or_else(|| unsafe { address(c.sockaddr) }.map(|a| a.0)) {
        Some(ip) => ip,
        None => {
            counters.failed(Failure::ClientIp);
            return Decided::Unchecked("client-ip");
        }
    };
    // SAFETY: nginx fills the connection's local address on demand.
    let local = unsafe {
        if ngx_connection_local_sockaddr(c, ptr::null_mut(), 0) == NGX_OK as ngx_int_t {
            address(c.local_sockaddr)
        } else {
            None
        }
    };
    // SAFETY: the request's strings and headers live as long as it does.
    let (method, target, host, hdrs) = unsafe {
        let host = (*r)
            .headers_in
            .host
            .as_ref()
            .map_or(&[][..], |h| bytes(&h.value));
        (
            bytes(&(*r).method_name),
            bytes(&(*r).unparsed_uri),
            host,
            headers(r),
        )
    };
    let req = Request {
        method,
        host,
        target,
        headers: &hdrs,
        ip,
        dst: local.map(|l| l.0),
        port: local.map_or(80, |l| l.1),
        time_ns: monotonic_ns(),
    };
    let g = &mut live.current;
    let decision = g.engine.decide_request_with(&req, &mut g.scratch, None);
    let outcome = Outcome::of(&decision, &g.engine, g.number, lcf.mode == Mode::Shadow);
    counters.decided(outcome.action, outcome.shadowed.is_some());
    Decided::Outcome(outcome)
}

extern "C" fn drop_decided(data: *mut c_void) {
    // SAFETY: the cleanup's data is the Decided `remember` wrote.
    let _ = catch_unwind(|| unsafe { ptr::drop_in_place(data as *mut Decided) });
}

/// What the module decided for `r`, if it did: the module's context, or
/// after an internal redirect (which clears contexts) the request pool's
/// cleanup that holds it.
///
/// # Safety
/// `r` is a live request.
unsafe fn decided<'a>(r: *mut ngx_http_request_t) -> Option<&'a Decided> {
    // SAFETY: the context and cleanups are this module's or nginx's.
    unsafe {
        let m = (*r).main;
        let ctx = *(*m).ctx.add(Module::module().ctx_index);
        if !ctx.is_null() {
            return Some(&*(ctx as *const Decided));
        }
        let mut c: *mut ngx_pool_cleanup_t = (*(*m).pool).cleanup;
        while !c.is_null() {
            // The same function as `remember` stores, from this crate.
            let ours: extern "C" fn(*mut c_void) = drop_decided;
            if (*c)
                .handler
                .is_some_and(|h| ptr::fn_addr_eq(h, ours as unsafe extern "C" fn(*mut c_void)))
            {
                return Some(&*((*c).data as *const Decided));
            }
            c = (*c).next;
        }
    }
    None
}

/// Keeps `d` with the request for its variables and the access log.
///
/// # Safety
/// `r` is a live main request.
unsafe fn remember(r: *mut ngx_http_request_t, d: Decided) -> bool {
    // SAFETY: the request's pool; the cleanup drops what it holds.
    unsafe {
        let c = ngx_pool_cleanup_add((*r).pool, std::mem::size_of::<Decided>());
        if c.is_null() {
            return false;
        }
        ptr::write((*c).data as *mut Decided, d);
        (*c).handler = Some(drop_decided);
        *(*r).ctx.add(Module::module().ctx_index) = (*c).data;
    }
    true
}

/// The preaccess phase handler (beside `limit_req`).
pub extern "C" fn preaccess(r: *mut ngx_http_request_t) -> ngx_int_t {
    match catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: nginx's request.
        unsafe { judge(r) }
    })) {
        Ok(rc) => rc,
        Err(_) => {
            // A panic: served unchecked, and counted.
            // SAFETY: nginx's request.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
                let (mcf, _) = confs(r);
                if let Some(s) = worker::shared_of(mcf) {
                    s.counters.failed(Failure::Panic);
                }
                if decided(r).is_none() {
                    remember(r, Decided::Unchecked("panic"));
                }
            }));
            NGX_DECLINED as ngx_int_t
        }
    }
}

/// # Safety
/// `r` is nginx's request.
unsafe fn judge(r: *mut ngx_http_request_t) -> ngx_int_t {
    let declined = NGX_DECLINED as ngx_int_t;
    // SAFETY: nginx's request.
    let (mcf, lcf) = unsafe { confs(r) };
    // Subrequests are not clients' requests; a request is decided once,
    // whatever internal redirects follow.
    if unsafe { (*r).main != r } || !matches!(lcf.mode, Mode::On | Mode::Shadow) {
        return declined;
    }
    if unsafe { decided(r) }.is_some() {
        return declined;
    }
    // SAFETY: a live main request.
    let Some(d) = worker::with_live(mcf, |live| unsafe { decide(r, lcf, live) }) else {
        return declined;
    };
    let reply = match &d {
        Decided::Outcome(o) => Reply::of(o),
        Decided::Unchecked(_) => Reply::Serve,
    };
    // SAFETY: as above.
    if !unsafe { remember(r, d) } {
        return declined;
    }
    match reply {
        Reply::Serve => declined,
        Reply::Close => NGX_HTTP_CLOSE as ngx_int_t,
        Reply::Answer {
            status,
            body,
            retry_after,
        } => {
            // SAFETY: a live main request, answered here and finalized.
            let rc = unsafe { answer(r, status, &body, retry_after) };
            if rc == NGX_ERROR as ngx_int_t {
                if let Some(s) = worker::shared_of(mcf) {
                    s.counters.failed(Failure::Answer);
                }
            }
            // SAFETY: as above; nginx now owns the request's end.
            unsafe { ngx_http_finalize_request(r, rc) };
            NGX_DONE as ngx_int_t
        }
    }
}

/// A copy of `s` in the request's pool.
///
/// # Safety
/// `r` is a live request.
unsafe fn pool_str(r: *mut ngx_http_request_t, s: &[u8]) -> Option<ngx_str_t> {
    // SAFETY: the request's pool.
    let p = unsafe { ngx_pnalloc((*r).pool, s.len().max(1)) } as *mut u8;
    if p.is_null() {
        return None;
    }
    // SAFETY: just allocated, s.len() bytes.
    unsafe { ptr::copy_nonoverlapping(s.as_ptr(), p, s.len()) };
    Some(ngx_str_t {
        len: s.len(),
        data: p,
    })
}

/// Answers `r` with `status`, `body` as text/plain and `Retry-After`.
///
/// # Safety
/// `r` is a live main request not yet answered.
unsafe fn answer(
    r: *mut ngx_http_request_t,
    status: u16,
    body: &str,
    retry_after: Option<u64>,
) -> ngx_int_t {
    let err = NGX_ERROR as ngx_int_t;
    // SAFETY: as the caller says.
    unsafe {
        if let Some(secs) = retry_after {
            let h = ngx::ffi::ngx_list_push(&mut (*r).headers_out.headers) as *mut ngx_table_elt_t;
            let Some(value) = pool_str(r, secs.to_string().as_bytes()) else {
                return err;
            };
            if h.is_null() {
                return err;
            }
            ptr::write_bytes(h, 0, 1);
            (*h).hash = 1;
            (*h).key = super::str_of("Retry-After");
            (*h).value = value;
        }
        let Some(text) = pool_str(r, body.as_bytes()) else {
            return err;
        };
        let mut cv: ngx_http_complex_value_t = std::mem::zeroed();
        cv.value = text;
        let mut ct = super::str_of("text/plain");
        ngx_http_send_response(r, usize::from(status), &mut ct, &mut cv)
    }
}

/// The module's variables (`data`: the index in [`VARS`]).
pub extern "C" fn variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    data: usize,
) -> ngx_int_t {
    let got = catch_unwind(AssertUnwindSafe(|| {
        let var: Var = VARS.get(data)?.1;
        // SAFETY: nginx's request.
        let text = unsafe { decided(r) }?.var(var)?;
        // SAFETY: as above.
        unsafe { pool_str(r, text.as_bytes()) }
    }));
    // SAFETY: nginx's value to fill.
    let v = unsafe { &mut *v };
    match got {
        Ok(Some(s)) => {
            v.data = s.data;
            v.set_len(s.len as u32);
            v.set_valid(1);
            v.set_no_cacheable(1);
            v.set_not_found(0);
        }
        _ => v.set_not_found(1),
    }
    NGX_OK as ngx_int_t
}

/// `rctl_status;`: the counters, every worker and the zone, as JSON.
pub extern "C" fn status(r: *mut ngx_http_request_t) -> ngx_int_t {
    let got = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: nginx's request.
        let (mcf, _) = unsafe { confs(r) };
        let shared = worker::shared_of(mcf)?;
        let workers = shared.counters.workers(worker::alive);
        let stats = shared.zone.stats(monotonic_ns());
        Some(shared.counters.status_json(&workers, &stats) + "\n")
    }));
    let Ok(Some(json)) = got else {
        return ngx::ffi::NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t;
    };
    // SAFETY: nginx's request, in its content phase.
    unsafe {
        let Some(text) = pool_str(r, json.as_bytes()) else {
            return NGX_ERROR as ngx_int_t;
        };
        let mut cv: ngx_http_complex_value_t = std::mem::zeroed();
        cv.value = text;
        let mut ct = super::str_of("application/json");
        ngx_http_send_response(r, 200, &mut ct, &mut cv)
    }
}

//! The proxy's side of "unchecked": with `--haproxy-socket`, the agent
//! reads HAProxy's table of requests it let through without an answer
//! (`haproxy_stats`) every few seconds and shows it on `/metrics`, so
//! that an alert on the agent's own metrics also sees what the agent
//! could not (it was down, or HAProxy could not reach it):
//!
//! - `rctl_proxy_unchecked_requests_total{proxy,error,meaning}`:
//!   HAProxy's count per SPOE error (an entry idle for 7 days starts
//!   again from 0, which Prometheus reads as a counter reset);
//! - `rctl_proxy_unchecked_last_minute{proxy,error}`;
//! - `rctl_proxy_stats_up{proxy}`: 1 when the last read worked.

use crate::haproxy_stats::{self, Unchecked};
use crate::shutdown::Shutdown;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where HAProxy's stats socket is, and how often it is read.
#[derive(Debug, Clone)]
pub struct Config {
    /// HAProxy's `stats socket`.
    pub socket: PathBuf,
    /// The table `rctl emit haproxy-spoe` writes.
    pub table: String,
    /// Between reads.
    pub every: Duration,
}

/// The last read.
#[derive(Debug, Default)]
pub struct ProxyStats {
    last: Mutex<Option<Result<Vec<Unchecked>, String>>>,
}

impl ProxyStats {
    /// Reads the table once (blocking: on a blocking thread).
    pub fn read(&self, c: &Config) {
        let r = haproxy_stats::unchecked(&c.socket, &c.table).map_err(|e| e.to_string());
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }

    /// Reads every `c.every` until `shutdown`.
    pub async fn poll(self: Arc<Self>, c: Config, mut shutdown: Shutdown) {
        loop {
            let (me, conf) = (Arc::clone(&self), c.clone());
            let _ = tokio::task::spawn_blocking(move || me.read(&conf)).await;
            tokio::select! {
                () = tokio::time::sleep(c.every) => {}
                () = shutdown.fired() => return,
            }
        }
    }
}

impl Collector for ProxyStats {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = last.as_ref() else {
            return Ok(());
        };
        let proxy = ("proxy", "haproxy");
        let mut m = e.encode_descriptor(
            "rctl_proxy_stats_up",
            "1 when the proxy's table of unchecked requests was read at the last try",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(last.is_ok())).encode(m.encode_family(&[proxy])?)?;
        let Ok(rows) = last else {
            return Ok(());
        };
        let mut m = e.encode_descriptor(
            "rctl_proxy_unchecked_requests",
            "Requests the proxy let through without the agent's answer, by SPOE error (the proxy's count)",
            None,
            MetricType::Counter,
        )?;
        for u in rows {
            let error = u.error.to_string();
            let labels = [
                proxy,
                ("error", error.as_str()),
                ("meaning", u.meaning.as_str()),
            ];
            ConstCounter::new(u.requests).encode(m.encode_family(&labels)?)?;
        }
        let mut m = e.encode_descriptor(
            "rctl_proxy_unchecked_last_minute",
            "Requests the proxy let through without the agent's answer over the last minute",
            None,
            MetricType::Gauge,
        )?;
        for u in rows {
            let error = u.error.to_string();
            let labels = [proxy, ("error", error.as_str())];
            let n = i64::try_from(u.per_minute).unwrap_or(i64::MAX);
            ConstGauge::new(n).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

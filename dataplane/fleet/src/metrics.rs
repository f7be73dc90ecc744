//! The fleet agent's metrics, on the agent's `/metrics`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `rctl_fleet_generation` | | the fleet generation this host runs |
//! | `rctl_fleet_target_generation` | | the generation it should run |
//! | `rctl_fleet_etcd_connected` | | 1 while the watch is established |
//! | `rctl_fleet_apply_failures_total` | | targets that could not be applied |
//! | `rctl_shared_online` | | 1 while Redis answers the syncs |
//! | `rctl_shared_syncs_total` | `result` | syncs `ok`, `failed` |
//! | `rctl_shared_offline_hits_total` | `rule` | requests a shared limit decided on this host alone (Redis away) |

use crate::agent::progress::Progress;
use crate::shared::Sync;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use rctl_agent::judge::Judge;
use rctl_agent::metrics::{counter_family, gauge};
use std::sync::Arc;

/// The collector.
pub struct FleetMetrics {
    pub(crate) progress: Arc<std::sync::Mutex<Progress>>,
    pub(crate) host: String,
    pub(crate) judge: Arc<Judge>,
    pub(crate) shared: Option<Arc<Sync>>,
}

impl std::fmt::Debug for FleetMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetMetrics")
    }
}

impl Collector for FleetMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = self
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        gauge(
            &mut e,
            "rctl_fleet_generation",
            "The fleet generation this host runs",
            p.generation,
        )?;
        gauge(
            &mut e,
            "rctl_fleet_target_generation",
            "The fleet generation this host should run",
            p.target_generation,
        )?;
        gauge(
            &mut e,
            "rctl_fleet_etcd_connected",
            "1 while the watch on etcd is established",
            i64::from(p.etcd_connected),
        )?;
        counter_family(
            &mut e,
            "rctl_fleet_apply_failures",
            "Targets that could not be applied",
            "host",
            [(self.host.as_str(), p.failures)],
        )?;
        let Some(s) = &self.shared else {
            return Ok(());
        };
        let (online, ok, failed, offline) = s.counters(&self.judge);
        gauge(
            &mut e,
            "rctl_shared_online",
            "1 while Redis answers the shared limits' syncs",
            i64::from(online),
        )?;
        counter_family(
            &mut e,
            "rctl_shared_syncs",
            "Syncs of the shared limits with Redis",
            "result",
            [("ok", ok), ("failed", failed)],
        )?;
        counter_family(
            &mut e,
            "rctl_shared_offline_hits",
            "Requests a shared limit decided on this host alone, Redis being away",
            "rule",
            offline.iter().map(|(r, n)| (r.as_str(), *n)),
        )
    }
}

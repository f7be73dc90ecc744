//! The etcd flags `rctl push`, `rctl agent` and `rctl fleet status`
//! share, and the runtime their calls run on. A leaf.

use anyhow::{bail, Context, Result};
use rctl_fleet::etcd::EtcdConfig;
use std::path::PathBuf;

/// Where etcd is, and how to talk to it.
#[derive(clap::Args, Clone)]
pub struct EtcdArgs {
    /// etcd endpoints, comma-separated or repeated (`http://10.0.0.1:2379`;
    /// `https://…` with the TLS options).
    #[arg(long, value_name = "URLS", required = true)]
    etcd: Vec<String>,
    /// The key prefix rctl keeps everything under.
    #[arg(long, default_value = "/rctl")]
    prefix: String,
    /// CA bundle (PEM) to check etcd's certificate with.
    #[arg(long, value_name = "FILE")]
    etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM), for etcd's --client-cert-auth.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The name etcd's certificate must carry (default: the endpoint's host).
    #[arg(long, value_name = "NAME")]
    etcd_server_name: Option<String>,
}

impl EtcdArgs {
    /// The fleet crate's configuration; refuses a prefix that is not an
    /// absolute key.
    pub fn config(&self) -> Result<EtcdConfig> {
        let mut c = EtcdConfig::new(&self.etcd, &self.prefix);
        if !c.prefix.starts_with('/') || c.prefix.len() < 2 {
            bail!(
                "--prefix {:?}: give an absolute key prefix such as /rctl",
                self.prefix
            );
        }
        c.ca = self.etcd_ca.clone();
        c.cert = self.etcd_cert.clone();
        c.key = self.etcd_key.clone();
        c.server_name = self.etcd_server_name.clone();
        Ok(c)
    }
}

/// A single-threaded runtime for one command's etcd calls.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

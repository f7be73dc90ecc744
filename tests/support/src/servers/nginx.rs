//! nginx (`/usr/sbin/nginx`, Debian's 1.22): `nginx -t` and a foreground
//! master with its workers, everything (pid, logs, temporary files) in
//! its directory.

use crate::proc::Proc;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program.
pub const BIN: &str = "nginx";

/// A running nginx.
pub struct Nginx {
    /// The master process (its group holds the workers).
    pub proc: Proc,
}

/// A whole `nginx.conf` whose `http` block holds `http`: foreground,
/// `workers` worker processes, the pid file, error log (`DIR/error.log`)
/// and temporary files in `dir`, no default access log.
pub fn conf(dir: &Path, workers: u32, http: &str) -> String {
    let d = dir.display();
    format!(
        "daemon off;
master_process on;
worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log notice;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
{http}
}}
"
    )
}

/// `nginx -t` on `DIR/NAME`: `Ok(output)` if it accepts it, else
/// `Err(output)`.
pub fn check(dir: &Path, name: &str) -> Result<String, String> {
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let mut cmd = command(dir, name);
    cmd.arg("-t");
    crate::proc::check(cmd)
}

fn command(dir: &Path, name: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join(name))
        .arg("-e")
        .arg(dir.join("error.log"));
    cmd
}

impl Nginx {
    /// Writes `config` (a whole nginx.conf, see [`conf`]) to
    /// `DIR/nginx.conf`, checks it, starts nginx and waits until every
    /// address of `listen` accepts connections.
    pub fn start(dir: &Path, config: &str, listen: &[SocketAddr]) -> Nginx {
        Nginx::start_with(dir, config, listen, |c| c)
    }

    /// [`Nginx::start`], running the command `wrap` makes of nginx's
    /// (for example under `taskset`).
    pub fn start_with(
        dir: &Path,
        config: &str,
        listen: &[SocketAddr],
        wrap: impl FnOnce(Command) -> Command,
    ) -> Nginx {
        std::fs::write(dir.join("nginx.conf"), config).unwrap();
        if let Err(e) = check(dir, "nginx.conf") {
            panic!("nginx -t refuses the configuration:\n{e}\n{config}");
        }
        let mut proc = Proc::spawn("nginx", dir, wrap(command(dir, "nginx.conf")));
        for a in listen {
            proc.wait_port(*a);
        }
        Nginx { proc }
    }

    /// A log file of its directory, once it has stopped growing.
    pub fn log(&self, name: &str) -> String {
        crate::proc::settled(|| std::fs::read_to_string(self.path(name)).unwrap_or_default())
    }

    /// A path in its directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.proc.dir.join(name)
    }
}

//! Certificates for TLS tests, made with `openssl` (Debian's package):
//! a CA and the leaf certificates it signs, P-256 keys, valid two days.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority.
pub struct Ca {
    /// Its certificate (PEM): what clients and servers are told to trust.
    pub cert: PathBuf,
    key: PathBuf,
    dir: PathBuf,
}

/// A certificate and its private key (PEM files).
#[derive(Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

const KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];

impl Ca {
    /// A self-signed CA named `name`, its files in `dir` (`NAME-ca.pem`).
    pub fn new(dir: &Path, name: &str) -> Ca {
        std::fs::create_dir_all(dir).unwrap();
        let (cert, key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
        let subj = format!("/CN={name} test CA");
        let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
        args.extend(KEY);
        args.extend(["-keyout", &key, "-out", &cert, "-subj", &subj]);
        args.extend([
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &args);
        Ca {
            cert: dir.join(cert),
            key: dir.join(key),
            dir: dir.to_path_buf(),
        }
    }

    /// A certificate for `name` signed by this CA, with `ext` (openssl
    /// extension lines: `subjectAltName=…`, `extendedKeyUsage=…`).
    pub fn issue(&self, name: &str, ext: &[&str]) -> Leaf {
        let d = &self.dir;
        let (csr, key, cert, extfile) = (
            format!("{name}.csr"),
            format!("{name}.key"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(d.join(&extfile), ext.join("\n") + "\n").unwrap();
        let subj = format!("/CN={name}");
        let mut args = vec!["req", "-nodes"];
        args.extend(KEY);
        args.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(d, &args);
        let (ca, ca_key) = (
            self.cert.display().to_string(),
            self.key.display().to_string(),
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &cert,
                "-extfile",
                &extfile,
            ],
        );
        Leaf {
            cert: d.join(cert),
            key: d.join(key),
        }
    }

    /// A server certificate for loopback (`127.0.0.1`, `localhost`); it
    /// may serve as a client too (etcd's gateway dials itself with it).
    pub fn loopback_server(&self, name: &str) -> Leaf {
        self.issue(
            name,
            &[
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "extendedKeyUsage=serverAuth,clientAuth",
            ],
        )
    }

    /// A client certificate.
    pub fn client(&self, name: &str) -> Leaf {
        self.issue(name, &["extendedKeyUsage=clientAuth"])
    }
}

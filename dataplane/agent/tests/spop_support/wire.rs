//! What surrounds HAProxy in these tests: a tiny HTTP backend that
//! records what reaches it, a raw HTTP client, and a relay that records
//! the SPOP bytes between HAProxy and the agent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A backend answering every request 200 "backend", recording request
/// lines and headers.
pub struct Backend {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Backend {
    pub fn start() -> Backend {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    loop {
                        let mut head = String::new();
                        let mut line = String::new();
                        while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                            head.push_str(&line);
                            line.clear();
                        }
                        if head.is_empty() {
                            return;
                        }
                        s.lock().unwrap().push(head);
                        let body = "backend";
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if c.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Backend { port, seen }
    }

    /// Request lines seen (first line of each request).
    pub fn request_lines(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.lines().next().unwrap_or("").to_string())
            .collect()
    }
}

/// An HTTP answer: status (0 when the connection closed without one),
/// headers (lowercase names) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One `GET` with `Connection: close`, extra header lines given raw.
pub fn get(port: u16, target: &str, headers: &[(&str, &str)]) -> Answer {
    get_within(port, target, headers, Duration::from_secs(10))
}

/// [`get`], waiting at most `wait` for the answer (status 0 if none).
pub fn get_within(port: u16, target: &str, headers: &[(&str, &str)], wait: Duration) -> Answer {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(wait)).unwrap();
    let mut req =
        format!("GET {target} HTTP/1.1\r\nHost: query.example.org\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

/// The bytes of one connection through a [`Tee`], each way.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    pub from_haproxy: Vec<u8>,
    pub from_agent: Vec<u8>,
    /// In the order the relay read them: (from HAProxy?, length of that
    /// direction's bytes after the chunk).
    pub chunks: Vec<(bool, usize)>,
}

impl Recorded {
    /// The most NOTIFY frames HAProxy had sent whose ACK the agent had not
    /// yet sent, over the connection's life (> 1: pipelining).
    pub fn max_outstanding(
        &self,
        notifies_within: impl Fn(&[u8]) -> usize,
        acks_within: impl Fn(&[u8]) -> usize,
    ) -> usize {
        let (mut up, mut down, mut max) = (0, 0, 0);
        for &(from_haproxy, len) in &self.chunks {
            if from_haproxy {
                up = notifies_within(&self.from_haproxy[..len]);
            } else {
                down = acks_within(&self.from_agent[..len]);
            }
            max = max.max(up.saturating_sub(down));
        }
        max
    }
}

/// A TCP relay between HAProxy and the agent's unix socket that records
/// both directions of every connection.
pub struct Tee {
    pub port: u16,
    pub conns: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>,
    /// When set, the next chunk from HAProxy that starts with a NOTIFY is
    /// not passed on: both sockets of that connection are shut instead
    /// (the agent's connection is lost with a NOTIFY in flight). Cleared
    /// when done.
    pub cut: Arc<std::sync::atomic::AtomicBool>,
}

impl Tee {
    pub fn start(agent_socket: PathBuf) -> Tee {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>> = Arc::default();
        let all = conns.clone();
        let cut: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let cut2 = cut.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(up) = c else { continue };
                let Ok(down) = std::os::unix::net::UnixStream::connect(&agent_socket) else {
                    continue;
                };
                let rec = Arc::new(Mutex::new(Recorded::default()));
                all.lock().unwrap().push(rec.clone());
                let (mut up_r, mut up_w) = (up.try_clone().unwrap(), up);
                let (mut down_r, mut down_w) = (down.try_clone().unwrap(), down);
                let r1 = rec.clone();
                let cut = cut2.clone();
                let (up_c, down_c) = (up_r.try_clone().unwrap(), down_w.try_clone().unwrap());
                std::thread::spawn(move || {
                    relay(&mut up_r, &mut down_w, |b| {
                        let notify = b.get(4) == Some(&3);
                        if notify && cut.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            let _ = up_c.shutdown(std::net::Shutdown::Both);
                            let _ = down_c.shutdown(std::net::Shutdown::Both);
                            return false;
                        }
                        let mut r = r1.lock().unwrap();
                        r.from_haproxy.extend_from_slice(b);
                        let len = r.from_haproxy.len();
                        r.chunks.push((true, len));
                        true
                    })
                });
                std::thread::spawn(move || {
                    relay(&mut down_r, &mut up_w, |b| {
                        let mut r = rec.lock().unwrap();
                        r.from_agent.extend_from_slice(b);
                        let len = r.from_agent.len();
                        r.chunks.push((false, len));
                        true
                    })
                });
            }
        });
        Tee { port, conns, cut }
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.conns
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.lock().unwrap().clone())
            .collect()
    }
}

/// Copies until end of stream (or until `record` says stop), then passes
/// the close on.
fn relay<R: Read, W: Write + Shut>(
    from: &mut R,
    to: &mut W,
    mut record: impl FnMut(&[u8]) -> bool,
) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || !record(&buf[..n]) {
            break;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    to.shut();
}

/// Closing the write side of either kind of socket.
pub trait Shut {
    fn shut(&mut self);
}

impl Shut for TcpStream {
    fn shut(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

impl Shut for std::os::unix::net::UnixStream {
    fn shut(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

//! One apply of both planes, in two phases: the agent (the HTTP plane)
//! prepares the new generation, the packet plane (XDP) switches, the
//! agent commits. `rctl apply` runs it over the control socket
//! ([`Client`]); the fleet agent runs it in process ([`Session`]). The
//! packet plane is behind [`PacketPlane`], implemented over the XDP
//! loader by each caller, so that this crate stays free of it.
//!
//! # The steps, and what a failure at each leaves
//!
//! 1. **Prepare**: the agent decodes the artifact, builds the engine and
//!    links limiter state; nothing changes for requests. If it fails,
//!    nothing changed ([`ApplyError::Prepare`]), and the packet plane is
//!    not touched.
//! 2. **Switch** the packet plane (its own commit point: the XDP link
//!    update). If it fails, the prepare is aborted and both planes keep
//!    their generation ([`ApplyError::Packet`]). If the abort fails too,
//!    the error says so; the agent still keeps its generation, and drops
//!    the prepare when the connection that made it closes, which is when
//!    [`Apply::run`] returns (it owns the planes). A switch whose later
//!    steps failed (the new generation is live, but, say, its artifact
//!    is not installed) is a switch: the commit follows, so that both
//!    planes run the same generation, and [`Applied::incomplete`] lists
//!    what did not happen. Callers count such an apply as failed after
//!    the switch (the next apply finishes those steps).
//! 3. **Commit**: one atomic swap in the agent. If it fails after the
//!    packet plane switched, the planes run different generations:
//!    [`ApplyError::Commit`] has the switch, to say which runs what, and
//!    the next apply brings both to one. If it fails with no packet
//!    plane, nothing changed. The prepare is not aborted: the agent drops
//!    a prepare it cannot commit, and the connection's close drops any
//!    other. A commit the agent refused left it on its generation; one
//!    whose answer was lost (an I/O or protocol error) may have happened
//!    ([`ApplyError::commit_uncertain`]): the caller must not claim
//!    either.
//!
//! Without an agent the packet plane switches alone (a failure changes
//! nothing); without a packet plane the agent prepares and commits.
//!
//! Nothing here prints: the outcome and the error are data, and the
//! caller renders them (a command's output, or a host's report).

use crate::control::{Client, Committed, Control, ControlError, ControlErrorKind, Prepared};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The HTTP plane: an agent that prepares, commits and aborts
/// generations (the control protocol's three steps).
pub trait HttpPlane {
    /// Builds a generation from `artifact` for `site` (default: the
    /// agent's); nothing changes yet.
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError>;
    /// Installs prepare `id`.
    fn commit(&mut self, id: &str) -> Result<Committed, ControlError>;
    /// Drops prepare `id`.
    fn abort(&mut self, id: &str) -> Result<(), ControlError>;
}

/// The packet plane: one switch to the artifact's generation.
pub trait PacketPlane {
    /// What a switch reports (for the caller to render).
    type Report;
    /// Why a switch did not happen.
    type Error;
    /// Switches to `artifact`'s packet plane for `site`. `Ok` means the
    /// new generation is live, whatever [`Switched::incomplete`] says;
    /// `Err` means the generation in force still is.
    fn switch(
        &mut self,
        artifact: &[u8],
        site: Option<&str>,
    ) -> Result<Switched<Self::Report>, Self::Error>;
}

/// A packet plane that switched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched<R> {
    /// What the packet plane reports.
    pub report: R,
    /// Steps after its commit point that failed: the new generation is
    /// live, but these did not happen (the next apply finishes them).
    pub incomplete: Vec<String>,
}

/// What the agent did in an apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentApplied {
    /// The prepare's answer.
    pub prepared: Prepared,
    /// The commit's answer.
    pub committed: Committed,
    /// From the start of the prepare to the end of the commit.
    pub took: Duration,
}

/// A successful apply: every plane given runs the new generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied<R> {
    /// The agent's side, if an agent was given.
    pub agent: Option<AgentApplied>,
    /// The packet plane's switch, if a packet plane was given.
    pub packet: Option<Switched<R>>,
}

impl<R> Applied<R> {
    /// Steps after the packet plane's switch that failed (none: the apply
    /// is complete).
    pub fn incomplete(&self) -> &[String] {
        self.packet.as_ref().map_or(&[], |s| &s.incomplete)
    }
}

/// What the agent keeps when the packet plane failed after its prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentKept {
    /// The generation it keeps serving.
    pub generation: u64,
    /// Why the prepare could not be aborted, if it could not (the agent
    /// drops it when the connection closes).
    pub abort_failed: Option<ControlError>,
}

/// An apply that did not bring every plane to the new generation; each
/// variant says what runs where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError<E, R> {
    /// Neither an agent nor a packet plane was given.
    NoPlane,
    /// The agent did not prepare: nothing changed.
    Prepare(ControlError),
    /// The agent prepared, but what the proxies in front were configured
    /// with (`rctl emit`) lacks what the ruleset needs, and the apply was
    /// told to refuse that ([`Apply::refuse_stale_proxies`]): the prepare
    /// was aborted and nothing changed.
    StaleProxy {
        /// What each proxy's configuration lacks.
        stale: Vec<String>,
        /// Why the prepare could not be aborted, if it could not (it is
        /// dropped when the connection closes).
        abort_failed: Option<ControlError>,
    },
    /// The packet plane did not switch: both planes keep their
    /// generation.
    Packet {
        /// Why.
        error: E,
        /// The agent's side, if an agent was given (its prepare was
        /// aborted).
        agent: Option<AgentKept>,
    },
    /// The agent did not commit. With `switched`, the packet plane runs
    /// the new generation and the agent its old one (unless
    /// [`ApplyError::commit_uncertain`]); without, nothing changed.
    Commit {
        /// Why.
        error: ControlError,
        /// The prepare that was not committed.
        prepared: Box<Prepared>,
        /// The packet plane's switch, if it switched.
        switched: Option<Switched<R>>,
    },
}

impl<E, R> ApplyError<E, R> {
    /// Whether some plane runs the new generation: the packet plane
    /// switched and the commit failed after it.
    pub fn switched(&self) -> bool {
        matches!(
            self,
            ApplyError::Commit {
                switched: Some(_),
                ..
            }
        )
    }

    /// Whether a failed commit's answer was lost (an I/O or protocol
    /// error), so that the agent may have committed after all.
    pub fn commit_uncertain(&self) -> bool {
        matches!(self, ApplyError::Commit { error, .. } if error.kind != ControlErrorKind::Refused)
    }
}

impl<E: fmt::Display, R> fmt::Display for ApplyError<E, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::NoPlane => f.write_str("neither an agent nor a packet plane to apply to"),
            ApplyError::Prepare(e) => write!(f, "the agent did not prepare it: {e}"),
            ApplyError::StaleProxy { stale, .. } => write!(
                f,
                "the proxies in front are not configured for this ruleset: {}; nothing changed \
                 (write their configuration again with `rctl emit` and reload them)",
                stale.join("; ")
            ),
            ApplyError::Packet { error, agent: None } => {
                write!(f, "the packet plane: {error} (it keeps its generation)")
            }
            ApplyError::Packet {
                error,
                agent: Some(kept),
            } => {
                write!(f, "the packet plane: {error} (")?;
                match &kept.abort_failed {
                    None => f.write_str("both planes keep their generation)"),
                    Some(a) => write!(
                        f,
                        "both planes keep their generation; the agent's prepare could not be \
                         aborted ({a}), and is dropped when its connection closes)"
                    ),
                }
            }
            ApplyError::Commit {
                error, switched, ..
            } => {
                let uncertain = self.commit_uncertain();
                match (switched.is_some(), uncertain) {
                    (true, false) => write!(
                        f,
                        "the packet plane runs the new generation, but the agent did not commit \
                         it ({error}): it keeps its generation"
                    ),
                    (true, true) => write!(
                        f,
                        "the packet plane runs the new generation; whether the agent committed \
                         it is not known ({error})"
                    ),
                    (false, false) => write!(f, "the agent did not commit it: {error}"),
                    (false, true) => {
                        write!(f, "whether the agent committed it is not known ({error})")
                    }
                }
            }
        }
    }
}

impl<E: fmt::Display + fmt::Debug, R: fmt::Debug> std::error::Error for ApplyError<E, R> {}

/// What [`Apply::run`] returns for the packet plane `P`.
pub type Outcome<P> = Result<
    Applied<<P as PacketPlane>::Report>,
    ApplyError<<P as PacketPlane>::Error, <P as PacketPlane>::Report>,
>;

/// One apply of `artifact` for `site` to the planes given; see the
/// module docs for the steps and what a failure at each leaves.
pub struct Apply<'a, H, P> {
    artifact: &'a [u8],
    site: Option<&'a str>,
    http: Option<H>,
    packet: Option<P>,
    refuse_stale: bool,
}

impl<'a, H: HttpPlane, P: PacketPlane> Apply<'a, H, P> {
    /// An apply of `artifact` (its bytes) for `site` (default: each
    /// plane's own) to the agent `http` and the packet plane `packet`,
    /// either of which may be absent.
    pub fn new(
        artifact: &'a [u8],
        site: Option<&'a str>,
        http: Option<H>,
        packet: Option<P>,
    ) -> Self {
        Apply {
            artifact,
            site,
            http,
            packet,
            refuse_stale: false,
        }
    }

    /// Refuses the ruleset, before any plane switches, when the agent
    /// says a proxy's configuration lacks what it needs
    /// ([`Prepared::stale_proxies`]): [`ApplyError::StaleProxy`]. Without
    /// this, the apply goes on and the prepare's answer says what is
    /// stale.
    pub fn refuse_stale_proxies(mut self) -> Self {
        self.refuse_stale = true;
        self
    }

    /// Runs the steps. The planes are dropped before this returns (a
    /// control connection closes then).
    pub fn run(self) -> Outcome<P> {
        let Apply {
            artifact,
            site,
            http,
            packet,
            refuse_stale,
        } = self;
        match (http, packet) {
            (None, None) => Err(ApplyError::NoPlane),
            (None, Some(mut p)) => match p.switch(artifact, site) {
                Ok(s) => Ok(Applied {
                    agent: None,
                    packet: Some(s),
                }),
                Err(error) => Err(ApplyError::Packet { error, agent: None }),
            },
            (Some(mut h), packet) => {
                let started = Instant::now();
                let prepared = h.prepare(artifact, site).map_err(ApplyError::Prepare)?;
                if refuse_stale && !prepared.stale_proxies.is_empty() {
                    let abort_failed = h.abort(&prepared.id).err();
                    return Err(ApplyError::StaleProxy {
                        stale: prepared.stale_proxies,
                        abort_failed,
                    });
                }
                let switched = match packet {
                    None => None,
                    Some(mut p) => match p.switch(artifact, site) {
                        Ok(s) => Some(s),
                        Err(error) => {
                            let abort_failed = h.abort(&prepared.id).err();
                            return Err(ApplyError::Packet {
                                error,
                                agent: Some(AgentKept {
                                    generation: prepared.generation.saturating_sub(1),
                                    abort_failed,
                                }),
                            });
                        }
                    },
                };
                match h.commit(&prepared.id) {
                    Ok(committed) => Ok(Applied {
                        agent: Some(AgentApplied {
                            prepared,
                            committed,
                            took: started.elapsed(),
                        }),
                        packet: switched,
                    }),
                    Err(error) => Err(ApplyError::Commit {
                        error,
                        prepared: Box::new(prepared),
                        switched,
                    }),
                }
            }
        }
    }
}

impl HttpPlane for Client {
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError> {
        Client::prepare(self, artifact, site)
    }

    fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        Client::commit(self, id)
    }

    fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        Client::abort(self, id)
    }
}

impl<T: HttpPlane + ?Sized> HttpPlane for &mut T {
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError> {
        (**self).prepare(artifact, site)
    }

    fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        (**self).commit(id)
    }

    fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        (**self).abort(id)
    }
}

impl<T: PacketPlane + ?Sized> PacketPlane for &mut T {
    type Report = T::Report;
    type Error = T::Error;

    fn switch(
        &mut self,
        artifact: &[u8],
        site: Option<&str>,
    ) -> Result<Switched<T::Report>, T::Error> {
        (**self).switch(artifact, site)
    }
}

/// An in-process connection to the agent's [`Control`], as a socket
/// connection is one: what it prepares is its own, and dropped when it
/// is dropped (or aborted, or committed). Its calls block: use it on a
/// blocking thread (`tokio::task::spawn_blocking`), never in async code.
pub struct Session {
    control: Arc<Control>,
    conn: u64,
    runtime: tokio::runtime::Handle,
    number: Option<u64>,
}

impl Session {
    /// A connection to `control`, whose prepares run on `runtime` (the
    /// agent's).
    pub fn new(control: Arc<Control>, runtime: tokio::runtime::Handle) -> Session {
        let conn = control.connection();
        Session {
            control,
            conn,
            runtime,
            number: None,
        }
    }

    /// Its prepares make generation `number` when that is above the one
    /// in force (the fleet's generation), else the next one.
    pub fn numbered(mut self, number: u64) -> Session {
        self.number = Some(number);
        self
    }
}

/// A refusal of the in-process agent, as the socket would report it.
fn refused(message: String) -> ControlError {
    ControlError {
        kind: ControlErrorKind::Refused,
        message,
    }
}

impl HttpPlane for Session {
    fn prepare(&mut self, artifact: &[u8], site: Option<&str>) -> Result<Prepared, ControlError> {
        let prepare = self.control.prepare_artifact(
            self.conn,
            artifact.to_vec(),
            site.map(str::to_string),
            self.number,
        );
        self.runtime.block_on(prepare).map_err(refused)
    }

    fn commit(&mut self, id: &str) -> Result<Committed, ControlError> {
        self.control.commit(id, None).map_err(refused)
    }

    fn abort(&mut self, id: &str) -> Result<(), ControlError> {
        self.control.abort(id).map_err(refused)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.control.disconnected(self.conn);
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

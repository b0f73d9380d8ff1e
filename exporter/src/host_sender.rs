//! Host-stack IPFIX records (templates 320/321, `encode::host`) to UDP and
//! file collectors: what `xdprobe manager` and the daemon's `[host]`
//! agent both send. A handful of records per second at most (one per flow
//! report), so this is a plain synchronous sender on its caller's thread;
//! a UDP send that fails is counted, never retried or waited for.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::encode::host::{HostEncoder, HostRecord};
use crate::{CollectorSpec, Target};

/// UDP collectors get the templates again this often (RFC 7011 §8.4).
const TEMPLATE_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum HostSenderError {
    #[error(transparent)]
    Spec(#[from] crate::ExporterError),
    #[error("collector {url}: {source}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

enum Out {
    Udp {
        sock: UdpSocket,
        to: SocketAddr,
        enc: HostEncoder,
        templates_at: Option<Instant>,
    },
    File {
        w: BufWriter<File>,
        enc: HostEncoder,
        templated: bool,
    },
}

/// Every UDP and file collector of a list (TCP ones are skipped, with a
/// warning: host records are a trickle that a datagram carries whole).
pub struct HostSender {
    outs: Vec<Out>,
    /// Messages that could not be sent or written.
    pub errors: u64,
    /// Records handed over.
    pub records: u64,
}

impl HostSender {
    pub fn open(
        collectors: &[String],
        pen: u32,
        observation_domain: u32,
        mtu: u16,
    ) -> Result<HostSender, HostSenderError> {
        let mut outs = Vec::new();
        for url in collectors {
            let spec = CollectorSpec::parse(url)?;
            let io = |source| HostSenderError::Io {
                url: url.clone(),
                source,
            };
            // IPv6 + UDP headers.
            let max = usize::from(mtu).saturating_sub(48);
            let enc = HostEncoder::new(pen, observation_domain, max);
            match spec.target {
                Target::Udp(to) => {
                    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                    let sock = UdpSocket::bind(bind).map_err(io)?;
                    sock.set_nonblocking(true).map_err(io)?;
                    outs.push(Out::Udp {
                        sock,
                        to,
                        enc,
                        templates_at: None,
                    });
                }
                Target::File(p) => outs.push(Out::File {
                    w: BufWriter::new(
                        crate::safe_file::create_new_or_truncate(&p).map_err(|e| io(e.into()))?,
                    ),
                    enc,
                    templated: false,
                }),
                Target::Tcp(_) => {
                    tracing::warn!(collector = %url, "host-stack records go to UDP and file collectors only: skipped");
                }
            }
        }
        Ok(HostSender {
            outs,
            errors: 0,
            records: 0,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.outs.is_empty()
    }

    /// Sends `recs` (and the templates when due) to every collector.
    pub fn send(&mut self, recs: &[HostRecord]) {
        let now = Instant::now();
        let export_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        self.records += recs.len() as u64;
        for out in &mut self.outs {
            match out {
                Out::Udp {
                    sock,
                    to,
                    enc,
                    templates_at,
                } => {
                    let mut msgs = Vec::new();
                    if templates_at.is_none_or(|t| now.duration_since(t) >= TEMPLATE_EVERY) {
                        msgs.push(enc.templates(export_time));
                        *templates_at = Some(now);
                    }
                    if !recs.is_empty() {
                        msgs.extend(enc.records(recs, export_time));
                    }
                    for m in msgs {
                        if sock.send_to(&m, *to).is_err() {
                            self.errors += 1;
                        }
                    }
                }
                Out::File { w, enc, templated } => {
                    if recs.is_empty() {
                        continue;
                    }
                    let mut msgs = Vec::new();
                    if !*templated {
                        msgs.push(enc.templates(export_time));
                        *templated = true;
                    }
                    msgs.extend(enc.records(recs, export_time));
                    for m in msgs {
                        if w.write_all(&m).is_err() {
                            self.errors += 1;
                        }
                    }
                    if w.flush().is_err() {
                        self.errors += 1;
                    }
                }
            }
        }
    }
}

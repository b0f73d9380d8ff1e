//! The connections this host started, as the connect probe saw them, for
//! the wire records' process fields.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xdprobe_dataplane::Process;
use xdprobe_host::fleet::join::ConnKey;

/// The connections this host started, by connection (ends unordered),
/// for the wire sink. Bounded: the oldest go first, and entries older than
/// `KEEP` are forgotten.
#[derive(Default)]
pub struct Conns {
    inner: Mutex<ConnsInner>,
}

#[derive(Default)]
struct ConnsInner {
    map: HashMap<ConnKey, (Instant, Process)>,
    order: VecDeque<(Instant, ConnKey)>,
}

const CONNS_MAX: usize = 65_536;
const CONNS_KEEP: Duration = Duration::from_secs(3600);

impl Conns {
    pub(super) fn insert(&self, key: ConnKey, info: Process) {
        let Ok(mut g) = self.inner.lock() else { return };
        let now = Instant::now();
        g.map.insert(key, (now, info));
        g.order.push_back((now, key));
        while g.order.len() > CONNS_MAX
            || g.order
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > CONNS_KEEP)
        {
            let Some((t, k)) = g.order.pop_front() else {
                break;
            };
            if g.map.get(&k).is_some_and(|(t2, _)| *t2 == t) {
                g.map.remove(&k);
            }
        }
    }

    /// The process that started the connection between `a` and `b`.
    pub fn get(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<Process> {
        let g = self.inner.lock().ok()?;
        g.map.get(&ConnKey::new(a, b)).map(|(_, i)| *i)
    }
}

/// The workers' sinks look up the process of a connection here.
impl xdprobe_capture::sink::Processes for Conns {
    fn process(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<Process> {
        self.get(a, b)
    }
}

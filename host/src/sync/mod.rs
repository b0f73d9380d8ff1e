//! Clock alignment between hosts, for the segments that span two of them
//! (T4, T8): the agent's XDP `responder` stamps the manager's timing
//! probes at the lowest layer, the manager's `prober` sends and times
//! them, `estimate` turns the four timestamps into each agent's offset,
//! its proven bound and its drift; `wire` is the probe's layout.

pub mod estimate;
pub mod prober;
pub mod responder;
pub mod wire;

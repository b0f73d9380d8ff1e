//! One AF_XDP socket per RX queue (xsk-rs over libxdp), with its own UMEM.
//!
//! The receive pass follows xdp-tools' `rx_drop()`: peek a batch from the RX
//! ring, hand each frame (and the timestamp the XDP program wrote in front
//! of it) to the caller, give the frames straight back to the fill ring in
//! the same pass, and kick the kernel only when it asked for it
//! (`need_wakeup`). The socket is created with libxdp's "inhibit program
//! load" flag: xdprobe's own XDP program and socket map steer the frames.

use std::{
    io,
    num::NonZeroU32,
    os::fd::{AsRawFd, RawFd},
    time::Duration,
};

use xdprobe_common::{META_LEN, META_MAGIC, XdpMeta};
use xsk_rs::{
    CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem,
    config::{BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig},
};

#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("{what} = {value}: not a valid AF_XDP size (a power of two is required)")]
    Size { what: &'static str, value: u32 },
    #[error("UMEM for {iface} queue {queue}: {reason}")]
    Umem {
        iface: String,
        queue: u32,
        reason: String,
    },
    #[error("AF_XDP socket on {iface} queue {queue} ({bind} mode): {reason}")]
    Socket {
        iface: String,
        queue: u32,
        bind: &'static str,
        reason: String,
    },
    #[error("interface name {0:?} contains a NUL byte")]
    IfName(String),
}

/// How the socket binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BindMode {
    /// Zero-copy, falling back to copy mode (veth, drivers without it).
    #[default]
    Auto,
    Copy,
    ZeroCopy,
}

/// Sizes and behaviour of one socket (from `[[interface]]` in the config).
#[derive(Clone, Debug)]
pub struct XskOptions {
    pub umem_frames: u32,
    pub frame_size: u32,
    pub rx_ring: u32,
    pub fill_ring: u32,
    pub completion_ring: u32,
    pub bind: BindMode,
    /// Spin on the RX ring instead of sleeping in poll(2).
    pub busy_poll: bool,
    /// poll(2) timeout when the ring is empty.
    pub poll_timeout: Duration,
    /// Frames taken from the RX ring per pass.
    pub batch: usize,
}

impl Default for XskOptions {
    fn default() -> Self {
        XskOptions {
            umem_frames: 16384,
            frame_size: 4096,
            rx_ring: 8192,
            fill_ring: 8192,
            completion_ring: 64,
            bind: BindMode::Auto,
            busy_poll: false,
            poll_timeout: Duration::from_millis(100),
            batch: 64,
        }
    }
}

/// The socket's kernel statistics (`getsockopt(SOL_XDP, XDP_STATISTICS)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Dropped for other reasons than an invalid descriptor (e.g. no frame
    /// in the fill ring in some drivers, or a full RX ring).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    /// The RX ring was full: user space did not keep up.
    pub rx_ring_full: u64,
    /// The fill ring was empty when the kernel needed a frame.
    pub rx_fill_ring_empty: u64,
}

/// A received frame as handed to the caller of [`XskSocket::recv_batch`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RxFrame<'a> {
    /// The frame bytes (at most `frame_size` minus headroom: longer frames
    /// arrive truncated).
    pub data: &'a [u8],
    /// The XDP program's TAI timestamp in ns, if it wrote one.
    pub tai_ns: Option<u64>,
}

/// An AF_XDP socket bound to one queue, with its UMEM and rings.
pub struct XskSocket {
    // Field order is drop order: rings before the UMEM they point into.
    rx: RxQueue,
    fill: FillQueue,
    _comp: CompQueue,
    _tx: TxQueue,
    umem: Umem,
    /// Frames owned by user space and not in the fill ring.
    free: Vec<FrameDesc>,
    /// Scratch for one RX batch (pre-sized: no allocation per pass).
    batch: Vec<FrameDesc>,
    fd: RawFd,
    busy_poll: bool,
    poll_ms: i32,
    pub queue: u32,
    /// "zero-copy" or "copy".
    pub bind_mode: &'static str,
}

fn qsize(what: &'static str, value: u32) -> Result<QueueSize, XskError> {
    QueueSize::new(value).map_err(|_| XskError::Size { what, value })
}

impl XskSocket {
    /// Creates the UMEM and the socket, and fills the fill ring.
    pub fn open(iface: &str, queue: u32, o: &XskOptions) -> Result<Self, XskError> {
        let umem_err = |reason: String| XskError::Umem {
            iface: iface.to_owned(),
            queue,
            reason,
        };
        let frame_size = FrameSize::new(o.frame_size).map_err(|_| XskError::Size {
            what: "frame_size",
            value: o.frame_size,
        })?;
        let umem_cfg = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(qsize("fill_ring", o.fill_ring)?)
            .comp_queue_size(qsize("completion_ring", o.completion_ring)?)
            .frame_headroom(0)
            .build()
            .map_err(|e| umem_err(e.to_string()))?;
        let frames = NonZeroU32::new(o.umem_frames).ok_or(XskError::Size {
            what: "umem_frames",
            value: o.umem_frames,
        })?;
        let (umem, descs) =
            Umem::new(umem_cfg, frames, false).map_err(|e| umem_err(e.to_string()))?;
        let ifname: Interface = iface
            .parse()
            .map_err(|_| XskError::IfName(iface.to_owned()))?;

        let attempts: &[(BindFlags, &'static str)] = match o.bind {
            BindMode::Auto => &[
                (BindFlags::XDP_ZEROCOPY, "zero-copy"),
                (BindFlags::XDP_COPY, "copy"),
            ],
            BindMode::Copy => &[(BindFlags::XDP_COPY, "copy")],
            BindMode::ZeroCopy => &[(BindFlags::XDP_ZEROCOPY, "zero-copy")],
        };
        let mut last_err = None;
        for &(flags, name) in attempts {
            let sock_cfg = SocketConfig::builder()
                .rx_queue_size(qsize("rx_ring", o.rx_ring)?)
                // A passive probe never transmits; the smallest TX ring.
                .tx_queue_size(qsize("tx ring", 1)?)
                .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
                .bind_flags(flags | BindFlags::XDP_USE_NEED_WAKEUP)
                .build();
            // SAFETY: the UMEM is not shared with any other socket, so the
            // shared-UMEM double-free hazard of `Socket::new` cannot arise;
            // the inhibit flag is set anyway.
            match unsafe { Socket::new(sock_cfg, &umem, &ifname, queue) } {
                Ok((tx, rx, Some((fill, comp)))) => {
                    let fd = rx.fd().as_raw_fd();
                    let mut s = XskSocket {
                        rx,
                        fill,
                        _comp: comp,
                        _tx: tx,
                        umem,
                        free: descs,
                        batch: vec![FrameDesc::default(); o.batch.max(1)],
                        fd,
                        busy_poll: o.busy_poll,
                        poll_ms: i32::try_from(o.poll_timeout.as_millis()).unwrap_or(i32::MAX),
                        queue,
                        bind_mode: name,
                    };
                    s.refill();
                    if name == "copy" && o.bind == BindMode::Auto {
                        tracing::info!(
                            iface,
                            queue,
                            "zero-copy not supported by the driver; AF_XDP in copy mode"
                        );
                    }
                    return Ok(s);
                }
                Ok((_, _, None)) => {
                    last_err = Some((name, "no fill/completion ring returned".to_owned()));
                }
                Err(e) => last_err = Some((name, e.to_string())),
            }
        }
        let (bind, reason) = last_err.unwrap_or(("?", "no bind mode tried".to_owned()));
        Err(XskError::Socket {
            iface: iface.to_owned(),
            queue,
            bind,
            reason,
        })
    }

    /// The socket's file descriptor (for the XDP socket map).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Puts every free frame the fill ring has room for back into it.
    fn refill(&mut self) {
        let room = self.fill.nb_free(self.free.len() as u32) as usize;
        let n = room.min(self.free.len());
        if n == 0 {
            return;
        }
        let start = self.free.len() - n;
        // SAFETY: the frames come from this socket's UMEM and are owned by
        // user space (not in any ring), so the kernel may now write them.
        let produced = unsafe { self.fill.produce(&self.free[start..]) };
        self.free.truncate(self.free.len() - produced);
    }

    /// Receives one batch: calls `f` for every frame, then returns the
    /// frames to the fill ring. Returns the number of frames; 0 means the
    /// ring was empty after waiting (poll(2) up to the configured timeout,
    /// or `max_wait` when given; one spin in busy-poll mode).
    pub fn recv_batch(
        &mut self,
        max_wait: Option<Duration>,
        mut f: impl FnMut(RxFrame<'_>),
    ) -> io::Result<usize> {
        self.recv_chunks::<16>(max_wait, |frames| frames.iter().for_each(|fr| f(*fr)))
    }

    /// Like [`recv_batch`](Self::recv_batch), but hands the frames over in
    /// slices of up to `N`, all valid at once, so the caller can process
    /// them as a batch (`Worker::on_batch`: parse all, prefetch all, then
    /// account in order).
    pub fn recv_chunks<const N: usize>(
        &mut self,
        max_wait: Option<Duration>,
        mut f: impl FnMut(&[RxFrame<'_>]),
    ) -> io::Result<usize> {
        // SAFETY: `batch` only receives descriptors of this socket's UMEM.
        let mut n = unsafe { self.rx.consume(&mut self.batch) };
        if n == 0 {
            let ms = max_wait.map_or(self.poll_ms, |d| {
                i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
            });
            self.wait(ms)?;
            // SAFETY: as above.
            n = unsafe { self.rx.consume(&mut self.batch) };
            if n == 0 {
                return Ok(0);
            }
        }
        for descs in self.batch[..n].chunks(N) {
            let mut frames = [RxFrame::default(); N];
            for (slot, desc) in frames.iter_mut().zip(descs) {
                // SAFETY: the descriptor came from the RX ring of this UMEM,
                // so the kernel has finished writing the frame and will not
                // touch it until we give it back through the fill ring below
                // (after every chunk of this batch has been handed out).
                let data = unsafe { self.umem.data(desc) };
                let bytes = data.contents();
                *slot = RxFrame {
                    data: bytes,
                    tai_ns: read_meta(bytes),
                };
            }
            f(&frames[..descs.len()]);
        }
        self.free.extend_from_slice(&self.batch[..n]);
        self.refill();
        Ok(n)
    }

    fn wait(&mut self, poll_ms: i32) -> io::Result<()> {
        if self.busy_poll {
            if self.fill.needs_wakeup() {
                self.kick();
            }
            std::hint::spin_loop();
            return Ok(());
        }
        // poll(2) also wakes the driver when the fill ring asked for it.
        self.rx.poll(poll_ms).map(|_| ())
    }

    /// Wakes the kernel's RX processing (need_wakeup set on the fill ring).
    fn kick(&self) {
        // SAFETY: a zero-length non-blocking recvfrom on our own socket fd
        // with null buffers is the documented AF_XDP wake-up call.
        unsafe {
            libc::recvfrom(
                self.fd,
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }

    /// The socket's kernel statistics.
    pub fn stats(&self) -> io::Result<XskStats> {
        stats_of_fd(self.fd)
    }
}

/// Reads the `XdpMeta` the program wrote right in front of the frame.
fn read_meta(frame: &[u8]) -> Option<u64> {
    let start = frame.as_ptr().wrapping_sub(META_LEN);
    // SAFETY: every frame's data starts after XDP_PACKET_HEADROOM (256
    // bytes) of its own UMEM chunk (the layout xsk-rs and the kernel use),
    // so the META_LEN bytes in front of it are mapped UMEM memory of the
    // same frame, written by the kernel together with the frame (copy mode
    // copies the metadata area; zero-copy leaves it in place). Stale bytes
    // are told apart by the magic; the read is unaligned-safe.
    let meta: XdpMeta = unsafe { std::ptr::read_unaligned(start.cast::<XdpMeta>()) };
    (meta.magic == META_MAGIC).then_some(meta.tai_ns)
}

/// `XDP_STATISTICS` of an AF_XDP socket fd (usable from any thread: the
/// daemon's metrics thread reads it while the worker owns the socket).
pub fn stats_of_fd(fd: RawFd) -> io::Result<XskStats> {
    let mut st = libc::xdp_statistics {
        rx_dropped: 0,
        rx_invalid_descs: 0,
        tx_invalid_descs: 0,
        rx_ring_full: 0,
        rx_fill_ring_empty_descs: 0,
        tx_ring_empty_descs: 0,
    };
    let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
    // SAFETY: `st` is a writable xdp_statistics and `len` its size; the
    // kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            (&raw mut st).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(XskStats {
        rx_dropped: st.rx_dropped,
        rx_invalid_descs: st.rx_invalid_descs,
        rx_ring_full: st.rx_ring_full,
        rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
    })
}

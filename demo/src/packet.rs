//! A raw AF_PACKET socket on one interface: whole Ethernet frames in and
//! out, non-blocking. The bridge's only contact with the kernel.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
};

/// Receive buffer asked of the kernel, so a burst waiting for the bridge
/// thread is queued rather than dropped.
const RCVBUF_BYTES: libc::c_int = 4 << 20;

pub struct PacketSocket {
    fd: OwnedFd,
}

/// What one non-blocking receive produced.
pub enum Recv {
    /// A frame of this many bytes is in the buffer.
    Frame(usize),
    /// A frame longer than the buffer arrived (and was cut).
    Oversize,
    /// Nothing pending.
    Empty,
}

impl PacketSocket {
    /// Opens a socket that receives every frame arriving on `ifname` (not
    /// the ones sent from this host, which includes our own forwards) and
    /// sends on it.
    pub fn open(ifname: &str) -> io::Result<PacketSocket> {
        let cname = CString::new(ifname).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid NUL-terminated string for the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0 receives nothing until bind() names the interface, so no
        // frame of another interface slips in between.
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = PacketSocket { fd };
        s.set_int(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)?;
        // FORCE needs CAP_NET_ADMIN (we have it); the plain option is capped
        // by net.core.rmem_max.
        if s.set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF_BYTES)
            .is_err()
        {
            let _ = s.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF_BYTES);
        }
        let ifindex = libc::c_int::try_from(ifindex).map_err(io::Error::other)?;
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as libc::c_ushort;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its
        // size; the kernel only reads it.
        let rc = unsafe {
            libc::bind(
                s.fd.as_raw_fd(),
                (&raw const sll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // SAFETY: `v` lives for the call and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&raw const v).cast::<libc::c_void>(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Receives one frame into `buf` without blocking.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; MSG_TRUNC
        // makes the kernel return the frame's real length but it still
        // writes at most `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Recv::Empty),
                _ => Err(e),
            };
        }
        let n = n.unsigned_abs();
        Ok(if n > buf.len() {
            Recv::Oversize
        } else {
            Recv::Frame(n)
        })
    }

    /// Sends one frame out of the interface (through its qdisc and tc
    /// hooks, so the tap sees it).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes; a
        // bound packet socket sends on its interface.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast::<libc::c_void>(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

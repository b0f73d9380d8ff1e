//! The pcap-filter compiler: libpcap's own `pcap_compile`, so an
//! expression means exactly what it means to tcpdump.
//!
//! libpcap is opened with `dlopen` at the first compile rather than
//! linked: the probe binary keeps no load-time dependency on libpcap (and
//! its dbus/systemd chain on Debian) unless a filter is actually used.
//! Five functions are needed; a binding crate would link libpcap into
//! every build for them.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use crate::cbpf::{Insn, Program};

/// The link layer the filter's byte offsets refer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// Packets start with the IPv4 or IPv6 header (`DLT_RAW`): what the
    /// kernel path tracer hands its filter.
    Raw,
    /// Ethernet II frames (`DLT_EN10MB`).
    Ethernet,
    /// The link-type number a pcap or pcapng file states (`LINKTYPE_*`,
    /// tcpdump.org's registry): Linux cooked capture, BSD loopback, raw
    /// IPv4/IPv6 …, whatever libpcap can generate code for.
    File(u32),
}

impl LinkType {
    /// The `DLT_*` value on Linux (`pcap/dlt.h`). File link types equal
    /// their DLT except for the few libpcap's `linktype_to_dlt` renumbers:
    /// `LINKTYPE_RAW` (101) and OpenBSD's raw DLT 14, which the file reader
    /// (`parse::LinkType::from_pcap`) also takes as raw IP.
    fn dlt(self) -> c_int {
        match self {
            LinkType::Raw | LinkType::File(12 | 14 | 101) => 12,
            LinkType::Ethernet => 1,
            LinkType::File(t) => c_int::try_from(t).unwrap_or(c_int::MAX),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "filter expressions need libpcap (Debian: apt-get install libpcap0.8), which could not be loaded: {0}"
    )]
    NoLibpcap(String),
    #[error("filter {expr:?}: {msg}")]
    Syntax { expr: String, msg: String },
    #[error("filter {expr:?} contains a NUL byte")]
    Nul { expr: String },
}

#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut Insn,
}

#[repr(C)]
struct PktHdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *mut c_char;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type Close = unsafe extern "C" fn(*mut c_void);
type OfflineFilter = unsafe extern "C" fn(*const BpfProgram, *const PktHdr, *const u8) -> c_int;
type LibVersion = unsafe extern "C" fn() -> *const c_char;

struct Lib {
    open_dead: OpenDead,
    compile: Compile,
    geterr: GetErr,
    freecode: FreeCode,
    close: Close,
    offline_filter: OfflineFilter,
    version: LibVersion,
    /// pcap_compile keeps parser state per handle but older libpcaps had
    /// globals; one compile at a time costs nothing here.
    lock: Mutex<()>,
}

// SAFETY: the struct holds plain function pointers into a library that
// stays loaded for the process's life; the mutex serialises compiles.
unsafe impl Sync for Lib {}
// SAFETY: as above.
unsafe impl Send for Lib {}

static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

fn lib() -> Result<&'static Lib, FilterError> {
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|e| FilterError::NoLibpcap(e.clone()))
}

fn load() -> Result<Lib, String> {
    let mut handle = std::ptr::null_mut();
    let mut last = String::new();
    for name in [c"libpcap.so.0.8", c"libpcap.so.1", c"libpcap.so"] {
        // SAFETY: dlopen with a NUL-terminated name; the handle is never
        // closed, so every symbol taken from it stays valid.
        handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            break;
        }
        // SAFETY: dlerror returns a NUL-terminated string or NULL.
        let e = unsafe { libc::dlerror() };
        if !e.is_null() {
            // SAFETY: non-NULL dlerror result, read before any other dl call.
            last = unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned();
        }
    }
    if handle.is_null() {
        return Err(last);
    }
    let sym = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: a valid handle and a NUL-terminated symbol name.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if p.is_null() {
            Err(format!("libpcap has no {}", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is a libpcap API function whose C prototype
    // (pcap/pcap.h) the fn type it is transmuted to spells.
    unsafe {
        Ok(Lib {
            open_dead: std::mem::transmute::<*mut c_void, OpenDead>(sym(c"pcap_open_dead")?),
            compile: std::mem::transmute::<*mut c_void, Compile>(sym(c"pcap_compile")?),
            geterr: std::mem::transmute::<*mut c_void, GetErr>(sym(c"pcap_geterr")?),
            freecode: std::mem::transmute::<*mut c_void, FreeCode>(sym(c"pcap_freecode")?),
            close: std::mem::transmute::<*mut c_void, Close>(sym(c"pcap_close")?),
            offline_filter: std::mem::transmute::<*mut c_void, OfflineFilter>(sym(
                c"pcap_offline_filter",
            )?),
            version: std::mem::transmute::<*mut c_void, LibVersion>(sym(c"pcap_lib_version")?),
            lock: Mutex::new(()),
        })
    }
}

/// A dead pcap handle for one link type, closed on drop.
struct Dead<'a> {
    lib: &'a Lib,
    p: *mut c_void,
}

impl<'a> Dead<'a> {
    fn open(lib: &'a Lib, link: LinkType, snaplen: u32) -> Result<Dead<'a>, FilterError> {
        // SAFETY: pcap_open_dead allocates a handle or returns NULL.
        let p = unsafe { (lib.open_dead)(link.dlt(), snaplen.min(i32::MAX as u32) as c_int) };
        if p.is_null() {
            return Err(FilterError::NoLibpcap("pcap_open_dead failed".into()));
        }
        Ok(Dead { lib, p })
    }
}

impl Drop for Dead<'_> {
    fn drop(&mut self) {
        // SAFETY: a handle from pcap_open_dead, closed once.
        unsafe { (self.lib.close)(self.p) }
    }
}

/// Compiles `expr` (optimised, as tcpdump does) for packets of `link`
/// captured up to `snaplen` bytes. An empty expression accepts everything.
pub fn compile(expr: &str, link: LinkType, snaplen: u32) -> Result<Program, FilterError> {
    let lib = lib()?;
    let c = CString::new(expr).map_err(|_| FilterError::Nul {
        expr: expr.to_owned(),
    })?;
    let _guard = lib.lock.lock().unwrap_or_else(|p| p.into_inner());
    let dead = Dead::open(lib, link, snaplen)?;
    let mut prog = BpfProgram {
        bf_len: 0,
        bf_insns: std::ptr::null_mut(),
    };
    const NETMASK_UNKNOWN: u32 = 0xffff_ffff;
    // SAFETY: a live handle, a program struct libpcap fills in, and a
    // NUL-terminated expression.
    let rc = unsafe { (lib.compile)(dead.p, &mut prog, c.as_ptr(), 1, NETMASK_UNKNOWN) };
    if rc != 0 {
        // SAFETY: pcap_geterr returns the handle's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr((lib.geterr)(dead.p)) }
            .to_string_lossy()
            .into_owned();
        return Err(FilterError::Syntax {
            expr: expr.to_owned(),
            msg,
        });
    }
    let insns = if prog.bf_insns.is_null() {
        Vec::new()
    } else {
        // SAFETY: libpcap allocated bf_len instructions at bf_insns; they
        // are copied out before pcap_freecode releases them.
        unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }.to_vec()
    };
    // SAFETY: the program pcap_compile filled in, freed once.
    unsafe { (lib.freecode)(&mut prog) };
    Ok(Program::new(insns))
}

/// libpcap's own interpreter (`pcap_offline_filter`) on `prog`: the
/// reference the tests hold [`Program::run`] to. Returns its verdict.
pub fn reference_run(prog: &Program, pkt: &[u8], wirelen: u32) -> Result<u32, FilterError> {
    let lib = lib()?;
    let mut insns = prog.insns.clone();
    let bp = BpfProgram {
        bf_len: insns.len() as c_uint,
        bf_insns: insns.as_mut_ptr(),
    };
    let hdr = PktHdr {
        ts: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        caplen: pkt.len() as u32,
        len: wirelen,
    };
    // SAFETY: a program of bf_len valid instructions, a header whose
    // caplen is the buffer's length, and the buffer; libpcap only reads.
    let r = unsafe { (lib.offline_filter)(&bp, &hdr, pkt.as_ptr()) };
    Ok(r as u32)
}

/// libpcap's version string, for messages.
pub fn version() -> Result<String, FilterError> {
    let lib = lib()?;
    // SAFETY: a static NUL-terminated string.
    Ok(unsafe { CStr::from_ptr((lib.version)()) }
        .to_string_lossy()
        .into_owned())
}

// `Insn` must match `struct bpf_insn` for the copies above.
const _: () = assert!(std::mem::size_of::<Insn>() == 8);

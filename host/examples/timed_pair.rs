//! Development aid: a loopback client/server pair timing its own messages
//! (send time before write, read time after read), printed as JSON lines.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
fn mono() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
fn main() {
    let l = TcpListener::bind("127.0.0.1:5557").unwrap();
    let srv = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 65536];
        let mut out = vec![];
        loop {
            let n = c.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            let t = mono();
            out.push((t, n));
        }
        out
    });
    let mut c = TcpStream::connect("127.0.0.1:5557").unwrap();
    c.set_nodelay(true).unwrap();
    let msg = vec![1u8; 1000];
    let mut sent = vec![];
    for _ in 0..20 {
        let t = mono();
        c.write_all(&msg).unwrap();
        let t2 = mono();
        sent.push((t, t2));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    drop(c);
    let got = srv.join().unwrap();
    for (i, ((s, s2), (r, n))) in sent.iter().zip(got.iter()).enumerate() {
        println!(
            "{i} sent={s} write_took={} read={r} n={n} t8={}",
            s2 - s,
            r - s
        );
    }
}

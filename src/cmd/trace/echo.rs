//! `xdprobe trace echo`: the active mode's two sides — `--listen`
//! returns marked probes (tracing this side too with `--out`), `--send`
//! sends them while the tracer follows both directions.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use xdprobe_host::trace::echo::{self, SendPlan};

use super::{EchoArgs, Sink, prepare, print_stats, setup_error, start, stop_flag, trace_into};

fn resolve(target: &str) -> anyhow::Result<SocketAddr> {
    target
        .to_socket_addrs()
        .with_context(|| format!("--send {target}: expected HOST:PORT"))?
        .next()
        .with_context(|| format!("--send {target}: no address"))
}

pub(super) fn run(a: EchoArgs) -> anyhow::Result<ExitCode> {
    if let Some(port) = a.listen {
        return listen_cmd(&a, port);
    }
    let target = match a.send.as_deref().map(resolve).transpose() {
        Ok(Some(t)) => t,
        Ok(None) => return setup_error("--send or --listen is required"),
        Err(e) => return setup_error(format!("{e:#}")),
    };
    let Some(out) = a.out.clone() else {
        return setup_error("--send needs --out FILE for the trails");
    };
    let plan = SendPlan {
        target,
        rate: a.rate,
        count: a.count,
        size: a.size,
        wait: a.wait,
        run: echo::new_run_id(),
    };
    if let Err(e) = plan.check() {
        return setup_error(e);
    }
    let flow = format!("udp and host {} and port {}", target.ip(), target.port());
    let (kernel, opts) = match prepare(&a.tracer, &flow) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let bind: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = UdpSocket::bind(bind).context("binding the probe socket")?;
    let mut sink = Sink::Json(Box::new(std::io::BufWriter::new(
        xdprobe_exporter::safe_file::create_new_or_truncate(&out)?,
    )));
    let mut probe = match start(&kernel, &opts) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let stop = stop_flag()?;
    let idle = a.tracer.idle;
    let (sent, st, written) = std::thread::scope(|s| -> anyhow::Result<_> {
        let sender = s.spawn(|| echo::send(&sock, &plan, &stop));
        let mut finished_at: Option<Instant> = None;
        let (st, written) = trace_into(&kernel, &mut probe, idle, &mut sink, &mut || {
            if stop.load(Ordering::Relaxed) {
                return true;
            }
            // After the sender: one idle period, so trails whose free is
            // never seen are collected as idle rather than cut off.
            match finished_at {
                None if sender.is_finished() => {
                    finished_at = Some(Instant::now());
                    false
                }
                None => false,
                Some(t) => t.elapsed() >= idle + Duration::from_millis(200),
            }
        })?;
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("the probe sender panicked"))??;
        Ok((sent, st, written))
    })?;
    let rtt = sent.rtt.summary();
    eprintln!(
        "probes: {} sent, {} replies, {} send errors; round trip (sender's own timing) p50 {:.1} µs, p99 {:.1} µs; {} trails written to {}",
        sent.sent,
        sent.received,
        sent.send_errors,
        rtt.p50_us,
        rtt.p99_us,
        written,
        out.display()
    );
    if a.tracer.stats {
        print_stats(&st, written);
    }
    Ok(ExitCode::SUCCESS)
}

fn listen_cmd(a: &EchoArgs, port: u16) -> anyhow::Result<ExitCode> {
    let addr: SocketAddr = match format!("{}:{port}", a.bind)
        .parse()
        .or_else(|_| format!("[{}]:{port}", a.bind).parse())
    {
        Ok(x) => x,
        Err(_) => return setup_error(format!("--bind {}: not an address", a.bind)),
    };
    let sock = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
    let stop = stop_flag()?;
    let Some(out) = a.out.clone() else {
        tracing::info!(%addr, "returning probes");
        let st = echo::listen(&sock, a.duration, &stop)?;
        eprintln!(
            "probes: {} returned, {} other datagrams ignored",
            st.echoed, st.ignored
        );
        return Ok(ExitCode::SUCCESS);
    };
    // Two-host mode: trace this side too.
    let flow = format!("udp and port {port}");
    let (kernel, opts) = match prepare(&a.tracer, &flow) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let mut sink = Sink::Json(Box::new(std::io::BufWriter::new(
        xdprobe_exporter::safe_file::create_new_or_truncate(&out)?,
    )));
    let mut probe = match start(&kernel, &opts) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let (ls, st, written) = std::thread::scope(|s| -> anyhow::Result<_> {
        let l = s.spawn(|| echo::listen(&sock, a.duration, &stop));
        let (st, written) = trace_into(&kernel, &mut probe, a.tracer.idle, &mut sink, &mut || {
            l.is_finished()
        })?;
        let ls = l
            .join()
            .map_err(|_| anyhow::anyhow!("the listener panicked"))??;
        Ok((ls, st, written))
    })?;
    eprintln!(
        "probes: {} returned, {} other datagrams ignored; {written} trails written to {}",
        ls.echoed,
        ls.ignored,
        out.display()
    );
    if a.tracer.stats {
        print_stats(&st, written);
    }
    Ok(ExitCode::SUCCESS)
}

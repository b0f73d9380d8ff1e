use super::*;

fn cx(stats: &mut L7Stats, ts_ns: u64) -> HttpCtx<'_> {
    HttpCtx {
        ts_ns,
        t_snt_ns: 0,
        cfg: HttpCfg {
            target_len: 12,
            user_agent: true,
        },
        stats,
    }
}

#[test]
fn http_request_fields_and_cut_target() {
    let mut st = HttpState::default();
    let mut stats = L7Stats::default();
    let r = b"GET /a/very/long/path?q=1 HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: curl/7.88\r\n\r\n";
    assert_eq!(
        st.request_eat(0, &r[..20], &mut cx(&mut stats, 1)),
        Eat::MORE
    );
    assert_eq!(
        st.request_eat(0, r, &mut cx(&mut stats, 1)),
        Eat::used(r.len())
    );
    let i = st.info();
    assert_eq!(i.method.as_deref(), Some(&b"GET"[..]));
    assert_eq!(i.host.as_deref(), Some(&b"www.example.com"[..]));
    assert_eq!(i.target.as_deref(), Some(&b"/a/very/long"[..]), "cut to 12");
    assert_eq!(i.user_agent.as_deref(), Some(&b"curl/7.88"[..]));
    assert_eq!(i.requests, 1);
}

#[test]
fn http_bodies_are_skipped_by_their_framing() {
    let mut st = HttpState::default();
    let mut stats = L7Stats::default();
    let req = b"POST /x HTTP/1.1\r\nContent-Length: 5000\r\n\r\n";
    let e = st.request_eat(100, req, &mut cx(&mut stats, 10));
    assert_eq!((e.used, e.skip), (req.len(), 5000));
    assert_eq!(st.body_end, Some(100 + req.len() as u32 + 5000));
    st.request_ended(50_000);
    let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
    assert_eq!(
        st.response_eat(resp, &mut cx(&mut stats, 80_000)),
        Eat::used(resp.len())
    );
    let e = st.response_eat(b"1f4\r\n", &mut cx(&mut stats, 80_000));
    assert_eq!((e.used, e.skip), (5, 502));
    assert_eq!(
        st.response_eat(b"0\r\n", &mut cx(&mut stats, 1)),
        Eat::used(3)
    );
    assert_eq!(
        st.response_eat(b"X-T: 1\r\n", &mut cx(&mut stats, 1)),
        Eat::used(8)
    );
    assert_eq!(
        st.response_eat(b"\r\n", &mut cx(&mut stats, 1)),
        Eat::used(2)
    );
    let i = st.info();
    assert_eq!(
        (i.status, i.status_class, i.srt.count),
        (Some(200), [0, 1, 0, 0, 0], 1)
    );
    assert_eq!(i.srt.min_us(), Some(30), "80 µs - 50 µs");
}

#[test]
fn http_pipelined_requests_pair_in_order() {
    let mut st = HttpState::default();
    let mut stats = L7Stats::default();
    let two = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: a\r\n\r\n";
    let e = st.request_eat(0, two, &mut cx(&mut stats, 1_000));
    assert_eq!(e.used, 28);
    let e2 = st.request_eat(28, &two[28..], &mut cx(&mut stats, 1_000));
    assert_eq!(e2.used, two.len() - 28);
    // The HEAD's response carries a Content-Length but no body.
    let r1 = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n";
    let e = st.response_eat(r1, &mut cx(&mut stats, 3_000));
    assert_eq!((e.used, e.skip), (r1.len(), 3));
    let r2 = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    let e = st.response_eat(r2, &mut cx(&mut stats, 9_000));
    assert_eq!((e.used, e.skip), (r2.len(), 0));
    let i = st.info();
    assert_eq!(
        (i.requests, i.status, i.status_class),
        (2, Some(200), [0, 1, 0, 1, 0])
    );
    assert_eq!((i.srt.min_us(), i.srt.max_us()), (Some(2), Some(8)));
}

#[test]
fn http_interim_upgrade_and_malformed() {
    let mut st = HttpState::default();
    let mut stats = L7Stats::default();
    st.request_eat(
        0,
        b"GET /ws HTTP/1.1\r\nHost: h\r\n\r\n",
        &mut cx(&mut stats, 1_000),
    );
    let c = b"HTTP/1.1 100 Continue\r\n\r\n";
    assert_eq!(
        st.response_eat(c, &mut cx(&mut stats, 2_000)),
        Eat::used(c.len())
    );
    let up = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
    assert_eq!(st.response_eat(up, &mut cx(&mut stats, 5_000)), Eat::DONE);
    let i = st.info();
    assert_eq!(
        (i.status, i.status_class[0], i.srt.count),
        (Some(101), 2, 1)
    );
    assert_eq!(
        i.srt.min_us(),
        Some(4),
        "from the final response, 100 answers nothing"
    );
    assert_eq!(
        st.request_eat(0, b"GET \x01 HTTP/1.1\r\n\r\n", &mut cx(&mut stats, 1)),
        Eat::LOST
    );
    assert_eq!(stats.http_malformed, 1);
}

#[test]
fn http_response_until_close_and_srt_floor() {
    let mut st = HttpState::default();
    let mut stats = L7Stats::default();
    st.request_eat(0, b"GET / HTTP/1.0\r\n\r\n", &mut cx(&mut stats, 10_000));
    let mut c = cx(&mut stats, 12_000);
    c.t_snt_ns = 5_000;
    let e = st.response_eat(b"HTTP/1.0 200 OK\r\n\r\nbody", &mut c);
    assert!(e.done);
    assert_eq!(st.info().srt.min_us(), Some(0), "2 µs - 5 µs floors at 0");
}

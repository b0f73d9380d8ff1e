use super::*;

/// Builds a tiny BTF blob: `struct outer { int a; union { u16 b; u32 c; }; struct inner in; }`,
/// `struct inner { u64 x; u8 y; }`.
fn sample() -> Vec<u8> {
    let mut strings = vec![0u8];
    let mut name = |s: &str| {
        let off = strings.len() as u32;
        strings.extend_from_slice(s.as_bytes());
        strings.push(0);
        off
    };
    let (n_int, n_u16, n_u8, n_u64) = (name("int"), name("u16"), name("u8"), name("u64"));
    let (n_outer, n_inner) = (name("outer"), name("inner"));
    let (n_a, n_b, n_c, n_in, n_x, n_y) = (
        name("a"),
        name("b"),
        name("c"),
        name("in"),
        name("x"),
        name("y"),
    );
    let mut t = Vec::new();
    let mut rec = |name: u32, kind: u32, vlen: u32, size: u32, extra: &[u32]| {
        t.extend_from_slice(&name.to_le_bytes());
        t.extend_from_slice(&((kind << 24) | vlen).to_le_bytes());
        t.extend_from_slice(&size.to_le_bytes());
        for e in extra {
            t.extend_from_slice(&e.to_le_bytes());
        }
    };
    // 1 int, 2 u16, 3 u8, 4 u64
    rec(n_int, 1, 0, 4, &[32]);
    rec(n_u16, 1, 0, 2, &[16]);
    rec(n_u8, 1, 0, 1, &[8]);
    rec(n_u64, 1, 0, 8, &[64]);
    // 5 anonymous union { u16 b; int c; }
    rec(0, 5, 2, 4, &[n_b, 2, 0, n_c, 1, 0]);
    // 6 struct inner { u64 x @0; u8 y @64 bits }
    rec(n_inner, 4, 2, 16, &[n_x, 4, 0, n_y, 3, 64]);
    // 7 struct outer { int a @0; union @32; struct inner in @64 }
    rec(n_outer, 4, 3, 24, &[n_a, 1, 0, 0, 5, 32, n_in, 6, 64]);
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&24u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(t.len() as u32).to_le_bytes());
    out.extend_from_slice(&(t.len() as u32).to_le_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
    out.extend_from_slice(&t);
    out.extend_from_slice(&strings);
    out
}

#[test]
fn finds_members_through_anonymous_unions_and_paths() {
    let btf = Btf::parse(sample()).unwrap();
    assert_eq!(btf.len(), 7);
    assert_eq!(
        btf.member("outer", "a").unwrap(),
        Member { offset: 0, size: 4 }
    );
    assert_eq!(
        btf.member("outer", "b").unwrap(),
        Member { offset: 4, size: 2 }
    );
    assert_eq!(
        btf.member("outer", "c").unwrap(),
        Member { offset: 4, size: 4 }
    );
    assert_eq!(
        btf.member("outer", "in.y").unwrap(),
        Member {
            offset: 16,
            size: 1
        }
    );
    assert_eq!(
        btf.member("inner", "x").unwrap(),
        Member { offset: 0, size: 8 }
    );
}

#[test]
fn missing_names_are_errors_that_say_which() {
    let btf = Btf::parse(sample()).unwrap();
    let e = btf.member("outer", "zz").unwrap_err().to_string();
    assert!(e.contains("zz") && e.contains("outer"), "{e}");
    let e = btf.member("nope", "a").unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    assert!(Btf::parse(vec![]).is_err());
    assert!(Btf::parse(vec![0x9f, 0xeb, 1, 0]).is_err());
    let mut s = sample();
    s.truncate(s.len() - 30);
    assert!(Btf::parse(s).is_err());
    // Every prefix of a valid blob parses or fails cleanly.
    let s = sample();
    for n in 0..s.len() {
        let _ = Btf::parse(s[..n].to_vec());
    }
}

/// The running kernel's own BTF, where it exists (every kernel this
/// product supports has it; the loader refuses to start without it).
#[test]
fn reads_the_running_kernels_sk_buff() {
    if !Path::new(VMLINUX).exists() {
        eprintln!("SKIP: no {VMLINUX} on this machine");
        return;
    }
    let btf = Btf::from_file(VMLINUX).unwrap();
    let len = btf.member("sk_buff", "len").unwrap();
    assert_eq!(len.size, 4);
    let nh = btf.member("sk_buff", "network_header").unwrap();
    assert_eq!(nh.size, 2);
    let cb = btf.member("sk_buff", "cb").unwrap();
    assert_eq!(cb.size, 48);
    let args = btf.tracepoint_args("tcp_probe").unwrap();
    assert_eq!(args, ["struct sock *", "struct sk_buff *"]);
    let args = btf.func_args("ip_rcv").unwrap();
    assert_eq!(args[0], "struct sk_buff *");
    assert_eq!(args.len(), 4);
}

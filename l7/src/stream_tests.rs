use super::*;

/// A consumer of "units": a length byte N then N bytes; a unit whose
/// first byte is 0xFF is followed by a skip of the next byte's value
/// times 100 bytes. Records every unit body it saw.
#[derive(Default)]
struct Units {
    seen: Vec<Vec<u8>>,
    done_after: Option<usize>,
}

impl Units {
    fn eat(&mut self, b: &[u8]) -> Eat {
        if self.done_after.is_some_and(|n| self.seen.len() >= n) {
            return Eat::DONE;
        }
        match b {
            [0xFF, k, ..] => Eat {
                used: 2,
                skip: u64::from(*k) * 100,
                ..Eat::MORE
            },
            [n, rest @ ..] if rest.len() >= usize::from(*n) => {
                self.seen.push(rest[..usize::from(*n)].to_vec());
                Eat::used(1 + usize::from(*n))
            }
            _ => Eat::MORE,
        }
    }
}

fn feed(
    s: &mut Stream,
    pool: &mut BufPool,
    u: &mut Units,
    seq: u32,
    data: &[u8],
) -> Result<(), Loss> {
    s.feed(
        pool,
        Seg {
            seq,
            data,
            wire: data.len() as u32,
        },
        1000,
        &mut |_, b| u.eat(b),
    )
}

fn unit(n: u8, fill: u8) -> Vec<u8> {
    let mut v = vec![n];
    v.extend(std::iter::repeat_n(fill, usize::from(n)));
    v
}

#[test]
fn stream_joins_units_split_across_segments() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    let bytes = [unit(9, 1), unit(3, 2)].concat(); // 10 + 4 bytes
    feed(&mut s, &mut pool, &mut u, 1000, &bytes[..7]).unwrap();
    assert!(u.seen.is_empty() && s.holding());
    feed(&mut s, &mut pool, &mut u, 1007, &bytes[7..]).unwrap();
    assert_eq!(u.seen, vec![vec![1; 9], vec![2; 3]]);
    assert!(!s.holding(), "buffer back in the pool");
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn stream_trims_retransmissions_and_wraps() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    let bytes = [unit(4, 1), unit(4, 2)].concat();
    let base = u32::MAX - 3;
    feed(&mut s, &mut pool, &mut u, base, &bytes[..6]).unwrap();
    feed(&mut s, &mut pool, &mut u, base, &bytes[..6]).unwrap(); // again
    feed(&mut s, &mut pool, &mut u, base.wrapping_add(3), &bytes[3..]).unwrap(); // overlap
    assert_eq!(u.seen, vec![vec![1; 4], vec![2; 4]]);
}

#[test]
fn stream_holds_one_out_of_order_run() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    let bytes = [unit(5, 1), unit(5, 2), unit(5, 3)].concat(); // 18 bytes
    s.start_at(0);
    feed(&mut s, &mut pool, &mut u, 12, &bytes[12..]).unwrap();
    feed(&mut s, &mut pool, &mut u, 8, &bytes[8..12]).unwrap(); // extends the run
    assert!(u.seen.is_empty());
    feed(&mut s, &mut pool, &mut u, 0, &bytes[..8]).unwrap();
    assert_eq!(u.seen, vec![vec![1; 5], vec![2; 5], vec![3; 5]]);
    assert_eq!(pool.in_use(), 0);
    // A second hole: lost.
    let (mut s, mut u) = (Stream::default(), Units::default());
    s.start_at(0);
    feed(&mut s, &mut pool, &mut u, 12, &bytes[12..]).unwrap();
    assert_eq!(
        feed(&mut s, &mut pool, &mut u, 3, &bytes[3..5]),
        Err(Loss::Gap)
    );
    assert_eq!(s.state, Follow::Lost);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn stream_skips_bytes_that_never_arrive() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    // A unit, a skip of 300 bytes, then a unit.
    feed(
        &mut s,
        &mut pool,
        &mut u,
        0,
        &[unit(2, 7), vec![0xFF, 3]].concat(),
    )
    .unwrap();
    // The skipped bytes' segments are lost; the next unit starts 300 in.
    let next = 3 + 2 + 300;
    feed(
        &mut s,
        &mut pool,
        &mut u,
        next - 50,
        &[vec![0; 50], unit(1, 9)].concat(),
    )
    .unwrap();
    assert_eq!(u.seen, vec![vec![7; 2], vec![9]]);
    // An uncaptured tail inside a skip is fine.
    let seq = next + 2;
    let seg = [0xFF, 1, 0, 0];
    s.feed(
        &mut pool,
        Seg {
            seq,
            data: &seg,
            wire: 102,
        },
        1000,
        &mut |_, b| u.eat(b),
    )
    .unwrap();
    assert_eq!(s.state, Follow::On);
}

#[test]
fn stream_loses_needed_bytes_past_the_snap_length() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    let b = unit(9, 1);
    let r = s.feed(
        &mut pool,
        Seg {
            seq: 0,
            data: &b[..4],
            wire: 10,
        },
        1000,
        &mut |_, x| u.eat(x),
    );
    assert_eq!(r, Err(Loss::Snap));
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn stream_bound_and_done() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    let big = unit(200, 1);
    let r = s.feed(
        &mut pool,
        Seg {
            seq: 0,
            data: &big[..150],
            wire: 150,
        },
        100,
        &mut |_, x| u.eat(x),
    );
    assert_eq!(r, Err(Loss::Overflow));
    // Lost: later segments are ignored until a resync.
    feed(&mut s, &mut pool, &mut u, 150, &big[150..]).unwrap();
    assert!(u.seen.is_empty());
    s.resync(&mut pool, 500);
    u.done_after = Some(1);
    feed(
        &mut s,
        &mut pool,
        &mut u,
        500,
        &[unit(1, 4), unit(1, 5)].concat(),
    )
    .unwrap();
    assert_eq!(u.seen, vec![vec![4]]);
    assert_eq!(s.state, Follow::Done);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn stream_skip_into_an_out_of_order_run() {
    let mut pool = BufPool::new(4);
    let (mut s, mut u) = (Stream::default(), Units::default());
    s.start_at(0);
    // The run at 100..109: 5 bytes the skip will cover, then a unit.
    feed(&mut s, &mut pool, &mut u, 100, &[0, 0, 0, 0, 0, 3, 8, 8, 8]).unwrap();
    // A unit, then a skip of 100 from 5: it ends at 105, inside the run,
    // whose rest is contiguous at once.
    feed(&mut s, &mut pool, &mut u, 0, &[2, 5, 5, 0xFF, 1]).unwrap();
    assert_eq!(u.seen, vec![vec![5, 5], vec![8, 8, 8]]);
    assert_eq!(s.state, Follow::On);
    assert_eq!(pool.in_use(), 0);
}

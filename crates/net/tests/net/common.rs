//! The test stream: a layout, deterministic inputs and the callback.

use firmtime_net::*;
use std::net::{SocketAddr, UdpSocket};

/// Generous: the result must arrive, whatever the hypervisor steals.
pub const ARRIVE_NS: u64 = 2_000_000_000;

pub const N_IN: usize = 300;
pub const N_INT: usize = 50;
pub const N_BOTH: usize = 700;

/// f32 input, i32 input, f32 output (pairs with the f32 input for Dry), i16 both ways.
/// 2,800 bytes to the worker: fragmented at MTU 1500.
pub struct Ids {
    pub input: BlockId<f32>,
    pub ints: BlockId<i32>,
    pub output: BlockId<f32>,
    pub both: BlockId<i16>,
}

pub fn blocks() -> (BlockSet, Ids) {
    let mut b = BlockSet::new();
    let input = b.add::<f32>(Direction::ToWorker, N_IN).unwrap();
    let ints = b.add::<i32>(Direction::ToWorker, N_INT).unwrap();
    let output = b.add::<f32>(Direction::FromWorker, N_IN).unwrap();
    let both = b.add::<i16>(Direction::Both, N_BOTH).unwrap();
    (
        b,
        Ids {
            input,
            ints,
            output,
            both,
        },
    )
}

pub fn input(n: u64, i: usize) -> f32 {
    (n * 1000 + i as u64) as f32 * 0.37 - 100.0
}
pub fn int(n: u64, i: usize) -> i32 {
    (n as i32).wrapping_mul(7919) ^ i as i32
}
pub fn both_in(n: u64, i: usize) -> i16 {
    (n as i16).wrapping_mul(31).wrapping_add(i as i16)
}
pub fn out_of(x: f32, seq: u64) -> f32 {
    x * 2.0 + seq as f32
}
pub fn both_of(x: i16, int: i32, seq: u64) -> i16 {
    x.wrapping_mul(2).wrapping_add(seq as i16) ^ int as i16
}

/// Writes period `n`'s inputs.
pub fn fill(b: &mut BlockSet, ids: &Ids, n: u64) {
    for (i, v) in b.get_mut(ids.input).iter_mut().enumerate() {
        *v = input(n, i);
    }
    for (i, v) in b.get_mut(ids.ints).iter_mut().enumerate() {
        *v = int(n, i);
    }
    for (i, v) in b.get_mut(ids.both).iter_mut().enumerate() {
        *v = both_in(n, i);
    }
}

/// The worker's callback (allocation-free): output = 2·input + seq; both = f(both, ints, seq).
pub fn callback(b: &mut BlockSet, seq: u64) {
    let ids = Ids {
        input: b.id(0).unwrap(),
        ints: b.id(1).unwrap(),
        output: b.id(2).unwrap(),
        both: b.id(3).unwrap(),
    };
    for i in 0..N_IN {
        let x = b.get(ids.input)[i];
        b.get_mut(ids.output)[i] = out_of(x, seq);
    }
    for i in 0..N_BOTH {
        let int = b.get(ids.ints)[i % N_INT];
        let x = &mut b.get_mut(ids.both)[i];
        *x = both_of(*x, int, seq);
    }
}

/// Asserts the outputs are exactly the callback applied to period `n`'s inputs.
pub fn assert_result_of(b: &BlockSet, ids: &Ids, n: u64) {
    for (i, &y) in b.get(ids.output).iter().enumerate() {
        assert_eq!(
            y.to_bits(),
            out_of(input(n, i), n).to_bits(),
            "output[{i}] of {n}"
        );
    }
    for (i, &y) in b.get(ids.both).iter().enumerate() {
        assert_eq!(
            y,
            both_of(both_in(n, i), int(n, i % N_INT), n),
            "both[{i}] of {n}"
        );
    }
}

pub fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A bound socket that never answers: a worker that does not respond.
pub fn silent_peer() -> UdpSocket {
    UdpSocket::bind(localhost()).unwrap()
}

pub fn spec(stream_id: u32, layout: &Layout) -> StreamSpec {
    StreamSpec {
        stream_id,
        layout: layout.clone(),
        peer: None,
    }
}

/// One master period under `assert_no_alloc`.
pub fn process(m: &mut Master, deadline: Deadline) -> PeriodReport {
    assert_no_alloc::assert_no_alloc(|| m.process(deadline))
}

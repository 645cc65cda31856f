//! Sample-accurate alignment of the worker's results: a constant latency
//! whatever the host's block sizes. Pure (no FFI, no I/O); **RT-safe**
//! after [`Stream::new`], which allocates everything.
//!
//! With `window = w`, the result of an exchange arrives `w` exchanges
//! later. When exchanges have different sizes (the short last block of a
//! file, a host that changes its block size), writing each result into the
//! block that happens to be running delays the audio by a varying amount
//! and drops or truncates results: sox's `ladspa -l` then corrupted the
//! last 4 095 samples of a 96 000-frame file (issue 28 item 3). Instead:
//!
//! - the session's exchange size `B` is fixed by the first run() of the
//!   instance: `min(n₁, max_block)`; longer runs are split into exchanges
//!   of at most `B` frames;
//! - the latency is `L = w × B`, constant for the instance;
//! - every input frame at stream position `t` has its result placed at
//!   output position `t + L` (the exchange's start is remembered by its
//!   sequence number), so the output is the remote plugin's output delayed
//!   by exactly `L` frames, for any sequence of run sizes ≤ `B`: the `w`
//!   exchanges in flight hold at most `w × B = L` frames.
//!
//! The first `L` output frames come before the stream: zeros. A position
//! the worker did not fill in time (real time: late, away) gets what the
//! late policy says, aligned too: `dry` is the input delayed by `L`
//! (audio input k to output k), `zeros`, or `repeat` (the last result
//! delivered, cycled); those frames are counted as unprocessed.

use crate::config::Late;

/// Sequence numbers remembered: exchanges in flight are at most window + 1 ≤ 3.
const SENT_SLOTS: usize = 4;

#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    seq: u64,
    start: u64,
    frames: usize,
    valid: bool,
}

/// The instance's delay line: its input history, its output queue and the
/// exchanges in flight.
#[derive(Debug)]
pub struct Stream {
    ins: usize,
    outs: usize,
    window: u64,
    max_block: usize,
    late: Late,
    /// Frames per ring (per port): `(window + 1) × max_block`.
    cap: usize,
    /// `ins × cap`: the input by stream position.
    hist: Vec<f32>,
    /// `outs × cap`: the output by output position.
    queue: Vec<f32>,
    /// `outs × max_block`: the last result delivered (`late = "repeat"`).
    last: Vec<f32>,
    last_len: usize,
    /// Input frames taken (the next exchange's stream position).
    pos: u64,
    /// Output positions `[pos, filled)` hold their frames.
    filled: u64,
    /// 0 until the first run fixes it.
    block: usize,
    latency: u64,
    sent: [Sent; SENT_SLOTS],
}

impl Stream {
    /// A stream for `ins` audio inputs and `outs` audio outputs. Allocates
    /// `(window + 1) × max_block` frames per port.
    pub fn new(ins: usize, outs: usize, window: u8, max_block: usize, late: Late) -> Self {
        let cap = (usize::from(window) + 1) * max_block.max(1);
        Self {
            ins,
            outs,
            window: u64::from(window),
            max_block: max_block.max(1),
            late,
            cap,
            hist: vec![0.0; ins * cap],
            queue: vec![0.0; outs * cap],
            last: vec![
                0.0;
                if late == Late::Repeat {
                    outs * max_block.max(1)
                } else {
                    0
                }
            ],
            last_len: 0,
            pos: 0,
            filled: 0,
            block: 0,
            latency: 0,
            sent: [Sent::default(); SENT_SLOTS],
        }
    }

    /// Fixes the exchange size and the latency at the first run of `n > 0`
    /// frames; returns the exchange size (0 before). **RT-safe.**
    pub fn start(&mut self, n: usize) -> usize {
        if self.block == 0 && n > 0 {
            self.block = n.min(self.max_block);
            self.latency = self.window * self.block as u64;
        }
        self.block
    }

    /// The latency in frames once the first run fixed it.
    pub fn latency(&self) -> Option<u64> {
        (self.block > 0).then_some(self.latency)
    }

    /// Takes input `k`'s next `c` frames (`None`: an unconnected port,
    /// zeros). Call for every input, then [`Stream::sent`] or
    /// [`Stream::fill_to`], then [`Stream::output`] and [`Stream::advance`].
    pub fn input(&mut self, k: usize, c: usize, src: Option<&[f32]>) {
        let ring = &mut self.hist[k * self.cap..(k + 1) * self.cap];
        for i in 0..c {
            let q = ((self.pos + i as u64) % self.cap as u64) as usize;
            ring[q] = src.map_or(0.0, |s| s[i]);
        }
    }

    /// The exchange of the current `c` frames went out as `seq`.
    pub fn sent(&mut self, seq: u64, c: usize) {
        self.sent[(seq % SENT_SLOTS as u64) as usize] = Sent {
            seq,
            start: self.pos,
            frames: c,
            valid: true,
        };
    }

    /// Where the result of exchange `due` goes: its first output position
    /// and its frames; `None` for an exchange this stream did not send.
    pub fn result_range(&self, due: u64) -> Option<(u64, usize)> {
        let s = self.sent[(due % SENT_SLOTS as u64) as usize];
        (s.valid && s.seq == due).then_some((s.start + self.latency, s.frames))
    }

    /// Fills output positions `[filled, to)` as the late policy says;
    /// returns how many of them count as unprocessed (those at or after
    /// the latency: before it, the stream had not begun). **RT-safe.**
    pub fn fill_to(&mut self, to: u64) -> u64 {
        let to = to.min(self.pos + self.cap as u64);
        let mut missed = 0;
        let mut i = 0usize;
        while self.filled < to {
            let q = self.filled;
            let at = (q % self.cap as u64) as usize;
            let before = q < self.latency;
            if !before {
                missed += 1;
            }
            for k in 0..self.outs {
                let v = if before {
                    0.0
                } else {
                    match self.late {
                        Late::Dry if k < self.ins => {
                            let src = ((q - self.latency) % self.cap as u64) as usize;
                            self.hist[k * self.cap + src]
                        }
                        Late::Repeat if self.last_len > 0 => {
                            self.last[k * self.max_block + i % self.last_len]
                        }
                        _ => 0.0,
                    }
                };
                self.queue[k * self.cap + at] = v;
            }
            self.filled += 1;
            i += 1;
        }
        missed
    }

    /// Puts output `k`'s result of `frames` frames at positions `q0..`:
    /// `data` (what the worker processed), zeros after it. Positions
    /// already filled are kept. Call [`Stream::mark`] after every output.
    pub fn put(&mut self, k: usize, q0: u64, frames: usize, data: &[f32]) {
        let hi = self.pos + self.cap as u64;
        for i in 0..frames {
            let q = q0 + i as u64;
            if q < self.filled || q >= hi {
                continue;
            }
            self.queue[k * self.cap + (q % self.cap as u64) as usize] =
                data.get(i).copied().unwrap_or(0.0);
        }
        if self.late == Late::Repeat {
            let n = frames.min(self.max_block);
            let row = &mut self.last[k * self.max_block..(k + 1) * self.max_block];
            for (i, x) in row[..n].iter_mut().enumerate() {
                *x = data.get(i).copied().unwrap_or(0.0);
            }
            self.last_len = n;
        }
    }

    /// Positions before `to` are filled (after [`Stream::put`]).
    pub fn mark(&mut self, to: u64) {
        self.filled = self.filled.max(to.min(self.pos + self.cap as u64));
    }

    /// Copies output `k`'s next `dst.len()` frames (call
    /// [`Stream::fill_to`] up to them first).
    pub fn output(&self, k: usize, dst: &mut [f32]) {
        let ring = &self.queue[k * self.cap..(k + 1) * self.cap];
        for (i, d) in dst.iter_mut().enumerate() {
            *d = ring[((self.pos + i as u64) % self.cap as u64) as usize];
        }
    }

    /// The stream position of the next input frame.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// The current `c` frames are done.
    pub fn advance(&mut self, c: usize) {
        self.pos += c as u64;
        self.filled = self.filled.max(self.pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stateful "remote plugin": a one-pole filter over the whole stream,
    /// so a frame out of place or processed twice shows.
    struct Plugin(f32);
    impl Plugin {
        fn run(&mut self, x: &[f32]) -> Vec<f32> {
            x.iter()
                .map(|&v| {
                    self.0 = 0.5 * self.0 + v;
                    self.0
                })
                .collect()
        }
    }

    /// What the worker and the link do: exchange k delivers exchange k − w.
    /// `late(k)`: exchange k's result never comes.
    fn render(
        window: u8,
        max_block: usize,
        runs: &[usize],
        late: Late,
        is_late: impl Fn(u64) -> bool,
    ) -> (Vec<f32>, Vec<f32>, u64, u64) {
        let total: usize = runs.iter().sum();
        let input: Vec<f32> = (0..total).map(|i| ((i * 7919) % 1000) as f32).collect();
        let mut s = Stream::new(1, 1, window, max_block, late);
        let mut plugin = Plugin(0.0);
        let mut results: Vec<Vec<f32>> = Vec::new();
        let mut out = vec![0.0; total];
        let (mut t, mut seq, mut missed) = (0usize, 0u64, 0u64);
        for &n in runs {
            let b = s.start(n);
            let mut off = 0;
            while off < n {
                let c = (n - off).min(b);
                let x = &input[t + off..t + off + c];
                s.input(0, c, Some(x));
                s.sent(seq, c);
                results.push(plugin.run(x));
                if let Some(due) = seq.checked_sub(u64::from(window)) {
                    if !is_late(due) {
                        let (q0, r) = s.result_range(due).unwrap();
                        missed += s.fill_to(q0);
                        s.put(0, q0, r, &results[due as usize]);
                        s.mark(q0 + r as u64);
                    }
                }
                missed += s.fill_to(s.pos() + c as u64);
                s.output(0, &mut out[t + off..t + off + c]);
                s.advance(c);
                seq += 1;
                off += c;
            }
            t += n;
        }
        let want = Plugin(0.0).run(&input);
        (out, want, s.latency().unwrap(), missed)
    }

    #[test]
    fn any_run_sizes_give_the_plugin_output_delayed_by_a_constant_latency() {
        for (window, max_block, runs) in [
            // sox: 8192-frame buffers split in two, a short last one, then
            // `-l`'s drain of `latency` frames (96 000 frames, issue 28).
            (1u8, 4096usize, [vec![8192; 11], vec![5888, 4096]].concat()),
            (2, 4096, [vec![8192; 5], vec![6145, 8192]].concat()),
            // applyplugin: 2048, short last block.
            (1, 4096, [vec![2048; 23], vec![896]].concat()),
            // max_block not dividing the run; runs shorter than the first.
            (2, 3000, vec![8192, 8192, 1, 5000, 17, 8192, 2999]),
            // lv2apply: one frame per run.
            (1, 4096, vec![1; 300]),
            // A file shorter than one block.
            (1, 4096, vec![1000, 1000]),
            (0, 4096, vec![8192, 100, 4097, 1]),
        ] {
            let (got, want, l, missed) = render(window, max_block, &runs, Late::Dry, |_| false);
            let first = runs[0].min(max_block) as u64;
            assert_eq!(
                l,
                u64::from(window) * first,
                "{window} {max_block} {runs:?}"
            );
            let l = l as usize;
            assert!(
                got[..l].iter().all(|&v| v == 0.0),
                "zeros before the stream"
            );
            assert_eq!(
                &got[l..],
                &want[..want.len() - l],
                "{window} {max_block} {runs:?}"
            );
            assert_eq!(missed, 0, "every frame processed");
        }
    }

    #[test]
    fn a_late_result_is_filled_aligned_and_counted() {
        let runs = vec![256; 8];
        let (got, want, l, missed) = render(1, 4096, &runs, Late::Dry, |due| due == 3);
        assert_eq!((l, missed), (256, 256));
        let input: Vec<f32> = (0..2048).map(|i| ((i * 7919) % 1000) as f32).collect();
        // Exchange 3's frames (768..1024) land at 1024..1280: the dry input, delayed by L.
        assert_eq!(&got[1024..1280], &input[768..1024]);
        assert_eq!(&got[256..1024], &want[..768]);
        assert_eq!(&got[1280..], &want[1024..2048 - 256]);
        let (got, _, _, missed) = render(1, 4096, &runs, Late::Zeros, |due| due == 3);
        assert_eq!(missed, 256);
        assert!(got[1024..1280].iter().all(|&v| v == 0.0));
        let (got, want, _, _) = render(0, 4096, &runs, Late::Repeat, |due| due == 3);
        assert_eq!(&got[768..1024], &want[512..768], "the last result again");
    }

    #[test]
    fn runs_take_no_allocation() {
        let mut s = Stream::new(2, 2, 2, 512, Late::Repeat);
        let x = [0.5f32; 512];
        let mut y = [0.0f32; 512];
        assert_no_alloc::assert_no_alloc(|| {
            let b = s.start(512);
            for seq in 0..10u64 {
                s.input(0, b, Some(&x));
                s.input(1, b, None);
                s.sent(seq, b);
                if let Some((q0, r)) = seq.checked_sub(2).and_then(|d| s.result_range(d)) {
                    s.fill_to(q0);
                    s.put(0, q0, r, &x);
                    s.put(1, q0, r, &x[..r / 2]);
                    s.mark(q0 + r as u64);
                }
                s.fill_to(s.pos() + b as u64);
                s.output(0, &mut y);
                s.advance(b);
            }
        });
        assert_eq!(y, x, "delivered after the two priming exchanges");
    }
}

//! The body of the `control` fuzz target (fuzz_targets/control.rs), kept in
//! a file of its own so that the stable corpus replay
//! (crates/net/tests/net/fuzz_corpus.rs, part of `./test.sh`) compiles and
//! runs exactly the code the fuzzer runs: both include it by `#[path]`.
//!
//! What a worker does with the lines a peer sends before and after
//! authentication. The input is cut into lines at `\n`; the first byte picks
//! the key (none or a fixed one) and the nonces. Each line goes through the
//! master and worker greeting parsers, the message splitter, the MAC check
//! and the request parser with its range checks
//! ([`firmtime_net::control::parse_request`]). Checked for every input: no
//! panic; a MAC check without a key always passes; a request the parser
//! accepts is in range (its setup validates again and serializes back to
//! JSON that parses to the same request).

use firmtime_net::control::{
    mac_input, message_mac_ok, parse_master_greeting, parse_request, parse_worker_greeting,
    split_message, Request, Role,
};
use firmtime_net::Key;

/// The key of inputs whose first byte is odd.
pub const KEY: &[u8; 32] = b"firmtime-net fuzz key, 32 bytes.";

/// What one input exercised (the replay asserts that its corpus reaches
/// each path; the fuzzer ignores it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Greeting lines parsed (master's or worker's).
    pub greetings: u64,
    /// Messages whose MAC checked out under a key.
    pub keyed_macs_ok: u64,
    /// Requests the parser accepted.
    pub requests: u64,
    /// Requests it refused.
    pub refused: u64,
}

/// The (worker, master) nonces for selector byte `sel`.
pub fn nonces_of(sel: u8) -> ([u8; 32], [u8; 32]) {
    ([sel; 32], [sel ^ 0xff; 32])
}

/// Runs one fuzz input through the checks above; panics when one fails.
pub fn check(data: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let Some((&sel, rest)) = data.split_first() else {
        return seen;
    };
    let key = (sel & 1 == 1).then(|| Key::new(KEY).unwrap());
    let nonces = nonces_of(sel);
    for (n, line) in rest.split(|&b| b == b'\n').enumerate() {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if parse_master_greeting(line).is_some() || parse_worker_greeting(line).is_some() {
            seen.greetings += 1;
        }
        let Some((tag, json)) = split_message(line) else {
            continue;
        };
        let input = mac_input(
            Role::Master,
            &nonces.0,
            &nonces.1,
            n as u64,
            json.as_bytes(),
        );
        let ok = message_mac_ok(key.as_ref(), tag, &input);
        if key.is_none() {
            assert!(ok);
        } else if ok {
            seen.keyed_macs_ok += 1;
        }
        match parse_request(json) {
            Ok(req) => {
                seen.requests += 1;
                if let Request::Setup(s) = &req {
                    s.validate().unwrap();
                }
                let again = serde_json::to_string(&req).unwrap();
                assert_eq!(parse_request(&again).unwrap(), req);
            }
            Err(_) => seen.refused += 1,
        }
    }
    seen
}

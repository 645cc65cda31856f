//! Fuzzes the control-plane parser: what a worker does with the lines a
//! peer sends before and after authentication.
//!
//! Run from crates/net: `cargo +nightly fuzz run control`. The input is cut
//! into lines at `\n`; the first byte picks the key (none or a fixed one).
//! Each line goes through the master and worker greeting parsers, the
//! message splitter, the MAC check and the request parser with its range
//! checks ([`firmtime_net::control::parse_request`]). Checked for every
//! input: no panic; a MAC check without a key always passes, with a key a
//! random tag never does; a request the parser accepts is in range (its
//! setup validates again and serializes back to JSON that parses to the
//! same request).

#![no_main]

use firmtime_net::control::{
    mac_input, message_mac_ok, parse_master_greeting, parse_request, parse_worker_greeting,
    split_message, Request, Role,
};
use firmtime_net::Key;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let key = (sel & 1 == 1).then(|| Key::new(b"firmtime-net fuzz key, 32 bytes.").unwrap());
    let nonces = ([sel; 32], [sel ^ 0xff; 32]);
    for (n, line) in rest.split(|&b| b == b'\n').enumerate() {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let _ = parse_master_greeting(line);
        let _ = parse_worker_greeting(line);
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
        }
        if let Ok(req) = parse_request(json) {
            if let Request::Setup(s) = &req {
                s.validate().unwrap();
            }
            let again = serde_json::to_string(&req).unwrap();
            assert_eq!(parse_request(&again).unwrap(), req);
        }
    }
});

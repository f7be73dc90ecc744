//! Parse arbitrary bytes as a stream of SPOP frames: errors, never panics,
//! never reads past the buffer. Every frame the decoder accepts is
//! re-encoded from its decoded values with the encoder, and the result
//! decodes to the same values (decoder and encoder agree); a frame that
//! used only canonical type bytes re-encodes to its very bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_agent::spop::data::Value;
use rctl_agent::spop::frame::{parse, Body, Encoder, Frame, Limits, Parsed};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let mut at = 0;
    while at < data.len() {
        match parse(&data[at..], &limits) {
            Ok(Parsed::Frame(f, used)) => {
                assert!(used >= 4 + 7 && at + used <= data.len());
                check(&f, &data[at..at + used], &limits);
                at += used;
            }
            Ok(Parsed::Incomplete { needed }) => {
                assert!(needed > 0);
                break;
            }
            Err(e) => {
                // Offsets point inside the frame.
                if let Some(o) = e.offset() {
                    assert!(o < data.len() - at, "offset {o} past the frame");
                }
                let _ = e.status();
                break;
            }
        }
    }
});

/// Everything a frame says, owned, for comparison.
type Items = Vec<(Vec<u8>, String)>;

fn items(f: &Frame<'_>) -> Items {
    let show = |v: Value<'_>| format!("{v:?}");
    match &f.body {
        Body::Kv(kv) => kv.iter().map(|(k, v)| (k.to_vec(), show(v))).collect(),
        Body::Messages(m) => m
            .iter()
            .flat_map(|msg| {
                let head = (msg.name.to_vec(), format!("message/{}", msg.args.len()));
                std::iter::once(head).chain(msg.args.iter().map(|(k, v)| (k.to_vec(), show(v))).collect::<Vec<_>>())
            })
            .collect(),
        Body::Actions(a) => a.iter().map(|a| (Vec::new(), format!("{a:?}"))).collect(),
    }
}

fn check(f: &Frame<'_>, bytes: &[u8], limits: &Limits) {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, f.frame_type, f.stream_id, f.frame_id);
    match &f.body {
        Body::Kv(kv) => {
            for (k, v) in kv.iter() {
                e.kv(k, v);
            }
        }
        Body::Messages(m) => {
            for msg in m.iter() {
                let args: Vec<_> = msg.args.iter().collect();
                e.message(msg.name, &args);
            }
        }
        Body::Actions(a) => {
            for act in a.iter() {
                e.action(&act);
            }
        }
    }
    e.finish();
    let Ok(Parsed::Frame(again, used)) = parse(&out, &Limits { max_frame_size: u32::MAX, ..limits.clone() }) else {
        panic!("a re-encoded frame does not parse");
    };
    assert_eq!(used, out.len());
    assert_eq!((again.frame_type, again.stream_id, again.frame_id), (f.frame_type, f.stream_id, f.frame_id));
    assert_eq!(items(&again), items(f), "decoder and encoder disagree");
    // Same length; the only differences allowed are the flags field
    // (re-encoded as FIN) and flag bits of type bytes, which the decoder
    // drops as HAProxy does (a boolean keeps its value bit).
    assert_eq!(out.len(), bytes.len(), "a re-encoding changed the length");
    for (i, (&a, &b)) in bytes.iter().zip(&out).enumerate() {
        let flags = (5..9).contains(&i);
        let type_flag = a & 0x0F == b & 0x0F && b >> 4 <= 1;
        assert!(a == b || flags || type_flag, "byte {i}: {a:#04x} re-encoded as {b:#04x}");
    }
}

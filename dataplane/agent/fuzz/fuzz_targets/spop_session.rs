//! Play arbitrary bytes as HAProxy's side of a whole connection (in
//! memory, against a small ruleset): the agent never panics or hangs, and
//! everything it writes is a sequence of valid frames: an AGENT-HELLO
//! first if anything, then ACKs that fit the negotiated frame size, and at
//! most one AGENT-DISCONNECT, last.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_agent::judge::{Generation, Judge, NoObserver};
use rctl_agent::spop::frame::{parse, FrameType, Limits, Parsed};
use rctl_agent::spop::{serve_connection, Config};
use rctl_dataplane::{Engine, EngineConfig};
use std::sync::{Arc, OnceLock};
use tokio::io::AsyncReadExt;

const RULES: &str = r#"
rule bots { when header("user-agent") starts_with "bot/" deny 403 "no bots" }
rule watch { when path starts_with "/w" log }
rule slow { when path == "/s" throttle 1 requests per 1m by ip }
"#;

fn judge() -> Arc<Judge> {
    static J: OnceLock<Arc<Judge>> = OnceLock::new();
    J.get_or_init(|| {
        let rs = rctl_compiler::compile_str("f.rctl", RULES, &Default::default()).ruleset.unwrap();
        let engine = Engine::new(rs, &EngineConfig::default()).unwrap();
        let g = Generation { engine, sha256: String::new(), number: 1, installed_unix: 0 };
        Arc::new(Judge::new(g, false))
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let out = rt.block_on(async {
        let (input, agent_in) = tokio::io::duplex(data.len() + 1);
        let (agent_out, mut output) = tokio::io::duplex(1 << 22);
        let mut input = input;
        tokio::io::AsyncWriteExt::write_all(&mut input, data).await.unwrap();
        drop(input); // end of stream after the data
        let config = Config::default();
        serve_connection(agent_in, agent_out, "fuzz", judge(), Arc::new(NoObserver), config).await;
        let mut out = Vec::new();
        output.read_to_end(&mut out).await.unwrap();
        out
    });
    let mut limits = Limits::default();
    let mut at = 0;
    let mut n = 0;
    let mut ended = false;
    while at < out.len() {
        assert!(!ended, "frames after AGENT-DISCONNECT");
        let Ok(Parsed::Frame(f, used)) = parse(&out[at..], &limits) else {
            panic!("the agent wrote an invalid or oversized frame at byte {at}");
        };
        match f.frame_type {
            FrameType::AgentHello => {
                assert_eq!(n, 0, "AGENT-HELLO not first");
                let size = f.kv().unwrap().get(b"max-frame-size").and_then(|v| v.as_u64()).unwrap();
                assert!((256..=65_532).contains(&size));
                limits.max_frame_size = size as u32;
            }
            FrameType::Ack => assert!(n > 0, "ACK before AGENT-HELLO"),
            FrameType::AgentDisconnect => ended = true,
            t => panic!("the agent wrote {t:?}"),
        }
        at += used;
        n += 1;
    }
});

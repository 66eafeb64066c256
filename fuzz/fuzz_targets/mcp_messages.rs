//! MCP at the door: a run's POST body and a server's answer, JSON or an SSE
//! stream cut anywhere. Nothing panics; a body judged is sent on as valid
//! JSON-RPC the door reads back the same way; no tool the rules deny is
//! left in a narrowed answer.
#![no_main]

use gatehouse_mcp::{SseFilter, ToolRules, filter_json, judge, parse_post};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rules = ToolRules { allow: None, deny: vec!["rm".into()] };
    if let Ok(body) = parse_post(data) {
        let judged = judge(body, &rules);
        if let Some(forward) = judged.forward_body() {
            let again = parse_post(&forward).expect("what is sent on reads back");
            for m in again.messages() {
                assert_ne!(m.tool_call(), Some(Ok("rm")), "a denied call was sent on");
            }
        }
    }
    if let Ok(out) = filter_json(data, &rules, &[]) {
        if out != data {
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains(r#"{"name":"rm""#), "a denied tool left in a narrowed answer");
        }
    }
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut filter = SseFilter::new(rules, &[]);
    let _ = filter.push(&data[..cut]).and_then(|_| filter.push(&data[cut..]));
    let _ = filter.finish();
});

//! The server's answer on its way back to the run: every `tools/list`
//! result narrowed to the tools the run may call (so an agent is never
//! offered a tool it would be refused), and gatehouse's own answers for the
//! calls it refused put beside the server's.
//!
//! A result is recognized by its shape, not by the id of the request that
//! asked for it: any JSON-RPC response whose `result.tools` is an array is
//! narrowed, on a `POST`'s answer, a `GET` stream or a resumed one alike, so
//! no stream a client can open carries an unfiltered list. An entry
//! without a string `name` is dropped. Answers are read strictly too: a
//! `tools` list written twice in one object (which a client might read as
//! the second) is refused, not narrowed.

use serde_json::Value;

use crate::message::Invalid;
use crate::servers::ToolRules;

/// The longest SSE event kept whole to be read (a `tools/list` result of
/// thousands of tools fits many times over).
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// Narrows the `tools/list` results among `messages` (one message or a
/// batch of them); whether anything was removed.
fn narrow(messages: &mut Value, rules: &ToolRules) -> bool {
    match messages {
        Value::Array(items) => items.iter_mut().fold(false, |changed, m| narrow(m, rules) | changed),
        Value::Object(message) => {
            let Some(tools) =
                message.get_mut("result").and_then(|r| r.get_mut("tools")).and_then(Value::as_array_mut)
            else {
                return false;
            };
            let before = tools.len();
            tools.retain(|t| t.get("name").and_then(Value::as_str).is_some_and(|name| rules.permits(name)));
            tools.len() != before
        }
        _ => false,
    }
}

/// Reads an answer's JSON strictly; `Ok(None)` when it is not JSON at all
/// (nothing a client could read a tool from either).
fn read_strict(bytes: &[u8]) -> Result<Option<Value>, Invalid> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
        return Ok(None);
    }
    gatehouse_capability::canonical::parse_strict(bytes)
        .map(Some)
        .map_err(|_| Invalid("an answer with duplicate keys"))
}

/// A server's `application/json` answer, narrowed, with `extra` (the
/// refused calls' errors) added: the answer becomes (or stays) an array
/// when there is anything to add. Unchanged bytes are returned as they came.
pub fn filter_json(body: &[u8], rules: &ToolRules, extra: &[Value]) -> Result<Vec<u8>, Invalid> {
    let Some(mut answer) = read_strict(body)? else {
        return if extra.is_empty() { Ok(body.to_vec()) } else { Err(Invalid("an answer that is not JSON")) };
    };
    let narrowed = narrow(&mut answer, rules);
    if !narrowed && extra.is_empty() {
        return Ok(body.to_vec());
    }
    if !extra.is_empty() {
        let mut items = match answer {
            Value::Array(items) => items,
            single => vec![single],
        };
        items.extend(extra.iter().cloned());
        answer = Value::Array(items);
    }
    serde_json::to_vec(&answer).map_err(|_| Invalid("an answer that cannot be written back"))
}

/// One JSON-RPC message as an SSE event of its own.
fn event_of(message: &Value) -> Vec<u8> {
    format!("event: message\ndata: {message}\n\n").into_bytes()
}

/// A server's `text/event-stream` answer, read event by event as it
/// arrives: an event whose data is a message with a `tools/list` result is
/// written again, narrowed; every other event goes on byte for byte. The
/// refused calls' errors go first, each as an event of its own.
#[derive(Debug)]
pub struct SseFilter {
    rules: ToolRules,
    /// Bytes of the event being read.
    pending: Vec<u8>,
    /// Where the next unread line of `pending` starts.
    line_start: usize,
    /// The refused calls' errors, as events, until they are passed on.
    prefix: Vec<u8>,
}

impl SseFilter {
    /// A filter for one stream, with the errors to put first.
    pub fn new(rules: ToolRules, extra: &[Value]) -> Self {
        let prefix = extra.iter().flat_map(event_of).collect();
        Self { rules, pending: Vec::new(), line_start: 0, prefix }
    }

    /// What to pass on before any of the server's bytes (the refused calls'
    /// errors), once.
    pub fn start(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.prefix)
    }

    /// Takes the next bytes of the stream; returns what can be passed on
    /// now (whole events only).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Invalid> {
        let mut out = self.start();
        self.pending.extend_from_slice(chunk);
        while let Some((line_end, next)) = next_line(&self.pending, self.line_start) {
            let empty = line_end == self.line_start;
            self.line_start = next;
            if empty {
                let event: Vec<u8> = self.pending.drain(..next).collect();
                self.line_start = 0;
                out.extend(self.rewrite(&event)?);
            }
        }
        if self.pending.len() > MAX_EVENT_BYTES {
            return Err(Invalid("an event larger than 16 MiB"));
        }
        Ok(out)
    }

    /// The stream ended: a CR the last bytes ended with is a line end after
    /// all (an LF added to it makes one CRLF, never a line more). An
    /// unfinished event is dropped, as an SSE client drops it.
    pub fn finish(mut self) -> Result<Vec<u8>, Invalid> {
        if self.pending.ends_with(b"\r") { self.push(b"\n") } else { Ok(self.start()) }
    }

    /// One whole event (its lines and the blank line ending it).
    fn rewrite(&self, event: &[u8]) -> Result<Vec<u8>, Invalid> {
        let mut data: Option<Vec<u8>> = None;
        let mut data_lines = 0usize;
        let mut other_lines: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        while let Some((end, next)) = next_line(event, at) {
            let line = &event[at..end];
            at = next;
            if line.is_empty() {
                break;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
            if field == b"data" {
                // Data lines join with a newline between them (the SSE
                // grammar), which in JSON is whitespace.
                let joined = data.get_or_insert_with(Vec::new);
                if data_lines > 0 {
                    joined.push(b'\n');
                }
                joined.extend_from_slice(value);
                data_lines += 1;
            } else {
                other_lines.push(line);
            }
        }
        let Some(data) = data else { return Ok(event.to_vec()) };
        let Some(mut message) = read_strict(&data)? else { return Ok(event.to_vec()) };
        if !narrow(&mut message, &self.rules) {
            return Ok(event.to_vec());
        }
        let mut out = Vec::with_capacity(event.len());
        for line in other_lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"data: ");
        out.extend(
            serde_json::to_vec(&message).map_err(|_| Invalid("an event that cannot be written back"))?,
        );
        out.extend_from_slice(b"\n\n");
        Ok(out)
    }
}

/// The line starting at `from`: where it ends and where the next begins.
/// Lines end with CRLF, LF or CR (the SSE grammar); a CR at the very end of
/// what has arrived waits for the next byte, which may be its LF.
fn next_line(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let rest = bytes.get(from..)?;
    let at = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
    let end = from + at;
    match (bytes[end], bytes.get(end + 1)) {
        (b'\r', Some(b'\n')) => Some((end, end + 2)),
        (b'\r', None) => None,
        _ => Some((end, end + 1)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules() -> ToolRules {
        ToolRules { allow: Some(vec!["echo".into(), "big".into()]), deny: vec![] }
    }

    fn tools_list(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "echo", "inputSchema": {}}, {"name": "rm", "inputSchema": {}}, {"name": "big"}, {"title": "no name"}]}})
    }

    fn names(message: &Value) -> Vec<&str> {
        message["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
    }

    #[test]
    fn a_json_answer_lists_only_the_tools_the_run_may_call() {
        let out = filter_json(tools_list(1).to_string().as_bytes(), &rules(), &[]).unwrap();
        assert_eq!(names(&serde_json::from_slice(&out).unwrap()), ["echo", "big"]);
        // A batch's answers, and gatehouse's errors added.
        let error = json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32003}});
        let out = filter_json(
            json!([tools_list(1), {"jsonrpc": "2.0", "id": 2, "result": {}}]).to_string().as_bytes(),
            &rules(),
            std::slice::from_ref(&error),
        )
        .unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(names(&out[0]), ["echo", "big"]);
        assert_eq!(out[2], error);
        // Nothing to change: the bytes as they came.
        let other = br#"{"jsonrpc":"2.0", "id":3, "result":{"content":[]}}"#;
        assert_eq!(filter_json(other, &rules(), &[]).unwrap(), other);
        // A list written twice is refused, not narrowed.
        let twice = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[{"name":"rm"}]}}"#;
        assert!(filter_json(twice, &rules(), &[]).is_err());
    }

    fn sse(events: &[(&str, &Value)]) -> String {
        events.iter().map(|(id, m)| format!("id: {id}\nevent: message\ndata: {m}\n\n")).collect()
    }

    #[test]
    fn a_stream_is_narrowed_event_by_event_whatever_the_chunking() {
        let other = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}});
        let stream = format!(": a comment\n\n{}", sse(&[("1", &other), ("2", &tools_list(4))]));
        let error = json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32003}});
        for chunk in [1, 2, 3, 7, 64, stream.len()] {
            let mut filter = SseFilter::new(rules(), std::slice::from_ref(&error));
            let mut out = filter.start();
            for piece in stream.as_bytes().chunks(chunk) {
                out.extend(filter.push(piece).unwrap());
            }
            out.extend(filter.finish().unwrap());
            let text = String::from_utf8(out).unwrap();
            let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
            assert_eq!(events.len(), 4, "{text}");
            assert_eq!(events[0], format!("event: message\ndata: {error}"));
            assert_eq!(events[1], ": a comment");
            assert_eq!(events[2], format!("id: 1\nevent: message\ndata: {other}"), "untouched");
            let (head, data) = events[3].split_once("data: ").unwrap();
            assert_eq!(head, "id: 2\nevent: message\n");
            assert_eq!(names(&serde_json::from_str(data).unwrap()), ["echo", "big"], "chunks of {chunk}");
        }
    }

    #[test]
    fn every_line_ending_and_multi_line_data_is_read() {
        let list = tools_list(1).to_string();
        // Split between two tokens: the newline joining the lines is then
        // JSON whitespace.
        let (a, b) = list.split_at(list.find(',').unwrap());
        for ending in ["\n", "\r\n", "\r"] {
            let stream = format!("id: 7{ending}data: {a}{ending}data:{b}{ending}{ending}");
            let mut filter = SseFilter::new(rules(), &[]);
            let mut out = Vec::new();
            for byte in stream.as_bytes() {
                out.extend(filter.push(std::slice::from_ref(byte)).unwrap());
            }
            out.extend(filter.finish().unwrap());
            let text = String::from_utf8(out).unwrap();
            let data = text.split_once("data: ").unwrap().1.trim_end();
            // The two data lines joined with a newline: JSON whitespace.
            assert_eq!(names(&serde_json::from_str(data).unwrap()), ["echo", "big"], "{ending:?}");
            assert!(text.starts_with("id: 7\n"));
        }
    }

    #[test]
    fn an_unfinished_event_is_dropped_and_an_endless_one_refused() {
        let mut filter = SseFilter::new(rules(), &[]);
        assert!(filter.push(format!("data: {}", tools_list(1)).as_bytes()).unwrap().is_empty());
        assert!(filter.finish().unwrap().is_empty());
        let mut filter = SseFilter::new(rules(), &[]);
        let line = vec![b'x'; 1 << 20];
        let mut refused = false;
        for _ in 0..17 {
            refused |= filter.push(&line).is_err();
        }
        assert!(refused, "an event that never ends is refused past 16 MiB");
    }

    proptest::proptest! {
        #[test]
        fn no_stream_panics_and_untouched_events_pass_byte_for_byte(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            cut in 0usize..512,
        ) {
            let mut filter = SseFilter::new(rules(), &[]);
            let cut = cut.min(bytes.len());
            let _ = filter.push(&bytes[..cut]);
            let _ = filter.push(&bytes[cut..]);
            let _ = filter.finish();
            let _ = filter_json(&bytes, &rules(), &[]);
        }
    }
}

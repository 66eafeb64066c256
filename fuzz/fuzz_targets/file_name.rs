//! File names and object paths on arbitrary input: never panic; an accepted
//! name holds no separator, control or bidirectional formatting character
//! and is at most 255 bytes; a path read back from a store listing is one
//! gatehouse makes (three segments, no dot segment) and prints as it was
//! read.
#![no_main]

use gatehouse_files::{ObjectPath, check_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if check_name(&text).is_ok() {
        assert!(!text.is_empty() && text.len() <= 255);
        assert!(!text.contains(['/', '\\']) && !text.chars().any(char::is_control));
        assert!(!text.bytes().all(|b| b == b'.'));
        assert_eq!(text.trim(), text);
    }
    if let Some(path) = ObjectPath::parse(&text) {
        assert_eq!(path.to_string(), text);
        assert!(text.split('/').all(|segment| !segment.is_empty() && segment != "." && segment != ".."));
        assert_eq!(ObjectPath::new(path.namespace(), path.file_id()).as_ref(), Ok(&path));
    }
    // Any split of the input into a session key and a file id either is
    // refused or makes a three-segment path.
    let middle = (0..=text.len()).find(|i| *i >= text.len() / 2 && text.is_char_boundary(*i)).unwrap_or(0);
    let (key, id) = text.split_at(middle);
    if let Ok(path) = ObjectPath::new(key, id) {
        assert_eq!(path.to_string().split('/').count(), 3);
    }
});

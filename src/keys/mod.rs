//! The blast radius of a live server's keys (`probe keys`), the pure part: what a scanned key
//! would cost the server when it is deleted, unlinked, expired, evicted, overwritten or read
//! whole ([`model`], fitted by [`fit`], its error on sizes not fitted in [`holdout`]), how fast
//! the scan may go ([`pacing`]), the report over every key scanned ([`report`]), and the worst
//! keys' shapes rebuilt to check it ([`replay`]). The scan itself (sockets, the session) is in
//! `commands/keys`.

pub mod fit;
pub mod holdout;
pub mod model;
pub mod pacing;
pub mod refit;
pub mod replay;
pub mod report;

/// A key as a person can read it and paste back: printable ASCII as is, `"` and `\` escaped,
/// every other byte as `\xNN` (redis-cli's way), so a key of binary bytes or with a newline
/// never breaks a line of the report.
pub fn escape_key(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            other => out.push_str(&format!("\\x{other:02x}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_and_unambiguous() {
        assert_eq!(escape_key(b"user:42"), "user:42");
        assert_eq!(escape_key(b"a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(escape_key(b"line\nbreak\x00\xff"), "line\\nbreak\\x00\\xff");
        assert_eq!(escape_key("é".as_bytes()), "\\xc3\\xa9");
    }
}

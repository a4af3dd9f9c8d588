//! A string: one SET from the writer's buffer (zero-copy), `GET` to read it whole. Its free
//! effort is 1 whatever its size: a server frees a string on the main thread even on `UNLINK`
//! or with every `lazyfree-lazy-*` set (`lazyfree.c`: only values whose effort exceeds 64 go to
//! the background thread), and that free is one `free()` of the whole buffer.

use super::ValueKind;

/// The string kind.
#[derive(Debug)]
pub struct StringKind;

/// The one [`StringKind`].
pub static STRING: StringKind = StringKind;

impl ValueKind for StringKind {
    fn name(&self) -> &'static str {
        "string"
    }

    fn count_command(&self) -> &'static str {
        "STRLEN"
    }

    fn build_command(&self) -> &'static str {
        "SET"
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("GET", &[])
    }

    fn build_batch(
        &self,
        key: &[u8],
        _first: u64,
        _count: u64,
        _element_bytes: usize,
        fill: &[u8],
        out: &mut Vec<u8>,
    ) -> usize {
        // Only for completeness (the writer sends a string from its buffer without copying).
        crate::workload::encode_into(out, &[b"SET", key, fill]);
        1
    }

    fn free_effort(&self, _encoding: &str, _elements: u64, _element_bytes: u64) -> u64 {
        1
    }
}

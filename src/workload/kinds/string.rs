//! A string: one SET from the writer's buffer (zero-copy), `GET` to read it whole. Its free
//! effort is 1 whatever its size: a server frees a string on the main thread even on `UNLINK`
//! or with every `lazyfree-lazy-*` set (`lazyfree.c`: only values whose effort exceeds 64 go to
//! the background thread), and that free is one `free()` of the whole buffer.

use super::{KindFacts, ValueKind};

/// The string kind.
#[derive(Debug)]
pub struct StringKind;

/// The one [`StringKind`].
pub static STRING: StringKind = StringKind;

static FACTS: KindFacts = KindFacts {
    name: "string",
    count_command: "STRLEN",
    build_command: "SET",
    read_command: ("GET", &[]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 0,
    distinct: false,
};

impl ValueKind for StringKind {
    fn facts(&self) -> &'static KindFacts {
        &FACTS
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

//! A hash: `HSET key field value ...` in batches, `HGETALL` to read it whole. An element is one
//! field and its value, each `element_bytes` long; the fields are distinct. Held in a hash table
//! (`hashtable`) past `hash-max-listpack-entries` (128) fields or a value longer than
//! `hash-max-listpack-value` (64 bytes), else in one listpack (`ziplist` before Redis 7.0).

use super::{KindFacts, ValueKind, effort_per_element, push_command_start, push_element};

/// The hash kind.
#[derive(Debug)]
pub struct HashKind;

/// The one [`HashKind`].
pub static HASH: HashKind = HashKind;

static FACTS: KindFacts = KindFacts {
    name: "hash",
    count_command: "HLEN",
    build_command: "HSET",
    read_command: ("HGETALL", &[]),
    bytes_per_element_factor: 2,
    server_overhead_per_element: 48,
    distinct: true,
};

impl ValueKind for HashKind {
    fn facts(&self) -> &'static KindFacts {
        &FACTS
    }

    fn build_batch(
        &self,
        key: &[u8],
        first: u64,
        count: u64,
        element_bytes: usize,
        fill: &[u8],
        out: &mut Vec<u8>,
    ) -> usize {
        push_command_start(out, FACTS.build_command, key, 2 * count);
        for index in first..first + count {
            push_element(out, index, element_bytes, fill);
            // The value: the same scheme from another stretch of the fill.
            push_element(out, !index, element_bytes, fill);
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["hashtable"])
    }
}

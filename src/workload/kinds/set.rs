//! A set: `SADD key member ...` in batches, `SMEMBERS` to read it whole; the members are distinct.
//! Held in a hash table (`hashtable`) past `set-max-listpack-entries` (128) members (an `intset`
//! for integers, which these members never are).

use super::{KindFacts, ValueKind, effort_per_element, push_elements_command};

/// The set kind.
#[derive(Debug)]
pub struct SetKind;

/// The one [`SetKind`].
pub static SET: SetKind = SetKind;

static FACTS: KindFacts = KindFacts {
    name: "set",
    count_command: "SCARD",
    build_command: "SADD",
    read_command: ("SMEMBERS", &[]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 40,
    distinct: true,
};

impl ValueKind for SetKind {
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
        push_elements_command(
            out,
            FACTS.build_command,
            key,
            (first, count),
            element_bytes,
            fill,
        )
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["hashtable"])
    }
}

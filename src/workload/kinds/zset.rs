//! A sorted set: `ZADD key score member ...` in batches (the score is the member's index),
//! `ZRANGE key 0 -1 WITHSCORES` to read it whole; the members are distinct. Held in a skiplist
//! (`skiplist`, with a hash table beside it) past `zset-max-listpack-entries` (128) members or a
//! member longer than `zset-max-listpack-value` (64 bytes), else in one listpack (`ziplist`
//! before Redis 7.0).

use super::{
    KindFacts, ValueKind, effort_per_element, push_bulk, push_command_start, push_element,
};

/// The sorted-set kind.
#[derive(Debug)]
pub struct ZsetKind;

/// The one [`ZsetKind`].
pub static ZSET: ZsetKind = ZsetKind;

static FACTS: KindFacts = KindFacts {
    name: "zset",
    count_command: "ZCARD",
    build_command: "ZADD",
    read_command: ("ZRANGE", &["0", "-1", "WITHSCORES"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 80,
    distinct: true,
};

impl ValueKind for ZsetKind {
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
            push_bulk(out, index.to_string().as_bytes());
            push_element(out, index, element_bytes, fill);
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["skiplist"])
    }
}

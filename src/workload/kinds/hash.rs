//! A hash: `HSET key field value ...` in batches, `HGETALL` to read it whole. An element is one
//! field and its value, each `element_bytes` long; the fields are distinct. Held in a hash table
//! (`hashtable`) past `hash-max-listpack-entries` (128) fields or a value longer than
//! `hash-max-listpack-value` (64 bytes), else in one listpack (`ziplist` before Redis 7.0).

use super::{Arg, Batch, KindFacts, effort_per_element};

/// The hash kind.
pub static HASH: KindFacts = KindFacts {
    name: "hash",
    count_command: "HLEN",
    build_command: "HSET",
    read_command: ("HGETALL", &[]),
    bytes_per_element_factor: 2,
    server_overhead_per_element: 48,
    distinct: true,
    batch: Batch::OneCommand(&[Arg::Element, Arg::Paired]),
    large_encoding: "hashtable",
    free_effort: |encoding, elements, _| effort_per_element(encoding, elements, &["hashtable"]),
};

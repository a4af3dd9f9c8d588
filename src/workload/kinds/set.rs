//! A set: `SADD key member ...` in batches, `SMEMBERS` to read it whole; the members are distinct.
//! Held in a hash table (`hashtable`) past `set-max-listpack-entries` (128) members (an `intset`
//! for integers, which these members never are).

use super::{Arg, Batch, KindFacts, effort_per_element};

/// The set kind.
pub static SET: KindFacts = KindFacts {
    name: "set",
    count_command: "SCARD",
    build_command: "SADD",
    read_command: ("SMEMBERS", &[]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 40,
    distinct: true,
    batch: Batch::OneCommand(&[Arg::Element]),
    large_encoding: "hashtable",
    free_effort: |encoding, elements, _| effort_per_element(encoding, elements, &["hashtable"]),
};

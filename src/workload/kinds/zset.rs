//! A sorted set: `ZADD key score member ...` in batches (the score is the member's index),
//! `ZRANGE key 0 -1 WITHSCORES` to read it whole; the members are distinct. Held in a skiplist
//! (`skiplist`, with a hash table beside it) past `zset-max-listpack-entries` (128) members or a
//! member longer than `zset-max-listpack-value` (64 bytes), else in one listpack (`ziplist`
//! before Redis 7.0).

use super::{Arg, Batch, KindFacts, effort_per_element};

/// The sorted-set kind.
pub static ZSET: KindFacts = KindFacts {
    name: "zset",
    count_command: "ZCARD",
    build_command: "ZADD",
    read_command: ("ZRANGE", &["0", "-1", "WITHSCORES"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 80,
    distinct: true,
    batch: Batch::OneCommand(&[Arg::Index, Arg::Element]),
    large_encoding: "skiplist",
    free_effort: |encoding, elements, _| effort_per_element(encoding, elements, &["skiplist"]),
};

//! A sorted set: `ZADD key score member ...` in batches (the score is the member's index),
//! `ZRANGE key 0 -1 WITHSCORES` to read it whole; the members are distinct. Held in a skiplist
//! (`skiplist`, with a hash table beside it) past `zset-max-listpack-entries` (128) members or a
//! member longer than `zset-max-listpack-value` (64 bytes), else in one listpack (`ziplist`
//! before Redis 7.0).

use super::hash::push_bulk;
use super::{ValueKind, check_distinct, effort_per_element};
use crate::error::UsageError;
use crate::workload::element_bytes_into;

/// The sorted-set kind.
#[derive(Debug)]
pub struct ZsetKind;

/// The one [`ZsetKind`].
pub static ZSET: ZsetKind = ZsetKind;

impl ValueKind for ZsetKind {
    fn name(&self) -> &'static str {
        "zset"
    }

    fn count_command(&self) -> &'static str {
        "ZCARD"
    }

    fn build_command(&self) -> &'static str {
        "ZADD"
    }

    fn server_overhead_per_element(&self) -> u64 {
        80
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("ZRANGE", &["0", "-1", "WITHSCORES"])
    }

    fn check_elements(&self, elements: u64, element_bytes: u64) -> Result<(), UsageError> {
        check_distinct("zset", elements, element_bytes)
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
        out.extend_from_slice(format!("*{}\r\n$4\r\nZADD\r\n", 2 + 2 * count).as_bytes());
        push_bulk(out, key);
        for index in first..first + count {
            push_bulk(out, index.to_string().as_bytes());
            out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
            element_bytes_into(index, element_bytes, fill, out);
            out.extend_from_slice(b"\r\n");
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["skiplist"])
    }
}

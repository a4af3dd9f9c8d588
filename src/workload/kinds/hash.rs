//! A hash: `HSET key field value ...` in batches, `HGETALL` to read it whole. An element is one
//! field and its value, each `element_bytes` long; the fields are distinct. Held in a hash table
//! (`hashtable`) past `hash-max-listpack-entries` (128) fields or a value longer than
//! `hash-max-listpack-value` (64 bytes), else in one listpack (`ziplist` before Redis 7.0).

use super::{ValueKind, check_distinct, effort_per_element};
use crate::error::UsageError;
use crate::workload::element_bytes_into;

/// The hash kind.
#[derive(Debug)]
pub struct HashKind;

/// The one [`HashKind`].
pub static HASH: HashKind = HashKind;

impl ValueKind for HashKind {
    fn name(&self) -> &'static str {
        "hash"
    }

    fn count_command(&self) -> &'static str {
        "HLEN"
    }

    fn build_command(&self) -> &'static str {
        "HSET"
    }

    fn server_overhead_per_element(&self) -> u64 {
        48
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("HGETALL", &[])
    }

    fn bytes_per_element_factor(&self) -> u64 {
        2
    }

    fn check_elements(&self, elements: u64, element_bytes: u64) -> Result<(), UsageError> {
        check_distinct("hash", elements, element_bytes)
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
        out.extend_from_slice(format!("*{}\r\n$4\r\nHSET\r\n", 2 + 2 * count).as_bytes());
        push_bulk(out, key);
        for index in first..first + count {
            out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
            element_bytes_into(index, element_bytes, fill, out);
            out.extend_from_slice(format!("\r\n${element_bytes}\r\n").as_bytes());
            // The value: the same scheme from another stretch of the fill.
            element_bytes_into(!index, element_bytes, fill, out);
            out.extend_from_slice(b"\r\n");
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["hashtable"])
    }
}

/// Appends one bulk string.
pub(crate) fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

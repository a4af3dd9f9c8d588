//! A set: `SADD key member ...` in batches, `SMEMBERS` to read it whole; the members are distinct.
//! Held in a hash table (`hashtable`) past `set-max-listpack-entries` (128) members (an `intset`
//! for integers, which these members never are).

use super::hash::push_bulk;
use super::{ValueKind, check_distinct, effort_per_element};
use crate::error::UsageError;
use crate::workload::element_bytes_into;

/// The set kind.
#[derive(Debug)]
pub struct SetKind;

/// The one [`SetKind`].
pub static SET: SetKind = SetKind;

impl ValueKind for SetKind {
    fn name(&self) -> &'static str {
        "set"
    }

    fn count_command(&self) -> &'static str {
        "SCARD"
    }

    fn build_command(&self) -> &'static str {
        "SADD"
    }

    fn server_overhead_per_element(&self) -> u64 {
        40
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("SMEMBERS", &[])
    }

    fn check_elements(&self, elements: u64, element_bytes: u64) -> Result<(), UsageError> {
        check_distinct("set", elements, element_bytes)
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
        out.extend_from_slice(format!("*{}\r\n$4\r\nSADD\r\n", 2 + count).as_bytes());
        push_bulk(out, key);
        for index in first..first + count {
            out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
            element_bytes_into(index, element_bytes, fill, out);
            out.extend_from_slice(b"\r\n");
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, _element_bytes: u64) -> u64 {
        effort_per_element(encoding, elements, &["hashtable"])
    }
}

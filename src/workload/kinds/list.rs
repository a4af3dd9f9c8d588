//! A list: `RPUSH key element ...` in batches, `LRANGE key 0 -1` to read it whole. Held in a
//! quicklist (`quicklist`: a linked list of listpacks of up to 8 KiB each at the default
//! `list-max-listpack-size -2`), or in one listpack (`listpack`, Redis 7.2 and later) while
//! small. Its free effort is the quicklist's node count, not its elements: a list of 2M 16-byte
//! elements is a few thousand nodes, which is why its DEL is fast.

use super::ValueKind;
use super::hash::push_bulk;
use crate::workload::element_bytes_into;

/// The list kind.
#[derive(Debug)]
pub struct ListKind;

/// The one [`ListKind`].
pub static LIST: ListKind = ListKind;

/// Bytes of one quicklist node at the default `list-max-listpack-size -2`.
const QUICKLIST_NODE_BYTES: u64 = 8 * 1024;

impl ValueKind for ListKind {
    fn name(&self) -> &'static str {
        "list"
    }

    fn count_command(&self) -> &'static str {
        "LLEN"
    }

    fn build_command(&self) -> &'static str {
        "RPUSH"
    }

    fn server_overhead_per_element(&self) -> u64 {
        4
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("LRANGE", &["0", "-1"])
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
        out.extend_from_slice(format!("*{}\r\n$5\r\nRPUSH\r\n", 2 + count).as_bytes());
        push_bulk(out, key);
        for index in first..first + count {
            out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
            element_bytes_into(index, element_bytes, fill, out);
            out.extend_from_slice(b"\r\n");
        }
        1
    }

    fn free_effort(&self, encoding: &str, elements: u64, element_bytes: u64) -> u64 {
        if encoding != "quicklist" {
            return 1;
        }
        // A listpack entry carries about 2 bytes of header beside its data (more past 127
        // bytes); an element larger than a node gets a node of its own.
        let entry = element_bytes.saturating_add(if element_bytes < 128 { 2 } else { 5 });
        let per_node = (QUICKLIST_NODE_BYTES / entry.max(1)).max(1);
        elements.div_ceil(per_node).max(1)
    }
}

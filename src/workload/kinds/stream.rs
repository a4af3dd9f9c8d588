//! A stream: `XADD key * f value`, one entry per command, a batch pipelined; `XRANGE key - +`
//! to read it whole. An element is one entry with one field, `f`, whose value is `element_bytes`
//! long. Entries live in a radix tree of listpack nodes of at most `stream-node-max-entries`
//! (100) entries or `stream-node-max-bytes` (4096 bytes); its free effort is the tree's node
//! count (and, with consumer groups, their pending entries: the tool makes none).

use super::ValueKind;
use super::hash::push_bulk;
use crate::workload::element_bytes_into;

/// The stream kind.
#[derive(Debug)]
pub struct StreamKind;

/// The one [`StreamKind`].
pub static STREAM: StreamKind = StreamKind;

/// `stream-node-max-entries` and `stream-node-max-bytes` at their defaults.
const NODE_MAX_ENTRIES: u64 = 100;
const NODE_MAX_BYTES: u64 = 4096;

impl ValueKind for StreamKind {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn count_command(&self) -> &'static str {
        "XLEN"
    }

    fn build_command(&self) -> &'static str {
        "XADD"
    }

    fn server_overhead_per_element(&self) -> u64 {
        16
    }

    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        ("XRANGE", &["-", "+"])
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
        for index in first..first + count {
            out.extend_from_slice(b"*5\r\n$4\r\nXADD\r\n");
            push_bulk(out, key);
            out.extend_from_slice(b"$1\r\n*\r\n$1\r\nf\r\n");
            out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
            element_bytes_into(index, element_bytes, fill, out);
            out.extend_from_slice(b"\r\n");
        }
        count as usize
    }

    fn free_effort(&self, _encoding: &str, elements: u64, element_bytes: u64) -> u64 {
        // An entry in a node costs its value, the field's flag and a few bytes of counts.
        let entry = element_bytes.saturating_add(4);
        let per_node = (NODE_MAX_BYTES / entry.max(1)).clamp(1, NODE_MAX_ENTRIES);
        elements.div_ceil(per_node).max(1)
    }
}

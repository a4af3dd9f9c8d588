//! A stream: one `XADD key * f value` per entry, `XRANGE key - +` to read it whole. Held in a
//! radix tree of listpack nodes; its free effort counts the nodes.

use super::{Arg, Batch, KindFacts};

/// The stream kind.
pub static STREAM: KindFacts = KindFacts {
    name: "stream",
    count_command: "XLEN",
    build_command: "XADD",
    read_command: ("XRANGE", &["-", "+"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 16,
    distinct: false,
    batch: Batch::CommandPerElement(&[Arg::Literal(b"*"), Arg::Literal(b"f"), Arg::Element]),
    large_encoding: "stream",
    free_effort: stream_nodes,
};

/// `stream-node-max-entries` and `stream-node-max-bytes` at their defaults.
const NODE_MAX_ENTRIES: u64 = 100;
const NODE_MAX_BYTES: u64 = 4096;

/// [`KindFacts::free_effort`]: the nodes a free walks.
fn stream_nodes(_encoding: &str, elements: u64, element_bytes: u64) -> u64 {
    // An entry in a node costs its value, the field's flag and a few bytes of counts.
    let entry = element_bytes.saturating_add(4);
    let per_node = (NODE_MAX_BYTES / entry.max(1)).clamp(1, NODE_MAX_ENTRIES);
    elements.div_ceil(per_node).max(1)
}

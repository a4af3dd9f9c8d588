//! A list: `RPUSH key element ...` in batches, `LRANGE key 0 -1` to read it whole. Its free
//! effort counts the nodes of its `quicklist` (1 for a list held in one listpack).

use super::{Arg, Batch, KindFacts};

/// The list kind.
pub static LIST: KindFacts = KindFacts {
    name: "list",
    count_command: "LLEN",
    build_command: "RPUSH",
    read_command: ("LRANGE", &["0", "-1"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 4,
    distinct: false,
    batch: Batch::OneCommand(&[Arg::Element]),
    large_encoding: "quicklist",
    free_effort: quicklist_nodes,
};

/// Bytes of one quicklist node at the default `list-max-listpack-size -2`.
const QUICKLIST_NODE_BYTES: u64 = 8 * 1024;

/// [`KindFacts::free_effort`]: the nodes a free walks.
fn quicklist_nodes(encoding: &str, elements: u64, element_bytes: u64) -> u64 {
    if encoding != "quicklist" {
        return 1;
    }
    // A listpack entry carries about 2 bytes of header beside its data (more past 127
    // bytes); an element larger than a node gets a node of its own.
    let entry = element_bytes.saturating_add(if element_bytes < 128 { 2 } else { 5 });
    let per_node = (QUICKLIST_NODE_BYTES / entry.max(1)).max(1);
    elements.div_ceil(per_node).max(1)
}

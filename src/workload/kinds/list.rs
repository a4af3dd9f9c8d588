use super::{KindFacts, ValueKind, push_elements_command};

/// The list kind.
#[derive(Debug)]
pub struct ListKind;

/// The one [`ListKind`].
pub static LIST: ListKind = ListKind;

/// Bytes of one quicklist node at the default `list-max-listpack-size -2`.
const QUICKLIST_NODE_BYTES: u64 = 8 * 1024;

static FACTS: KindFacts = KindFacts {
    name: "list",
    count_command: "LLEN",
    build_command: "RPUSH",
    read_command: ("LRANGE", &["0", "-1"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 4,
    distinct: false,
};

impl ValueKind for ListKind {
    fn facts(&self) -> &'static KindFacts {
        &FACTS
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
        push_elements_command(
            out,
            FACTS.build_command,
            key,
            (first, count),
            element_bytes,
            fill,
        )
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

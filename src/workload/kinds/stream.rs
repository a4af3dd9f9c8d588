use super::{KindFacts, ValueKind, push_bulk, push_command_start, push_element};

/// The stream kind.
#[derive(Debug)]
pub struct StreamKind;

/// The one [`StreamKind`].
pub static STREAM: StreamKind = StreamKind;

/// `stream-node-max-entries` and `stream-node-max-bytes` at their defaults.
const NODE_MAX_ENTRIES: u64 = 100;
const NODE_MAX_BYTES: u64 = 4096;

static FACTS: KindFacts = KindFacts {
    name: "stream",
    count_command: "XLEN",
    build_command: "XADD",
    read_command: ("XRANGE", &["-", "+"]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 16,
    distinct: false,
};

impl ValueKind for StreamKind {
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
        // One entry a command: XADD key * f <value>.
        for index in first..first + count {
            push_command_start(out, FACTS.build_command, key, 3);
            push_bulk(out, b"*");
            push_bulk(out, b"f");
            push_element(out, index, element_bytes, fill);
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

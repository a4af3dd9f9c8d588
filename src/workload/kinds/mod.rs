//! One file per kind of large value. Each says how its value is built (in pipelined batches of
//! commands, or one SET for a string), read whole, counted, and what its free effort is in the
//! server's terms (`lazyfreeGetFreeEffort` in `lazyfree.c`, the same in Redis 6.2 to 8.2 and
//! Valkey 9.1: the allocations a free walks, of which more than 64 send an asynchronous free to
//! the background thread).

pub mod hash;
pub mod list;
pub mod set;
pub mod stream;
pub mod string;
pub mod zset;

use crate::error::UsageError;

/// A kind of large value, as the writer and the key scan see it.
pub trait ValueKind: Sync + std::fmt::Debug {
    /// The name on the command line and in the exports, which is also the server's `TYPE`
    /// reply: `string`, `hash`, `list`, `set`, `zset`, `stream`.
    fn name(&self) -> &'static str;

    /// The command that counts the value without walking it (`STRLEN`, `HLEN`, ...).
    fn count_command(&self) -> &'static str;

    /// The command a build sends (`HSET`, `RPUSH`, ...; `SET` for a string): the name SLOWLOG
    /// logs the build's commands under.
    fn build_command(&self) -> &'static str;

    /// About how many bytes the server holds per element beyond its payload (the hash table's
    /// or skiplist's entry, the allocator's rounding), for the memory checks before a run:
    /// measured with MEMORY USAGE on Redis 7.0 for 16-byte elements.
    fn server_overhead_per_element(&self) -> u64 {
        0
    }

    /// The command that reads the whole value in one reply, and its arguments after the key:
    /// `GET`, `HGETALL`, `LRANGE key 0 -1`, ...
    fn read_command(&self) -> (&'static str, &'static [&'static str]);

    /// How many times `element_bytes` one element's payload is: 2 for a hash (a field and its
    /// value), 1 otherwise.
    fn bytes_per_element_factor(&self) -> u64 {
        1
    }

    /// Refuses a count this kind cannot hold with distinct members of `element_bytes`.
    fn check_elements(&self, _elements: u64, _element_bytes: u64) -> Result<(), UsageError> {
        Ok(())
    }

    /// Appends the commands that add elements `first..first + count` to `out`, and returns how
    /// many commands it appended (as many replies to read). Not used for a string, which the
    /// writer sends as one SET from its buffer.
    fn build_batch(
        &self,
        key: &[u8],
        first: u64,
        count: u64,
        element_bytes: usize,
        fill: &[u8],
        out: &mut Vec<u8>,
    ) -> usize;

    /// The server's free effort of a value of this kind (see the module comment), from what a
    /// client can know: its encoding (`OBJECT ENCODING`), element count and element size. A
    /// list's and a stream's effort count their nodes, which the client estimates from the
    /// servers' default node sizes.
    fn free_effort(&self, encoding: &str, elements: u64, element_bytes: u64) -> u64;
}

/// Every kind, in the order the help lists them.
pub static KINDS: [&'static dyn ValueKind; 6] = [
    &string::STRING,
    &hash::HASH,
    &list::LIST,
    &set::SET,
    &zset::ZSET,
    &stream::STREAM,
];

/// The kind called `name` (as `TYPE` replies), if there is one.
pub fn kind_named(name: &str) -> Option<&'static dyn ValueKind> {
    KINDS.iter().copied().find(|kind| kind.name() == name)
}

/// The names of every kind, for an error message: `string, hash, list, set, zset, stream`.
pub fn kind_names() -> String {
    KINDS
        .iter()
        .map(|kind| kind.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`ValueKind::check_elements`] for kinds whose members must be distinct (set and zset members,
/// hash fields).
pub(crate) fn check_distinct(
    kind: &str,
    elements: u64,
    element_bytes: u64,
) -> Result<(), UsageError> {
    let most = super::distinct_elements(element_bytes);
    if elements > most {
        return Err(UsageError::invalid(
            "--element-size",
            element_bytes,
            format!(
                "{elements} distinct {kind} members need at least {} bytes each (at most {most} fit in {element_bytes})",
                bytes_for_distinct(elements)
            ),
        ));
    }
    Ok(())
}

/// The fewest bytes per element that make `elements` distinct ones.
fn bytes_for_distinct(elements: u64) -> u64 {
    (1..=16)
        .find(|&bytes| super::distinct_elements(bytes) >= elements)
        .unwrap_or(16)
}

/// The free effort of a collection held in a hash table or a skiplist (one allocation per
/// element), or in a listpack/ziplist/intset (one allocation for all).
pub(crate) fn effort_per_element(encoding: &str, elements: u64, walked: &[&str]) -> u64 {
    if walked.contains(&encoding) {
        elements
    } else {
        1
    }
}

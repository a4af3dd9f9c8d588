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

/// What a kind is, as data: its names and commands, and how its elements are counted.
#[derive(Debug)]
pub struct KindFacts {
    /// The name on the command line and in the exports, which is also the server's `TYPE`
    /// reply: `string`, `hash`, `list`, `set`, `zset`, `stream`.
    pub name: &'static str,
    /// The command that counts the value without walking it (`STRLEN`, `HLEN`, ...).
    pub count_command: &'static str,
    /// The command a build sends (`HSET`, `RPUSH`, ...; `SET` for a string): the name SLOWLOG
    /// logs the build's commands under.
    pub build_command: &'static str,
    /// The command that reads the whole value in one reply, and its arguments after the key:
    /// `GET`, `HGETALL`, `LRANGE key 0 -1`, ...
    pub read_command: (&'static str, &'static [&'static str]),
    /// How many times `element_bytes` one element's payload is: 2 for a hash (a field and its
    /// value), 1 otherwise.
    pub bytes_per_element_factor: u64,
    /// About how many bytes the server holds per element beyond its payload (the hash table's
    /// or skiplist's entry, the allocator's rounding), for the memory checks before a run:
    /// measured with MEMORY USAGE on Redis 7.0 for 16-byte elements.
    pub server_overhead_per_element: u64,
    /// Its members must be distinct (set and zset members, hash fields): a count that cannot be
    /// made distinct in `element_bytes` is refused.
    pub distinct: bool,
    /// How its build sends a batch of elements.
    pub batch: Batch,
    /// The encoding the servers give a large value of this kind (past every default
    /// `*-max-listpack-entries` and `set-max-intset-entries`, 512 at most): what a scan assumes
    /// where `OBJECT ENCODING` is refused.
    pub large_encoding: &'static str,
    /// The server's free effort of a value of this kind (see the module comment), from what a
    /// client can know: its encoding (`OBJECT ENCODING`), element count and element size. A
    /// list's and a stream's effort count their nodes, which the client estimates from the
    /// servers' default node sizes.
    pub free_effort: fn(encoding: &str, elements: u64, element_bytes: u64) -> u64,
}

/// How a build sends a batch of elements: the command's arguments after the key, as data, so
/// that one loop ([`ValueKind::build_batch`]) writes every kind's commands.
#[derive(Debug)]
pub enum Batch {
    /// `SET key value` of the whole value. Only for completeness: the writer sends a string
    /// from its buffer without copying it.
    Whole,
    /// One command for the batch, the arguments of each element after the key in turn
    /// (`HSET key f1 v1 f2 v2 ...`): one reply.
    OneCommand(&'static [Arg]),
    /// One command per element (`XADD key * f v`, which takes one entry): a reply each.
    CommandPerElement(&'static [Arg]),
}

/// One argument an element adds to its build command.
#[derive(Debug)]
pub enum Arg {
    /// The element (see [`crate::workload::element_bytes_into`]).
    Element,
    /// A second value of the element's size from another stretch of the fill (a hash field's
    /// value): element `!index`.
    Paired,
    /// The element's index in decimal (a zset member's score).
    Index,
    /// Fixed bytes (a stream entry's `*` id and its field name).
    Literal(&'static [u8]),
}

impl Arg {
    fn push(&self, out: &mut Vec<u8>, index: u64, element_bytes: usize, fill: &[u8]) {
        match self {
            Arg::Element => push_element(out, index, element_bytes, fill),
            Arg::Paired => push_element(out, !index, element_bytes, fill),
            Arg::Index => push_bulk(out, index.to_string().as_bytes()),
            Arg::Literal(bytes) => push_bulk(out, bytes),
        }
    }
}

/// A kind of large value, as the writer and the key scan see it: its [`KindFacts`], how it is
/// built, and what freeing it costs the server. Every kind is a [`KindFacts`], in a file of its
/// own.
pub trait ValueKind: Sync + std::fmt::Debug {
    /// What the kind is.
    fn facts(&self) -> &KindFacts;

    /// [`KindFacts::name`].
    fn name(&self) -> &'static str {
        self.facts().name
    }

    /// [`KindFacts::count_command`].
    fn count_command(&self) -> &'static str {
        self.facts().count_command
    }

    /// [`KindFacts::large_encoding`].
    fn large_encoding(&self) -> &'static str {
        self.facts().large_encoding
    }

    /// [`KindFacts::build_command`].
    fn build_command(&self) -> &'static str {
        self.facts().build_command
    }

    /// [`KindFacts::server_overhead_per_element`].
    fn server_overhead_per_element(&self) -> u64 {
        self.facts().server_overhead_per_element
    }

    /// [`KindFacts::read_command`].
    fn read_command(&self) -> (&'static str, &'static [&'static str]) {
        self.facts().read_command
    }

    /// [`KindFacts::bytes_per_element_factor`].
    fn bytes_per_element_factor(&self) -> u64 {
        self.facts().bytes_per_element_factor
    }

    /// Refuses a count this kind cannot hold with distinct members of `element_bytes`.
    fn check_elements(&self, elements: u64, element_bytes: u64) -> Result<(), UsageError> {
        if self.facts().distinct {
            check_distinct(self.name(), elements, element_bytes)
        } else {
            Ok(())
        }
    }

    /// Appends the commands that add elements `first..first + count` to `out` (see
    /// [`Batch`]), and returns how many commands it appended (as many replies to read).
    fn build_batch(
        &self,
        key: &[u8],
        first: u64,
        count: u64,
        element_bytes: usize,
        fill: &[u8],
        out: &mut Vec<u8>,
    ) -> usize {
        let facts = self.facts();
        let command = facts.build_command;
        match facts.batch {
            Batch::Whole => {
                crate::workload::encode_into(out, &[command.as_bytes(), key, fill]);
                1
            }
            Batch::OneCommand(args) => {
                push_command_start(out, command, key, args.len() as u64 * count);
                for index in first..first + count {
                    for arg in args {
                        arg.push(out, index, element_bytes, fill);
                    }
                }
                1
            }
            Batch::CommandPerElement(args) => {
                for index in first..first + count {
                    push_command_start(out, command, key, args.len() as u64);
                    for arg in args {
                        arg.push(out, index, element_bytes, fill);
                    }
                }
                count as usize
            }
        }
    }

    /// [`KindFacts::free_effort`].
    fn free_effort(&self, encoding: &str, elements: u64, element_bytes: u64) -> u64 {
        (self.facts().free_effort)(encoding, elements, element_bytes)
    }
}

impl ValueKind for KindFacts {
    fn facts(&self) -> &KindFacts {
        self
    }
}

/// Appends a command's array header, its name and its key: what every build command starts
/// with; `args` counts what follows the key.
fn push_command_start(out: &mut Vec<u8>, command: &str, key: &[u8], args: u64) {
    out.extend_from_slice(format!("*{}\r\n", 2 + args).as_bytes());
    push_bulk(out, command.as_bytes());
    push_bulk(out, key);
}

/// Appends one bulk string.
fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends element `index` (see [`crate::workload::element_bytes_into`]) as a bulk string.
fn push_element(out: &mut Vec<u8>, index: u64, element_bytes: usize, fill: &[u8]) {
    out.extend_from_slice(format!("${element_bytes}\r\n").as_bytes());
    super::element_bytes_into(index, element_bytes, fill, out);
    out.extend_from_slice(b"\r\n");
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
                "{elements} distinct {kind} members need at least {} bytes each (a member begins with its index in hex, a digit a byte: at most {most} distinct in {element_bytes} byte(s))",
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

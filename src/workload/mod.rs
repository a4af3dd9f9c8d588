//! What the writer stores: the kinds of large value (a string, and the collections users keep:
//! hashes, lists, sets, sorted sets, streams), each described by one file in [`kinds`], and the
//! shape of one value (its kind, element count and element size).
//!
//! A kind knows only the commands: how to build its value in pipelined batches, how to read it
//! whole in one command, how to count it, and how the server may encode it. What the server does
//! when it frees one is in [`lazyfree`], which follows the servers' own rule (`lazyfree.c`).
//!
//! To add a kind: a file in `kinds/` with its [`kinds::KindFacts`] (which implement
//! [`ValueKind`]), and one line in [`KINDS`].

pub mod kinds;
pub mod lazyfree;

use serde::Serialize;

use crate::error::UsageError;

pub use kinds::{KINDS, ValueKind, kind_named};

/// Elements a collection's build sends per command unless told otherwise (`HSET key f v ...`
/// with 1000 pairs): small enough that one command costs the server well under a millisecond,
/// large enough that the build is not a million round trips.
pub const DEFAULT_BATCH_ELEMENTS: u64 = 1000;

/// Commands of a build on the wire at once: enough to keep the server busy between the writer's
/// reads, few enough that the socket buffers, not the server's query buffer, hold the rest.
pub const BUILD_PIPELINE_DEPTH: usize = 16;

/// The shape of one large value: what the writer builds and what the exports record
/// (`type`, `elements`, `element_bytes`, `size_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// The kind's name (`string`, `hash`, `list`, `set`, `zset`, `stream`).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Elements: 1 for a string; fields, members or entries for a collection.
    pub elements: u64,
    /// Bytes of one element (of a hash field and of its value, each); a string's whole size.
    pub element_bytes: u64,
}

impl Shape {
    /// A string of `size_bytes`.
    pub fn string(size_bytes: u64) -> Shape {
        Shape {
            kind: "string",
            elements: 1,
            element_bytes: size_bytes,
        }
    }

    /// The kind this shape is of.
    pub fn value_kind(&self) -> &'static dyn ValueKind {
        kind_named(self.kind).unwrap_or(&kinds::string::STRING)
    }

    /// The payload bytes the client sends for the whole value (members and values, not the
    /// protocol's framing or a zset's scores): what `size_bytes` means for every kind.
    pub fn size_bytes(&self) -> u64 {
        self.elements
            .saturating_mul(self.element_bytes)
            .saturating_mul(self.value_kind().bytes_per_element_factor())
    }

    /// About the bytes the server holds for this value (its payload and, for a collection, each
    /// element's bookkeeping), for the memory checks before anything is sent.
    pub fn server_bytes_estimate(&self) -> u64 {
        let kind = self.value_kind();
        self.size_bytes().saturating_add(
            self.elements
                .saturating_mul(kind.server_overhead_per_element()),
        )
    }

    /// About the bytes of one build command adding `count` elements (what the server's query
    /// buffer holds of it at most): each element's bulk strings with their framing, a zset's
    /// score, a stream entry's whole `XADD`.
    pub fn batch_request_bytes(&self, count: u64, key_bytes: u64) -> u64 {
        let digits = |n: u64| n.max(1).ilog10() as u64 + 1;
        let bulk = |len: u64| 1 + digits(len) + 2 + len + 2;
        let kind = self.value_kind();
        let per_element = match kind.name() {
            "zset" => bulk(self.element_bytes) + bulk(20),
            "stream" => {
                4 + bulk(4) + bulk(key_bytes) + bulk(1) + bulk(1) + bulk(self.element_bytes)
            }
            _ => bulk(self.element_bytes).saturating_mul(kind.bytes_per_element_factor()),
        };
        count
            .saturating_mul(per_element)
            .saturating_add(32 + bulk(key_bytes))
    }

    /// The shape of a value of `kind` given either its total payload (`size_bytes`) or its
    /// element count, with `element_bytes` per element. `flag` names the flag that gave the
    /// size or the count, for the error.
    pub fn sized(
        kind: &'static dyn ValueKind,
        size: SizeBy,
        element_bytes: u64,
    ) -> Result<Shape, UsageError> {
        if kind.name() == "string" {
            return match size {
                SizeBy::Bytes(bytes) => Ok(Shape::string(bytes)),
                SizeBy::Elements(count) => Err(UsageError::invalid(
                    "--elements",
                    count,
                    "a string has no elements: give its size with --writer-sizes",
                )),
            };
        }
        if element_bytes == 0 {
            return Err(UsageError::invalid(
                "--element-size",
                0,
                "an element needs at least one byte",
            ));
        }
        let per_element = element_bytes.saturating_mul(kind.bytes_per_element_factor());
        let elements = match size {
            SizeBy::Elements(count) => count,
            SizeBy::Bytes(bytes) => bytes / per_element,
        };
        if elements == 0 {
            return Err(match size {
                SizeBy::Elements(_) => {
                    UsageError::invalid("--elements", 0, "a collection needs at least one element")
                }
                SizeBy::Bytes(bytes) => UsageError::invalid(
                    "--writer-sizes",
                    crate::units::format_size(bytes),
                    format!(
                        "smaller than one {} element of {element_bytes} bytes",
                        kind.name()
                    ),
                ),
            });
        }
        kind.check_elements(elements, element_bytes)?;
        Ok(Shape {
            kind: kind.name(),
            elements,
            element_bytes,
        })
    }
}

/// How a size was given: total payload bytes (`--writer-sizes 64M`) or elements (`--elements
/// 1M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeBy {
    /// Total payload bytes; the element count is what fits.
    Bytes(u64),
    /// The element count.
    Elements(u64),
}

/// The bytes of element `index` of a collection: unique for every index below the count the
/// kind accepted ([`ValueKind::check_elements`]), so that a set or a hash really holds that many
/// members. The index, in lowercase hex, fills the first bytes (as many as the element has, up to
/// 16); the rest comes from `fill` (the run's random bytes), at an offset that moves with the
/// index, so the values do not compress to nothing.
pub fn element_bytes_into(index: u64, element_bytes: usize, fill: &[u8], out: &mut Vec<u8>) {
    let digits = element_bytes.min(16);
    let hex = format!("{index:016x}");
    out.extend_from_slice(&hex.as_bytes()[16 - digits..]);
    let rest = element_bytes - digits;
    if rest == 0 {
        return;
    }
    if fill.len() <= rest {
        // A tiny fill (tests): repeat it.
        out.extend(fill.iter().copied().cycle().take(rest));
        return;
    }
    let span = fill.len() - rest;
    let at = (index.wrapping_mul(0x9e37_79b9_7f4a_7c15) % span as u64) as usize;
    out.extend_from_slice(&fill[at..at + rest]);
}

/// How many distinct elements [`element_bytes_into`] can make for elements of `element_bytes`.
pub fn distinct_elements(element_bytes: u64) -> u64 {
    match element_bytes {
        0 => 0,
        1..=15 => 16u64.saturating_pow(element_bytes as u32),
        _ => u64::MAX,
    }
}

/// Appends the RESP encoding of one command to `out`.
pub fn encode_into(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests;

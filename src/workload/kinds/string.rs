//! A string: one SET from the writer's buffer (zero-copy), `GET` to read it whole. Its free
//! effort is 1 whatever its size: a server frees a string on the main thread even on `UNLINK`
//! or with every `lazyfree-lazy-*` set (`lazyfree.c`: only values whose effort exceeds 64 go to
//! the background thread), and that free is one `free()` of the whole buffer.

use super::{Batch, KindFacts};

/// The string kind.
pub static STRING: KindFacts = KindFacts {
    name: "string",
    count_command: "STRLEN",
    build_command: "SET",
    read_command: ("GET", &[]),
    bytes_per_element_factor: 1,
    server_overhead_per_element: 0,
    distinct: false,
    batch: Batch::Whole,
    large_encoding: "raw",
    free_effort: |_, _, _| 1,
};

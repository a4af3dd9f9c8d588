//! The subcommands, a folder (or, for a small one, a file) each: its flags (built from the
//! shared sections of [`crate::cli::sections`]), the one plan they are checked into before
//! anything connects, its dry-run text, and its run. Every command opens what it works on
//! through [`deployment`] and prints through [`output::Output`].
//!
//! - [`probe`]: the main job and observe mode (`probe --writer-sizes ...`), and its runs over
//!   several server binaries or against a baseline (`probe::versions`);
//! - [`calibrate`]: stalls of known length injected while probing;
//! - [`load`], [`populate`], [`clean`]: load mode and its keys;
//! - [`keys`]: which keys of a live server would freeze it (a paced scan and a cost model);
//! - [`compare`]: runs read back and judged.

pub mod calibrate;
pub mod clean;
pub mod compare;
pub mod deployment;
pub mod keys;
pub mod load;
pub mod output;
pub mod populate;
pub mod probe;

pub use clean::CleanArgs;
pub use compare::{CompareArgs, RulesArgs};
pub use keys::KeysArgs;
pub use load::{LoadArgs, LoadPlan};
pub use output::Output;
pub use populate::PopulateArgs;
pub use probe::ProbeArgs;

//! Output: what a person or another program reads: the terminal report and the files of an
//! `--out` directory.

pub mod export;
pub mod report;

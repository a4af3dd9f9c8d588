//! Analysis, pure: recorded timelines in, findings out (the correlator, the statistics over
//! repeated writes, memory pressure, the naming of a stall's cause from the server's logs). No sockets, threads or clocks; everything here is tested
//! on synthetic timelines. (Not to be confused with the Python plotting scripts in `analysis/`.)

pub mod correlate;
pub mod findings;
pub mod naming;
pub mod pressure;
pub mod stats;

//! Measuring: the threads, connections and clocks that produce the run's one event stream
//! (probes, the writer and other actors, host memory, the server's own view), and the target
//! they measure (an external server, or one started for the run).

pub mod actor;
pub mod clock;
pub mod culprit;
pub mod event;
pub mod hostmem;
pub mod local_cluster;
pub mod probe;
pub mod resp;
pub mod serverview;
pub mod slots;
pub mod target;
pub mod topology;
pub mod writer;

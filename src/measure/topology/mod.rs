//! The nodes a large write can hold up: the `--url` node's replicas, or every node of its Redis
//! Cluster, found from the one node the user named.
//!
//! Discovery asks the URL's node, and only it, what the deployment looks like: `CLUSTER SHARDS`
//! where the server has it (Redis 7.0+, Valkey), `CLUSTER SLOTS` where it does not (Redis 6.2),
//! and `INFO replication` when cluster mode is off (a standalone master and its replicas; from a
//! replica, its master's). Parsing those replies is pure ([`parse_cluster_shards`],
//! [`parse_cluster_slots`], [`parse_info_replication`]) and so is putting the pieces together
//! ([`assemble`]), which is given the reachability check as a function: the unit tests run on
//! replies captured from real servers without a socket.
//!
//! A node is measured at the address it announces unless `--node-address FROM=TO` maps it
//! (containers and NAT announce addresses the tool cannot reach). Nodes that are not healthy or
//! cannot be reached are left out with one warning line each, so a run goes on with the nodes it
//! reaches; only the URL's own node must stay in. A replica the URL's node reports other than
//! online is asked itself first (Redis 7.0 calls an idle replica at offset 0 `loading`): one
//! whose own INFO replication says `master_link_status:up` stays in.
//!
//! Here the re-exports; `model`: the topology a run measures (recorded in run.json); `flags`:
//! `--topology` and `--node-address`; `parse`: the replies above, pure; `assembly`: reported
//! shards into the topology, pure; `discovery`: the connections.

mod assembly;
mod discovery;
mod flags;
mod model;
mod parse;
#[cfg(test)]
mod tests;

pub use assembly::{UrlNode, assemble};
pub use discovery::{
    REACH_TIMEOUT, check_reachable, discover, read_standalone_shard, replica_link_up, socket_addrs,
    standalone_shard,
};
pub use flags::{NodeAddress, NodeAddressMap, TopologyMode, parse_node_address};
pub use model::{Node, Role, Shard, Topology, TopologyKind};
pub use parse::{
    ReplicaLine, ReplicationInfo, ReportedNode, ReportedShard, parse_cluster_shards,
    parse_cluster_slots, parse_info_replication,
};

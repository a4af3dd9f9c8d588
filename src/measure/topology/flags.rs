//! `--topology` and `--node-address`, parsed into typed values (every bad value a
//! `UsageError` naming the flag).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::UsageError;
use crate::measure::target::{join_host_port, split_host_port};

/// `--topology`: which nodes a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologyMode {
    /// Every node discovered from the URL's.
    #[default]
    Auto,
    /// Only the URL's node, as before clusters were supported.
    Single,
}

impl FromStr for TopologyMode {
    type Err = UsageError;

    fn from_str(text: &str) -> Result<Self, UsageError> {
        match text {
            "auto" => Ok(TopologyMode::Auto),
            "single" => Ok(TopologyMode::Single),
            _ => Err(UsageError::invalid(
                "--topology",
                text,
                "expected auto (every node discovered from --url) or single (only the --url node)",
            )),
        }
    }
}

impl fmt::Display for TopologyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TopologyMode::Auto => "auto",
            TopologyMode::Single => "single",
        })
    }
}

/// One `--node-address FROM=TO`: connect to `to` for the node that announces `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The address a node announces (`host:port`).
    pub from: String,
    /// Where the tool reaches it (`host:port`).
    pub to: String,
}

/// Parses `--node-address FROM=TO`, both `host:port` (`[v6]:port` for IPv6).
pub fn parse_node_address(text: &str) -> Result<NodeAddress, UsageError> {
    let bad = |reason: String| UsageError::invalid("--node-address", text, reason);
    let (from, to) = text.split_once('=').ok_or_else(|| {
        bad("expected FROM=TO, the address a node announces and where to reach it, e.g. 10.0.0.5:6379=127.0.0.1:7001".into())
    })?;
    let address = |side: &str, part: &str| {
        split_host_port(part.trim())
            .map(|(host, port)| join_host_port(&host, port))
            .ok_or_else(|| {
                bad(format!(
                    "{side} '{part}' is not host:port with a port from 1 to 65535"
                ))
            })
    };
    Ok(NodeAddress {
        from: address("FROM", from)?,
        to: address("TO", to)?,
    })
}

/// Every `--node-address`, by announced address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddressMap {
    to_by_from: BTreeMap<String, String>,
}

impl NodeAddressMap {
    /// Parses each `--node-address` value; mapping one address to two places is an error.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, UsageError> {
        let mut map = NodeAddressMap::default();
        for value in values {
            let value = value.as_ref();
            let NodeAddress { from, to } = parse_node_address(value)?;
            if let Some(earlier) = map.to_by_from.get(&from)
                && *earlier != to
            {
                return Err(UsageError::invalid(
                    "--node-address",
                    value,
                    format!("{from} is already mapped to {earlier}"),
                ));
            }
            map.to_by_from.insert(from, to);
        }
        Ok(map)
    }

    /// Where to reach the node announcing `announced`, when a mapping names it.
    pub fn get(&self, announced: &str) -> Option<&str> {
        let normalized = split_host_port(announced).map(|(host, port)| join_host_port(&host, port));
        self.to_by_from
            .get(normalized.as_deref().unwrap_or(announced))
            .map(String::as_str)
    }

    /// True when no `--node-address` was given.
    pub fn is_empty(&self) -> bool {
        self.to_by_from.is_empty()
    }
}

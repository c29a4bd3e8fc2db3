//! The call tree an HTML page draws as an interactive flame graph: each node
//! a function with its four values (allocated bytes and objects, in-use bytes
//! and objects), children called from it. `profile::flame::tree` builds it.

use serde::Serialize;

/// Which of a node's values: the order of [`FlameNode::values`].
pub const VALUE_NAMES: [&str; 4] = ["allocated bytes", "allocated objects", "in-use bytes", "in-use objects"];

/// One frame of the tree; `values` include every caller-to-callee path below it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlameNode {
    #[serde(rename = "n")]
    pub name: String,
    #[serde(rename = "v")]
    pub values: [f64; 4],
    #[serde(rename = "c", skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<FlameNode>,
}

/// A flame graph for a page.
#[derive(Debug, Clone)]
pub struct FlameGraph {
    pub title: String,
    /// Drawn at the end of the page's first section whose heading holds
    /// this (a process's "process PID —"); at the page's end without one.
    pub section: Option<String>,
    pub root: FlameNode,
    /// Frames left out to keep the page small (each below a share of every
    /// total); their values stay in their callers.
    pub left_out: usize,
    /// Which value the graph shows first (an index of `VALUE_NAMES`).
    pub first_value: usize,
    /// Values are a sampled profile's estimates.
    pub estimated: bool,
}

impl FlameNode {
    /// How many nodes the tree holds, this one included.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(FlameNode::count).sum::<usize>()
    }
}

//! Which ranks share a node's memory: their samples are copied with `memcpy` from the
//! node-shared window (`node_shard`) instead of going through an engine.
//!
//! The relation is symmetric and every rank holds all of it (one value per rank, like
//! the index's first ids): a requester plans its node's samples as copies, and an owner
//! knows without being told that those requesters will not ask it for them (the
//! collective engine's owners rebuild other ranks' requests from it).

/// Node membership of every rank of the communicator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// `node_of[r]`: the lowest rank of r's node. Empty: no rank shares memory with
    /// another (`MDL_NODE_LOCAL=off`, or an MPI that cannot share memory).
    node_of: Vec<usize>,
}

impl Topology {
    /// From each rank's node, named by the lowest rank of the node.
    pub fn from_leaders(node_of: Vec<usize>) -> Topology {
        Topology { node_of }
    }

    /// Whether some ranks read each other's shards (the node-local path is in use).
    pub fn is_shared(&self) -> bool {
        !self.node_of.is_empty()
    }

    /// Whether the node-local path serves the whole job from one node: every sample
    /// is a copy, so no engine ever runs and no get is ever made.
    pub fn is_one_node(&self) -> bool {
        self.is_shared() && self.node_of.iter().all(|&leader| leader == self.node_of[0])
    }

    /// Whether rank `a` reads rank `b`'s shard directly (a rank always reads its own).
    #[inline]
    pub fn shares(&self, a: usize, b: usize) -> bool {
        // One test of the (fixed) topology, then no branch on the ranks: a planned
        // batch alternates at random between own and neighbours' samples, and a
        // short-circuit `a == b ||` mispredicted about every other sample.
        if self.node_of.is_empty() { a == b } else { self.node_of[a] == self.node_of[b] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_within_their_node_only() {
        // Two nodes: ranks 0, 2 and ranks 1, 3.
        let t = Topology::from_leaders(vec![0, 1, 0, 1]);
        assert!(t.shares(0, 2) && t.shares(2, 0) && t.shares(3, 1) && t.shares(3, 3));
        assert!(!t.shares(0, 1) && !t.shares(2, 3));
        assert!(t.is_shared() && !t.is_one_node());
        assert!(Topology::from_leaders(vec![0, 0, 0]).is_one_node());
        let alone = Topology::default();
        assert!(alone.shares(1, 1) && !alone.shares(0, 1) && !alone.is_shared());
    }
}

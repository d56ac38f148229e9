//! The node-local path: the shards of the ranks of one node in one shared-memory
//! window, so that a rank copies its node's samples with `memcpy`, with no MPI call per
//! sample, while the engines move only what lies on other nodes.
//!
//! Each node's ranks (MPI's `MPI_COMM_TYPE_SHARED`, optionally split further by
//! `MDL_NODE_KEY` to emulate hosts) allocate their shards with
//! `MPI_Win_allocate_shared`; every rank maps its node's segments
//! (`MPI_Win_shared_query`). When the job spans one node that window is also the
//! shard's RMA window (both MPIs serve it from their shared-memory path); otherwise an
//! `MPI_Win_create` over the same memory serves the other nodes' gets.
//!
//! Visibility: the shards are written once, at registration, before
//! `Window::publish_to_node` (`MPI_Win_sync`, a node barrier, `MPI_Win_sync`), and never
//! again; every load of another rank's segment comes after it.
//!
//! Where some node cannot share memory (`MPI_Win_allocate_shared` fails), every rank
//! of the job falls back to the plain window, agreed, so that requesters and owners
//! classify every sample alike. Where no node holds two ranks there is nothing to
//! share, and the plain window (`MPI_Win_allocate`, the faster one for RMA) is kept.

use super::topology::Topology;
use crate::agree::{agree_on_checks, agree_on_fallback, agree_on_split};
use crate::error::{Error, Result, outcome_of};
use crate::mpi::{Comm, Segment, Window};

/// The segments of this rank's node, and the node-shared window when it is not the
/// shard's RMA window.
pub struct NodeShards {
    /// Comm ranks of the node, in rank order.
    members: Vec<usize>,
    /// `segments[i]` is the shard of `members[i]`.
    segments: Vec<Segment>,
    /// The node-shared window under a separate RMA window (jobs of several nodes).
    shared: Option<Window>,
}

impl NodeShards {
    /// The shard of `rank`, which must be on this node.
    pub fn shard_of(&self, rank: usize) -> &[u8] {
        let i = self.members.binary_search(&rank).expect("a rank of this node");
        self.segments[i].bytes()
    }

    /// Collective over the node, after the RMA window over its memory was freed.
    pub fn free(self) -> Result<()> {
        self.shared.map_or(Ok(()), Window::free)
    }
}

/// The shard's windows as placed by [`place`].
pub struct Placed {
    /// The window the engines read with RMA (and this rank's own bytes).
    pub window: Window,
    pub node: Option<NodeShards>,
    pub topology: Topology,
    /// MPI refused the node-shared window (on some rank; agreed): the plain window
    /// instead.
    pub refused: bool,
    /// Whether some rank reads ranks of its MPI node with gets (agreed): where
    /// `MDL_NODE_KEY` splits an MPI node, or MPI refused to share memory.
    pub gets_within_nodes: bool,
}

/// Collective over `comm`: copy `data` into node-shared memory where MPI allows it
/// (see the module's comment), or into a plain window.
pub fn place(comm: &Comm, data: &[u8], node_key: u32) -> Result<Placed> {
    const DOING: &str = "placing the shards in node-shared memory";
    let hardware = agree_on_split(comm, comm.split_shared(), DOING)?;
    let node = match agree_on_split(comm, hardware.split_by(node_key), DOING) {
        Ok(node) => node,
        Err(err) => {
            hardware.free()?;
            return Err(err);
        }
    };
    // The largest node, and the most ranks of an MPI node left out of a node by the key.
    let most = comm.allreduce_max(&[node.size() as u64, (hardware.size() - node.size()) as u64])?;
    let (largest, key_splits) = (most[0], most[1] > 0);
    let placed = if largest > 1 { place_shared(comm, &hardware, &node, data, node_key, key_splits) } else { plain(comm, data, key_splits) };
    let freed = node.free().and(hardware.free());
    let placed = placed?;
    freed?;
    Ok(placed)
}

fn plain(comm: &Comm, data: &[u8], gets_within_nodes: bool) -> Result<Placed> {
    let window = Window::allocate(comm, data)?;
    Ok(Placed { window, node: None, topology: Topology::default(), refused: false, gets_within_nodes })
}

/// `hardware`: this rank's MPI node, which `node` is (or is a part of).
fn place_shared(comm: &Comm, hardware: &Comm, node: &Comm, data: &[u8], node_key: u32, key_splits: bool) -> Result<Placed> {
    // Emulated nodes of one machine would otherwise create their windows at once.
    let shared = hardware.one_part_at_a_time(u64::from(node_key), || Window::allocate_shared(node, data))?;
    if let Some(fallback) = agree_on_fallback(comm, outcome_of(&shared))? {
        fallback.log("the shards cannot be shared within nodes: on every rank node-local samples go through the engines");
        super::release_where_whole_node(node, shared, Window::free)?;
        return plain(comm, data, true).map(|placed| Placed { refused: true, ..placed });
    }
    let shared = shared.expect("agreed that every node shares memory");
    let rma = (node.size() < comm.size()).then(|| Window::create_over(comm, &shared));
    let mapped = shared
        .publish_to_node(node)
        .and_then(|()| (0..node.size()).map(|r| shared.segment(r)).collect::<Result<Vec<_>>>());
    let checks = rma.as_ref().map_or(Ok(()), outcome_of);
    if let Err(err) = agree_on_checks(comm, checks.and(outcome_of(&mapped))) {
        // A window that some rank failed to create cannot be freed collectively: left
        // to the end of the job, as MPI may still refer to it.
        std::mem::forget((rma, shared));
        return Err(Error { message: format!("mapping the node's shards: {}", err.message), ..err });
    }
    let members: Vec<usize> = node.allgather(comm.rank() as u64)?.into_iter().map(|r| r as usize).collect();
    let node_of = comm.allgather(members[0] as u64)?.into_iter().map(|r| r as usize).collect();
    // The other ranks' segments are mapped but not touched here: each page costs this
    // process a page fault (and a page-table entry) at its first read, during the
    // steps, so a rank pays for what it reads and not for the whole node's data (8
    // ranks of 16 GB would otherwise touch 128 GB per rank at registration).
    let segments = mapped.expect("agreed that every rank mapped its node");
    let (window, shared) = match rma {
        Some(rma) => (rma.expect("agreed that every rank created its window"), Some(shared)),
        None => (shared, None),
    };
    Ok(Placed {
        window,
        node: Some(NodeShards { members, segments, shared }),
        topology: Topology::from_leaders(node_of),
        refused: false,
        gets_within_nodes: key_splits,
    })
}

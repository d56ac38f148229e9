//! Whether each node's shared memory can hold the store's windows, checked before any
//! of them is made and agreed over the job.
//!
//! Both MPIs back node-shared memory with files in a memory file system (`/dev/shm`),
//! which containers often size at 64 MB, and neither fails cleanly when it is short:
//! MPICH's `MPI_Win_allocate(_shared)` succeeds on a sparse file and the first write
//! past the room left raises SIGBUS; Open MPI's checks its space on the node's leader
//! only, which fails while the other ranks wait inside the collective for ever. So the
//! library asks the file system first (`statvfs`), with the full size of what it is
//! about to allocate on the node:
//!
//! - the index: 1-3 bytes per sample of the job up to 64 KiB samples (`packed`), once
//!   per node (`MDL_SHARED_INDEX`);
//! - the shards of the node's ranks: with `MDL_NODE_LOCAL=on` in one shared window,
//!   otherwise in `MPI_Win_allocate`'s window, which both MPIs also place in shared
//!   memory between ranks of a node;
//! - on more than one node, the calibration's scratch shards (`StoreSettings::scratch_shard_bytes` a
//!   rank, about 0.5 MiB), registered next in a store of the same kind.
//!
//! A node of one rank counts no shard: MPI keeps a lone rank's window in its private
//! memory (and Open MPI's `MPI_Win_create`, the fallback, fails on one rank).
//!
//! Where some node cannot hold both, every rank keeps its shard in private memory
//! (`MPI_Win_create`, no node-local copies); where some node cannot even hold the
//! index, every rank keeps its own index too. The outcome is agreed, so requesters and
//! owners classify every sample alike, and each short node says so once (its lowest
//! short rank: ranks may see different rooms), with sizes.
//!
//! Each rank also checks its own address space (`ulimit -v`): MPICH maps the node's
//! whole shared window into every process of the node, as does the node-local path, so
//! a rank under a limit that holds its own shard but not the node's would fail alone
//! in `MPI_Win_allocate` while the others wait there for ever. Such a rank, too, makes
//! every rank keep its shard (and, if need be, its index) in private memory.
//!
//! What the check cannot see: another process filling the file system between the
//! check and the windows' first writes (MPICH then still raises SIGBUS).

use super::StoreSettings;
use crate::agree::agree_on_split;
use crate::error::{Error, Result, mdl_status};
use crate::mpi::Comm;

/// Where the store's memory goes: node-shared (true) or private to each rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedPlacement {
    pub index: bool,
    pub shards: bool,
}

/// What a node needs of its shared-memory file system, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Demand {
    index: u64,
    shards: u64,
}

impl Demand {
    /// The placement this node can hold, with `available` bytes (free minus the
    /// reserve) and the index wanted in shared memory or not.
    fn placement(self, available: u64, index_wanted: bool) -> SharedPlacement {
        let index = if index_wanted { self.index } else { 0 };
        SharedPlacement {
            index: index_wanted && self.index <= available,
            shards: index.saturating_add(self.shards) <= available,
        }
    }
}

/// A shard's footprint in a shared window: MPI gives each rank's segment its own pages.
fn segment_bytes(shard_len: usize) -> u64 {
    (shard_len as u64).div_ceil(4096).saturating_mul(4096)
}

/// Collective over `comm`: where the store's memory can go on every node. `index_bytes`
/// is the index table's size (0 without one). A store made in the shadow of another (calibration's
/// scratch store) takes that store's placement instead (`settings.placement`): no
/// second check, no second warning, and it measures the windows the steps will use.
pub fn decide(comm: &Comm, shard_len: usize, index_bytes: u64, settings: &StoreSettings) -> Result<SharedPlacement> {
    if let Some(placement) = settings.placement {
        return Ok(SharedPlacement { index: placement.index && settings.shared_index, ..placement });
    }
    let wanted = SharedPlacement { index: settings.shared_index, shards: true };
    // A directory that cannot be examined tells nothing (the default /dev/shm missing:
    // the MPI keeps its segments elsewhere, and its own limits apply). A directory the
    // user names is checked to exist at mdl_init.
    let free = crate::node::free_bytes(&settings.shm_dir);
    let available = free.map_or(u64::MAX, |f| f.saturating_sub(settings.shm_reserve));
    let node = agree_on_split(comm, comm.split_shared(), "sizing the node's shared memory")?;
    let lone = node.size() == 1;
    // On more than one node, calibration (when it measures) then registers a scratch
    // store of the same kind, whose node window is mapped beside this one (one node
    // skips calibration).
    let spans_nodes = node.size() < comm.size();
    let scratch = if spans_nodes { segment_bytes(settings.scratch_shard_bytes as usize) } else { 0 };
    let node_shards = node.allreduce_sum(&[if lone { 0 } else { segment_bytes(shard_len) + scratch }]);
    let demand = node_shards.map(|sum| Demand { index: index_bytes, shards: sum[0] });
    let here = demand.as_ref().map_or(wanted, |d| d.placement(available, settings.shared_index));
    // MPI maps more than the windows as it makes them (MPICH 4.0: about 6 MiB more, or
    // one rank failed alone in MPI_Win_allocate or MPI_Comm_split_type): the same
    // reserve as the file system's is kept free.
    let space_left = crate::node::address_space_left().map(|left| left.saturating_sub(settings.shm_reserve));
    let mappable = match (&demand, space_left) {
        (Ok(d), Some(left)) => d.placement(left, settings.shared_index),
        _ => wanted,
    };
    if mappable != wanted {
        let d = demand.as_ref().expect("checked above");
        log::warn!(
            "address space: this process may map {} more bytes (ulimit -v, less MDL_SHM_RESERVE), where the node's shared windows need {} for \
             the index and {} for the node's shards, mapped whole into each process: every rank keeps {} in private \
             memory (slower gets within a node, no node-local copies). Raise the limit, or run fewer ranks per node",
            space_left.unwrap_or(0),
            if settings.shared_index { d.index } else { 0 },
            d.shards,
            if mappable.index || !settings.shared_index { "its shard" } else { "its shard and its index" },
        );
    }

    // The node's lowest rank that found it short, counted from the top so that the
    // maximum names it.
    let short_here = demand.is_ok() && here != wanted;
    let from_top = (node.size() - node.rank()) as u64;
    let first_short = node.allreduce_max(&[if short_here { from_top } else { 0 }]);
    let freed = node.free();
    // This rank's failures ride the job's one agreement, so that no rank goes on to the
    // windows while another returns.
    let local = (|| Ok((demand?, first_short?[0], freed?)))();
    let placed = SharedPlacement { index: here.index && mappable.index, shards: here.shards && mappable.shards };
    let votes = [u64::from(!placed.index), u64::from(!placed.shards), u64::from(local.is_err())];
    let short = comm.allreduce_max(&votes)?;
    let (demand, first_short, ()) = match (local, short[2]) {
        (Err(err), _) => return Err(err),
        (Ok(_), 1..) => return Err(Error::new(mdl_status::MDL_ERR_REMOTE, "another rank could not size its node's shared memory")),
        (Ok(local), 0) => local,
    };
    let agreed = SharedPlacement { index: settings.shared_index && short[0] == 0, shards: short[1] == 0 };
    if short_here && first_short == from_top {
        log::warn!(
            "shared memory: {} has {} bytes free on this node ({} after MDL_SHM_RESERVE), where the store needs {} \
             for the index and {} for this node's shards: {} kept in each rank's private memory (MPI_Win_create: \
             slower gets within a node{}). Give the node a larger {} (a container's --shm-size), or set \
             MDL_SHM_DIR to the directory your MPI keeps its segments in",
            settings.shm_dir.display(),
            free.unwrap_or(0),
            available,
            if settings.shared_index { demand.index } else { 0 },
            demand.shards,
            if agreed.index || !settings.shared_index { "the shards are" } else { "the shards and the index are" },
            if settings.node_local { ", no node-local copies" } else { "" },
            settings.shm_dir.display(),
        );
    }
    Ok(agreed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_fall_back_first_and_the_index_when_it_alone_does_not_fit() {
        let demand = Demand { index: 800, shards: 8192 };
        let both = SharedPlacement { index: true, shards: true };
        assert_eq!(demand.placement(8992, true), both);
        assert_eq!(demand.placement(8991, true), SharedPlacement { index: true, shards: false });
        assert_eq!(demand.placement(799, true), SharedPlacement { index: false, shards: false });
        // Without a shared index its bytes do not count.
        assert_eq!(demand.placement(8192, false), SharedPlacement { index: false, shards: true });
        assert_eq!(demand.placement(u64::MAX, true), both);
    }

    #[test]
    fn segments_take_whole_pages() {
        assert_eq!(segment_bytes(0), 0);
        assert_eq!(segment_bytes(1), 4096);
        assert_eq!(segment_bytes(4096), 4096);
        assert_eq!(segment_bytes(4097), 8192);
    }
}

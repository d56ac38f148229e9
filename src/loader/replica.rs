//! Replica groups (`mdl_init_replicated`): the host's communicator split into groups
//! that each hold a full copy of the dataset. A rank fetches only inside its group (the
//! store, the windows, the engines and the node-local path all live on the group's
//! communicator), while everything that must be identical on every rank stays on the
//! host's: the agreements, the engine choice, the calibrated parameters, and the
//! built-in sampler, which splits each epoch over every rank of the host, so that every
//! sample is seen once per epoch across the whole job, as without groups.
//!
//! Ids are the group's: every group numbers its copy 0..N, in the order of its ranks.

use crate::engine::KnownBatches;
use crate::error::{Error, Result};
use crate::mpi::Comm;
use std::ops::Range;

/// How `mdl_init_replicated` splits the host's ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupSpec {
    /// One group: every rank of the host (`mdl_init`).
    Whole,
    /// Consecutive ranks, this many per group (it divides the number of ranks).
    Consecutive(usize),
    /// The ranks of one node (MPI's shared-memory node, split by `MDL_NODE_KEY`).
    PerNode,
}

impl GroupSpec {
    /// From `mdl_init_replicated`'s `group_size` on a host of `ranks` ranks: 0 is one
    /// group per node. The checks depend on the argument and the host's size alone, so
    /// ranks given the same argument decide alike.
    pub fn from_arg(group_size: i64, ranks: usize) -> Result<GroupSpec> {
        match group_size {
            0 => Ok(GroupSpec::PerNode),
            g if g < 0 => Err(Error::invalid(format!("group_size is {g}; give 0 (one group per node) or a group size"))),
            g if g as u64 > ranks as u64 => {
                Err(Error::invalid(format!("group_size {g} exceeds the communicator's {ranks} ranks")))
            }
            g if !ranks.is_multiple_of(g as usize) => Err(Error::invalid(format!(
                "group_size {g} does not divide the communicator's {ranks} ranks (every group holds a full copy)"
            ))),
            g if g as usize == ranks => Ok(GroupSpec::Whole),
            g => Ok(GroupSpec::Consecutive(g as usize)),
        }
    }

    /// The value every rank must agree on (`group_size`, with the whole host as its
    /// size, so that `mdl_init` and `mdl_init_replicated(comm, size)` agree).
    pub fn agreed_value(self, ranks: usize) -> u64 {
        match self {
            GroupSpec::Whole => ranks as u64,
            GroupSpec::Consecutive(size) => size as u64,
            GroupSpec::PerNode => 0,
        }
    }
}

/// Where this rank sits among the groups; what `mdl_replica_info` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub group: usize,
    pub groups: usize,
    pub rank_in_group: usize,
    pub group_size: usize,
}

impl ReplicaInfo {
    /// One group of the whole host.
    pub fn whole(rank: usize, ranks: usize) -> ReplicaInfo {
        ReplicaInfo { group: 0, groups: 1, rank_in_group: rank, group_size: ranks }
    }

    /// This rank's even share of a copy of `num_samples` samples, the ids it registers
    /// so that its group holds the whole copy: `[N r / g, N (r + 1) / g)` for group rank
    /// `r` of `g` (shares differ by at most one sample).
    pub fn part(&self, num_samples: u64) -> Range<u64> {
        let at = |r: usize| (num_samples as u128 * r as u128 / self.group_size as u128) as u64;
        at(self.rank_in_group)..at(self.rank_in_group + 1)
    }
}

/// This rank's group, when the host is split into more than one.
pub struct ReplicaGroup {
    comm: Comm,
    /// The host ranks of the group, ascending (group rank i is host rank members[i]).
    members: Vec<usize>,
    info: ReplicaInfo,
}

impl ReplicaGroup {
    /// Collective over `host`: this rank's group under `spec`, or None when the whole
    /// host is one group. `node_key` splits MPI's node as the node-local path does.
    pub fn split(host: &Comm, spec: GroupSpec, node_key: u32) -> Result<Option<ReplicaGroup>> {
        let comm = match spec {
            GroupSpec::Whole => return Ok(None),
            GroupSpec::Consecutive(size) => host.split_by((host.rank() / size) as u32)?,
            GroupSpec::PerNode => {
                let hardware = host.split_shared()?;
                let node = hardware.split_by(node_key);
                hardware.free()?;
                node?
            }
        };
        let members: Vec<usize> = comm.allgather(host.rank() as u64)?.into_iter().map(|r| r as usize).collect();
        // Groups are numbered by their lowest host rank.
        let leads = host.allgather(u8::from(comm.rank() == 0))?;
        let groups = leads.iter().filter(|&&l| l == 1).count();
        if groups == 1 {
            comm.free()?;
            return Ok(None);
        }
        let group = leads[..members[0]].iter().filter(|&&l| l == 1).count();
        let info = ReplicaInfo { group, groups, rank_in_group: comm.rank(), group_size: comm.size() };
        Ok(Some(ReplicaGroup { comm, members, info }))
    }

    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    pub fn info(&self) -> ReplicaInfo {
        self.info
    }

    /// The group rank of host rank `host_rank`, if it is in this group.
    pub fn rank_of(&self, host_rank: usize) -> Option<usize> {
        self.members.binary_search(&host_rank).ok()
    }

    /// Collective over the group.
    pub fn free(self) -> Result<()> {
        self.comm.free()
    }
}

/// The sampler's batches of every host rank seen from inside one group: rank `r` is
/// the group's rank r. An owner's requests come only from its own group (the epoch's
/// inversion keeps no other: see `Core::prepare_epoch`).
pub struct GroupBatches<'a> {
    pub all: &'a dyn KnownBatches,
    pub group: &'a ReplicaGroup,
}

impl KnownBatches for GroupBatches<'_> {
    fn for_each_request(&self, owned: Range<u64>, visit: &mut dyn FnMut(usize, u64)) {
        self.all.for_each_request(owned, &mut |host_rank, id| {
            let rank = self.group.rank_of(host_rank).expect("the epoch's inversion keeps only the group's requests");
            visit(rank, id)
        });
    }

    fn served_bytes(&self, owned: Range<u64>) -> u64 {
        self.all.served_bytes(owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sizes_are_checked_against_the_host() {
        assert_eq!(GroupSpec::from_arg(0, 6), Ok(GroupSpec::PerNode));
        assert_eq!(GroupSpec::from_arg(2, 6), Ok(GroupSpec::Consecutive(2)));
        assert_eq!(GroupSpec::from_arg(6, 6), Ok(GroupSpec::Whole));
        assert_eq!(GroupSpec::from_arg(1, 1), Ok(GroupSpec::Whole));
        for bad in [-1, 4, 7, i64::MIN, i64::MAX] {
            assert!(GroupSpec::from_arg(bad, 6).is_err(), "{bad}");
        }
        assert_eq!(GroupSpec::Whole.agreed_value(6), 6);
        assert_eq!(GroupSpec::PerNode.agreed_value(6), 0);
    }

    #[test]
    fn parts_cover_the_copy_once() {
        for (n, size) in [(0u64, 3usize), (10, 3), (2, 4), (u64::MAX, 7)] {
            let mut next = 0;
            for r in 0..size {
                let part = ReplicaInfo { group: 0, groups: 1, rank_in_group: r, group_size: size }.part(n);
                assert_eq!(part.start, next);
                assert!(part.end - part.start <= n / size as u64 + 1);
                next = part.end;
            }
            assert_eq!(next, n);
        }
    }
}

#!/bin/sh
# Emulated hosts on one machine: runs a program with MDL_NODE_KEY set to this rank's
# host, rank / MDL_TEST_RANKS_PER_HOST (default 2), so that ranks 0-1, 2-3, ... count
# as separate nodes for the node-local path (the library splits MPI's shared-memory
# node by the key). Usage (under mpirun/mpiexec): tests/node_key.sh PROGRAM [ARGS...]
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
MDL_NODE_KEY=$((rank / ${MDL_TEST_RANKS_PER_HOST:-2}))
export MDL_NODE_KEY
exec "$@"

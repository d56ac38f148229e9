# Two emulated hosts on one machine, for scripts to source: two network namespaces
# joined by a veth pair, and an ssh stand-in (ip netns exec) through which mpirun and
# mpiexec start their daemons in each, so that MPI itself sees two nodes
# (MPI_Comm_split_type) and moves everything between them over TCP. Needs root.
#
#   source tests/emulated_hosts.sh
#   mdl_hosts_create TAG SUBNET NSEXEC   # e.g. node 10.78.0 /tmp/nsexec.sh
#   ... mdl_hosts_openmpi / mdl_hosts_mpich give the launch line ...
#   mdl_hosts_delete                     # also call it from an EXIT trap
#
# After mdl_hosts_create: MDL_HOST_A / MDL_HOST_B (the namespaces, also the host names
# given to the launchers), MDL_HOSTS_IFACE (the veth device inside each, addresses
# SUBNET.1 and SUBNET.2) and MDL_HOSTS_NSEXEC (the ssh stand-in).

MDL_HOSTS_IFACE=mdlnv0

# mdl_hosts_create TAG SUBNET NSEXEC: returns non-zero (with what failed on stderr)
# when the namespaces cannot be made.
mdl_hosts_create() {
    local tag=$1 subnet=$2
    MDL_HOST_A=mdl$tag-a-$$
    MDL_HOST_B=mdl$tag-b-$$
    MDL_HOSTS_NSEXEC=$3
    command -v ip >/dev/null || { echo "no ip command" >&2; return 1; }
    local a=mdl$$${tag:0:3}a b=mdl$$${tag:0:3}b
    ip netns add "$MDL_HOST_A" && ip netns add "$MDL_HOST_B" &&
        ip link add "$a" type veth peer name "$b" &&
        ip link set "$a" netns "$MDL_HOST_A" && ip link set "$b" netns "$MDL_HOST_B" &&
        ip -n "$MDL_HOST_A" link set "$a" name $MDL_HOSTS_IFACE &&
        ip -n "$MDL_HOST_B" link set "$b" name $MDL_HOSTS_IFACE &&
        ip -n "$MDL_HOST_A" addr add "$subnet.1/24" dev $MDL_HOSTS_IFACE &&
        ip -n "$MDL_HOST_B" addr add "$subnet.2/24" dev $MDL_HOSTS_IFACE &&
        ip -n "$MDL_HOST_A" link set lo up && ip -n "$MDL_HOST_B" link set lo up &&
        ip -n "$MDL_HOST_A" link set $MDL_HOSTS_IFACE up && ip -n "$MDL_HOST_B" link set $MDL_HOSTS_IFACE up ||
        return 1
    # The ssh stand-in: [ssh options] HOST command... runs the command in namespace HOST,
    # with a temporary directory of the host's own: both hosts have the machine's host
    # name, so Open MPI's daemons would otherwise make their session directories at one
    # path, and the second one's mkdir failed now and then ("File exists").
    cat >"$MDL_HOSTS_NSEXEC" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
mkdir -p "/tmp/mdl-hosts/$host"
exec ip netns exec "$host" env TMPDIR="/tmp/mdl-hosts/$host" sh -c "$*"
EOF
    chmod +x "$MDL_HOSTS_NSEXEC"
}

mdl_hosts_delete() {
    [ -n "${MDL_HOST_A:-}" ] && ip netns del "$MDL_HOST_A" 2>/dev/null
    [ -n "${MDL_HOST_B:-}" ] && ip netns del "$MDL_HOST_B" 2>/dev/null
    [ -n "${MDL_HOSTS_NSEXEC:-}" ] && rm -f "$MDL_HOSTS_NSEXEC"
    [ -n "${MDL_HOST_A:-}" ] && rm -rf "/tmp/mdl-hosts/$MDL_HOST_A" "/tmp/mdl-hosts/$MDL_HOST_B"
    return 0
}

# mdl_hosts_openmpi OSC [-x VAR ...]: Open MPI's launch line for 2 ranks on each host, in
# the array MDL_HOSTS_LAUNCH. Each emulated host has 2 slots on 2 shared cores:
# mpi_yield_when_idle, or Open MPI busy-polls. osc OSC (sm,pt2pt: sm serves the node's
# shared windows, pt2pt the rest). No rtc hwloc: the second host's orted (the same
# machine) now and then crashed in hwloc_shmem_topology_write at startup.
mdl_hosts_openmpi() {
    local osc=$1
    shift
    MDL_HOSTS_LAUNCH=(mpirun.openmpi --bind-to none --oversubscribe --mca mpi_yield_when_idle 1 --mca rtc ^hwloc
        --mca plm_rsh_agent "$MDL_HOSTS_NSEXEC" --host "$MDL_HOST_A:2,$MDL_HOST_B:2" --mca btl tcp,self
        --mca btl_tcp_if_include $MDL_HOSTS_IFACE --mca oob_tcp_if_include $MDL_HOSTS_IFACE --mca osc "$osc"
        -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$@" -n 4)
}

# mdl_hosts_mpich [-genv VAR VALUE ...]: MPICH's launch line, 2 ranks on each host, in
# MDL_HOSTS_LAUNCH. No MPIR_CVAR_NOLOCAL: hydra's hosts are MPI's nodes (shared memory
# inside each namespace), UCX over TCP between them.
mdl_hosts_mpich() {
    MDL_HOSTS_LAUNCH=(mpiexec.hydra -launcher ssh -launcher-exec "$MDL_HOSTS_NSEXEC" -iface $MDL_HOSTS_IFACE
        -hosts "$MDL_HOST_A:2,$MDL_HOST_B:2" -genv UCX_TLS self,tcp -genv UCX_NET_DEVICES $MDL_HOSTS_IFACE
        "$@" -n 4)
}

#!/usr/bin/env bash
# The engine-choice grid (issue 3): benches/grid/grid_bench.c for every
# (MPI, transport, ranks) that can run on this machine.
#
#   benches/grid/run_grid.sh [--quick] [--mpi "openmpi mpich"] [--ranks "2 4"]
#                            [--transports "shm tcp tcp1g twohosts twonodes"] [--no-build]
#                            [--results DIR]
#
# Transports:
#   shm       shared memory (Open MPI: btl self,vader; MPICH: default ch4 shm)
#   tcp       TCP over loopback (Open MPI: btl tcp,self on lo + osc pt2pt;
#             MPICH: MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=lo)
#   tcp1g     the same, inside a network namespace of this script whose loopback is
#             shaped to 1 Gbit/s with tc tbf (netem is not available here)
#   twohosts  two network namespaces joined by a veth pair (unshaped), 2 ranks in each,
#             launched through an ssh stand-in (ip netns exec NS sh -c ...); all traffic
#             over TCP on the veth (intra-host pairs too). Needs 4 ranks. The 4 ranks
#             share 2 cores: Open MPI gets mpi_yield_when_idle (each emulated host
#             alone looks undersubscribed to it). The library counts the ranks of the
#             machine by its boot id, so its MDL_WAIT=auto needs no help here.
#   twonodes  the same two hosts, but each one MPI node with shared memory inside (Open
#             MPI: osc sm,pt2pt; MPICH: without MPIR_CVAR_NOLOCAL), as real nodes are:
#             the node-local variant then mixes copies within a host with an engine
#             between them. Not in the default set (the history of the grid has none).
# Namespaces are created here and deleted on exit (also on error or Ctrl-C).
#
# Each point gets a fresh raw window and fresh loaders (grid_bench.c), so that the
# forced engines, AUTO and the floors run on data of the same age.
#
# Output: benches/grid/results/grid.csv (one row per point, see grid_bench.c),
# benches/grid/results/runs.md (each combination: ran / skipped and why, seconds),
# or the same two files in --results DIR;
# logs in target/grid/logs/. --quick (smoke test, ~2-3 min): every combination, batch
# {4, 256} x sample {2 KB}, few steps; writes target/grid/quick/ instead of results/.
#
# Step counts (per point: the engines, AUTO and the floors interleaved, a warm-up, then
# N steps of each with N adaptive to a time budget; the DDStore-style loop in a block of
# its own; see grid_bench.c). Knobs (environment): BUDGET, LIMIT, DD_BUDGET, DD_LIMIT,
# NMAX (seconds per point; Open MPI, and MPICH at <= cores ranks); SLOW_BUDGET, SLOW_LIMIT, SLOW_NMAX, SLOW_SKIP (MPICH with more
# ranks than cores: its blocking calls busy-poll, a DDStore-style step at batch 1024
# takes ~30 s, so a DDStore point predicted above SLOW_SKIP seconds per step is left
# empty); RUN_TIMEOUT seconds per run; QUIET_MAX / QUIET_WAIT (wait before each run
# until other jobs use less than QUIET_MAX % of the CPUs, at most QUIET_WAIT s);
# FINALIZE_GRACE (s after the last point before a run hanging in MPI_Finalize is stopped).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
QUICK=0
BUILD=1
RESULTS=
MPIS="openmpi mpich"
RANKS="2 4"
TRANSPORTS="shm tcp tcp1g twohosts"
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --no-build) BUILD=0 ;;
    --mpi) MPIS=$2; shift ;;
    --ranks) RANKS=$2; shift ;;
    --transports) TRANSPORTS=$2; shift ;;
    --results) RESULTS=$2; shift ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

CORES=$(nproc)
if [ $QUICK = 1 ]; then
    RES=$ROOT/target/grid/quick
    GRID=(--batches 4,256 --sizes 2048)
    FAST=(--budget 0.2 --limit 2 --dd-budget 0.05 --dd-limit 1 --nmin 3 --nmax 50 --warmup 1 --skip-over 10)
    SLOW=(--budget 0.1 --limit 1 --dd-budget 0.03 --dd-limit 0.5 --nmin 2 --nmax 10 --warmup 1 --skip-over 3)
    TMO=${RUN_TIMEOUT:-120}
    QUIET_WAIT=${QUIET_WAIT:-15}
else
    RES=${RESULTS:-$ROOT/benches/grid/results}
    GRID=(--batches 1,4,16,64,256,1024 --sizes 256,2048,16384)
    # At least 8 (5 when oversubscribed MPICH) steps per point even for the slowest:
    # with fewer, a median is one step on a fresh loader and AUTO has no time to learn.
    # 3 s per point: the slowest points (4 ranks on 2 cores, 16 MB per rank over TCP)
    # still got 8 steps at 1 s, where one slow step moved AUTO's median by 40% and
    # AUTO / oracle, a sum that those points dominate, by 0.1.
    FAST=(--budget "${BUDGET:-3}" --limit "${LIMIT:-12}" --dd-budget "${DD_BUDGET:-0.25}" --dd-limit "${DD_LIMIT:-3}"
        --nmin 8 --nmax "${NMAX:-200}" --warmup 2 --skip-over 30)
    SLOW=(--budget "${SLOW_BUDGET:-1}" --limit "${SLOW_LIMIT:-8}" --dd-budget 0.1 --dd-limit 1.5
        --nmin 5 --nmax "${SLOW_NMAX:-60}" --warmup 1 --skip-over "${SLOW_SKIP:-10}")
    TMO=${RUN_TIMEOUT:-900}
    QUIET_WAIT=${QUIET_WAIT:-120}
fi
LOGS=$ROOT/target/grid/logs
RUNS=$ROOT/target/grid/runs
BIN=$ROOT/target/grid
mkdir -p "$RES" "$LOGS" "$RUNS"
CSV=$RES/grid.csv
MANIFEST=$RES/runs.md
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

say() { printf '[grid %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The machine is shared: before each run, wait (up to QUIET_WAIT s) until the CPUs are
# less than QUIET_MAX % busy over one second, so that other jobs disturb it less. The
# busy percentages before and after each run go to runs.md.
QUIET_MAX=${QUIET_MAX:-30}
FINALIZE_GRACE=${FINALIZE_GRACE:-8}
cpu_busy() {
    local a b
    a=($(head -n1 /proc/stat))
    sleep 1
    b=($(head -n1 /proc/stat))
    local total=0 idle i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    idle=$((b[4] - a[4] + b[5] - a[5]))
    echo $((total > 0 ? 100 * (total - idle) / total : 0))
}
wait_quiet() {
    local start busy
    start=$(date +%s)
    while :; do
        busy=$(cpu_busy)
        if [ "$busy" -le "$QUIET_MAX" ] || [ $(($(date +%s) - start)) -ge "$QUIET_WAIT" ]; then
            echo "$busy"
            return
        fi
    done
}

# ---------------------------------------------------------------- build
declare -A HAVE STALE
for mpi in $MPIS; do
    case $mpi in openmpi | mpich) ;; *) echo "unknown MPI $mpi" >&2; exit 2 ;; esac
    lib=$ROOT/target/$mpi/release
    if [ $BUILD = 1 ] && ! "$ROOT/scripts/build.sh" "$mpi" >"$LOGS/build-$mpi.log" 2>&1; then
        say "WARNING: scripts/build.sh $mpi failed (log: $LOGS/build-$mpi.log); using the library already built, if any"
    fi
    if [ ! -f "$lib/libmdloader.so" ]; then
        say "SKIP all $mpi runs: no $lib/libmdloader.so (scripts/build.sh $mpi)"
        continue
    fi
    # runs.md names the checkout's commit: say so (there too) when the library is older
    # than what it is built from.
    stale=$(find "$ROOT/src" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" "$ROOT/build.rs" "$ROOT/cbindgen.toml" \
        -newer "$lib/libmdloader.so" -type f 2>/dev/null | head -n 1)
    if [ -n "$stale" ]; then
        STALE[$mpi]="libmdloader.so older than ${stale#"$ROOT"/}: not this checkout's library"
        say "WARNING: $lib/libmdloader.so is older than ${stale#"$ROOT"/}: the $mpi figures are not those of this checkout (rebuild: scripts/build.sh $mpi)"
    fi
    if ! "mpicc.$mpi" -std=c11 -O2 -Wall -Wextra -Wno-stringop-overflow -I"$ROOT/include" -I"$ROOT/benches" \
        "$ROOT/benches/grid/grid_bench.c" -o "$BIN/grid_bench-$mpi" -L"$lib" -lmdloader \
        -Wl,-rpath,"$lib" -lm 2>"$LOGS/cc-$mpi.log"; then
        say "SKIP all $mpi runs: grid_bench.c does not compile (log: $LOGS/cc-$mpi.log)"
        continue
    fi
    HAVE[$mpi]=1
done

# ---------------------------------------------------------------- namespaces
NS_SHAPED=mdlgrid-s-$$
NS_A=mdlgrid-a-$$
NS_B=mdlgrid-b-$$
VETH=mdlgv0
NSEXEC=$BIN/nsexec-$$.sh
CREATED=()
cleanup() {
    for ns in "${CREATED[@]}"; do
        ip netns del "$ns" 2>/dev/null
    done
    ip link del "mdlg$$a" 2>/dev/null
    rm -f "$NSEXEC"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SHAPED_OK=""
TWOHOSTS_OK=""
needs() { case " $TRANSPORTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if needs tcp1g; then
    if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        SHAPED_OK="no ip/tc command"
    elif ! ip netns add "$NS_SHAPED" 2>"$LOGS/netns.err"; then
        SHAPED_OK="cannot create a network namespace: $(head -c 200 "$LOGS/netns.err")"
    else
        CREATED+=("$NS_SHAPED")
        if ! ip -n "$NS_SHAPED" link set lo up ||
            ! ip netns exec "$NS_SHAPED" tc qdisc add dev lo root tbf rate 1gbit burst 256kb latency 50ms \
                2>"$LOGS/tc.err"; then
            SHAPED_OK="tc tbf on the namespace's loopback failed: $(head -c 200 "$LOGS/tc.err")"
        else
            SHAPED_OK=ok
            say "namespace $NS_SHAPED: $(ip netns exec "$NS_SHAPED" tc qdisc show dev lo | head -n1)"
        fi
    fi
fi
if needs twohosts || needs twonodes; then
    if ! command -v ip >/dev/null; then
        TWOHOSTS_OK="no ip command"
    elif ! ip netns add "$NS_A" 2>"$LOGS/netns.err"; then
        TWOHOSTS_OK="cannot create a network namespace: $(head -c 200 "$LOGS/netns.err")"
    else
        CREATED+=("$NS_A")
        if ip netns add "$NS_B" && CREATED+=("$NS_B") &&
            ip link add "mdlg$$a" type veth peer name "mdlg$$b" &&
            ip link set "mdlg$$a" netns "$NS_A" && ip link set "mdlg$$b" netns "$NS_B" &&
            ip -n "$NS_A" link set "mdlg$$a" name $VETH && ip -n "$NS_B" link set "mdlg$$b" name $VETH &&
            ip -n "$NS_A" addr add 10.77.0.1/24 dev $VETH && ip -n "$NS_B" addr add 10.77.0.2/24 dev $VETH &&
            ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
            ip -n "$NS_A" link set $VETH up && ip -n "$NS_B" link set $VETH up 2>"$LOGS/veth.err"; then
            TWOHOSTS_OK=ok
            # The ssh stand-in: [ssh options] HOST command... runs the command in the
            # namespace named HOST.
            cat >"$NSEXEC" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
exec ip netns exec "$host" sh -c "$*"
EOF
            chmod +x "$NSEXEC"
            say "namespaces $NS_A (10.77.0.1) and $NS_B (10.77.0.2) joined by veth $VETH"
        else
            TWOHOSTS_OK="veth pair between two namespaces failed: $(head -c 200 "$LOGS/veth.err" 2>/dev/null)"
        fi
    fi
fi

# ---------------------------------------------------------------- runs
: >"$RUNS/.keep"
tmp_header=$RUNS/header.csv
# The header line, written once here: the same as grid_bench --header prints (keep them equal).
echo "mpi,transport,ranks,batch,sample,t_onesided,t_collective,t_auto,auto_onesided_steps,auto_collective_steps,t_ddstore,t_floor_rma,t_floor_a2a,n_onesided,n_collective,n_auto,n_ddstore,n_floor_rma,n_floor_a2a,auto_probes,auto_switches,pred_onesided,pred_collective,mean_sample_bytes,samples_per_rank,wait,bad,t_node,n_node,node_local_fraction,model_terms,model_params,rtt_us,auto_unsure,auto_surprise_probes,noise_onesided,noise_collective,mean_onesided,mean_collective,mean_auto" >"$tmp_header"
cp "$tmp_header" "$CSV"
{
    echo "# Grid runs ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$ROOT" rev-parse --short HEAD), $CORES cores, quick=$QUICK)"
    echo
    for mpi in "${!STALE[@]}"; do echo "WARNING, $mpi: ${STALE[$mpi]}."; echo; done
    echo "| mpi | transport | ranks | status | seconds | rows | note |"
    echo "|---|---|---|---|---:|---:|---|"
} >"$MANIFEST"
npoints=$(($(echo "${GRID[1]}" | tr ',' '\n' | wc -l) * $(echo "${GRID[3]}" | tr ',' '\n' | wc -l)))
T0=$(date +%s)
status=0
record() { echo "| $1 | $2 | $3 | $4 | $5 | $6 | $7 |" >>"$MANIFEST"; }

for mpi in $MPIS; do
    for transport in $TRANSPORTS; do
        for np in $RANKS; do
            tag="$mpi/$transport np=$np"
            if [ -z "${HAVE[$mpi]:-}" ]; then
                say "SKIP $tag: no library or benchmark for $mpi (see above)"
                record "$mpi" "$transport" "$np" skipped "" "" "library or benchmark missing"
                continue
            fi
            case $transport in
            shm | tcp) ;;
            tcp1g)
                if [ "$SHAPED_OK" != ok ]; then
                    say "SKIP $tag: $SHAPED_OK"
                    record "$mpi" "$transport" "$np" skipped "" "" "$SHAPED_OK"
                    continue
                fi
                ;;
            twohosts | twonodes)
                if [ "$np" != 4 ]; then
                    say "SKIP $tag: two hosts with 2 ranks each need 4 ranks"
                    record "$mpi" "$transport" "$np" skipped "" "" "two hosts x 2 ranks = 4 ranks only"
                    continue
                fi
                if [ "$TWOHOSTS_OK" != ok ]; then
                    say "SKIP $tag: $TWOHOSTS_OK"
                    record "$mpi" "$transport" "$np" skipped "" "" "$TWOHOSTS_OK"
                    continue
                fi
                ;;
            *)
                say "SKIP $tag: unknown transport"
                record "$mpi" "$transport" "$np" skipped "" "" "unknown transport"
                continue
                ;;
            esac
            bin=$BIN/grid_bench-$mpi
            over=()
            [ "$np" -gt "$CORES" ] && over=(--oversubscribe)
            launch=()
            envs=()
            if [ "$mpi" = openmpi ]; then
                case $transport in
                shm) launch=(mpirun.openmpi "${over[@]}" --mca btl self,vader -n "$np") ;;
                tcp | tcp1g)
                    launch=(mpirun.openmpi "${over[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo
                        --mca osc pt2pt -n "$np")
                    ;;
                twohosts)
                    # Each emulated host has 2 slots, so Open MPI would not know that the 4
                    # ranks share 2 cores and would busy-poll (56 ms per all-reduce,
                    # measured): mpi_yield_when_idle.
                    launch=(mpirun.openmpi --bind-to none --oversubscribe --mca mpi_yield_when_idle 1
                        --mca plm_rsh_agent "$NSEXEC" --host "$NS_A:2,$NS_B:2" --mca rtc ^hwloc
                        --mca btl tcp,self --mca btl_tcp_if_include $VETH --mca oob_tcp_if_include $VETH
                        --mca osc pt2pt -n "$np")
                    ;;
                twonodes)
                    launch=(mpirun.openmpi --bind-to none --oversubscribe --mca mpi_yield_when_idle 1
                        --mca plm_rsh_agent "$NSEXEC" --host "$NS_A:2,$NS_B:2" --mca rtc ^hwloc
                        --mca btl tcp,self --mca btl_tcp_if_include $VETH --mca oob_tcp_if_include $VETH
                        --mca osc sm,pt2pt -n "$np")
                    ;;
                esac
            else
                case $transport in
                shm) launch=(mpiexec.mpich -n "$np") ;;
                tcp | tcp1g)
                    envs=(MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=lo)
                    launch=(mpiexec.mpich -n "$np")
                    ;;
                twohosts)
                    # MPIR_CVAR_NOLOCAL: all ranks share the hostname, and MPICH's own
                    # shared memory would otherwise cross the namespaces. -iface: the
                    # proxies reach mpiexec by the veth address, not the hostname.
                    launch=(mpiexec.hydra -launcher ssh -launcher-exec "$NSEXEC" -iface $VETH
                        -hosts "$NS_A:2,$NS_B:2" -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS self,tcp
                        -genv UCX_NET_DEVICES $VETH -n "$np")
                    ;;
                twonodes)
                    # hydra's hosts are MPI's nodes: shared memory inside each namespace.
                    launch=(mpiexec.hydra -launcher ssh -launcher-exec "$NSEXEC" -iface $VETH
                        -hosts "$NS_A:2,$NS_B:2" -genv UCX_TLS self,tcp -genv UCX_NET_DEVICES $VETH -n "$np")
                    ;;
                esac
            fi
            case $transport in
            tcp1g) launch=(ip netns exec "$NS_SHAPED" "${launch[@]}") ;;
            twohosts | twonodes) launch=(ip netns exec "$NS_A" "${launch[@]}") ;;
            esac
            steps=("${FAST[@]}")
            [ "$mpi" = mpich ] && [ "$np" -gt "$CORES" ] && steps=("${SLOW[@]}")
            run_csv=$RUNS/$mpi-$transport-np$np.csv
            log=$LOGS/$mpi-$transport-np$np.log
            rm -f "$run_csv"
            # A run that measured nothing (the launcher failed: orted has crashed in
            # hwloc here now and then) is retried once.
            for attempt in 1 2; do
            busy_before=$(wait_quiet)
            say "RUN $tag (other load ${busy_before}% CPU; timeout ${TMO}s; log $log)"
            t0=$(date +%s)
            {
                echo "+ env ${envs[*]} ${launch[*]} $bin --mpi $mpi --transport $transport ${GRID[*]} ${steps[*]}"
            } >"$log"
            env "${envs[@]}" timeout -k 10 "$TMO" "${launch[@]}" "$bin" --mpi "$mpi" --transport "$transport" \
                "${GRID[@]}" "${steps[@]}" --csv "$run_csv" >>"$log" 2>&1 &
            pid=$!
            tail -n +1 -f --pid=$pid "$log" | grep --line-buffered -E ' np=|VERIFICATION|verification|rror' |
                sed -u 's/^ *//; s/^/    /' &
            tailpid=$!
            # MPICH 4.0.2 over UCX TCP sometimes hangs in MPI_Finalize after correct
            # results (ENVIRONMENT.md): FINALIZE_GRACE seconds after the last point, stop it.
            done_at=""
            while kill -0 $pid 2>/dev/null; do
                if [ -z "$done_at" ] && grep -q "grid_bench: done" "$log"; then done_at=$(date +%s); fi
                if [ -n "$done_at" ] && [ $(($(date +%s) - done_at)) -ge "$FINALIZE_GRACE" ]; then
                    say "$tag: still in MPI_Finalize ${FINALIZE_GRACE}s after the last point; stopping it"
                    kill -TERM $pid 2>/dev/null
                    break
                fi
                sleep 1
            done
            wait $pid
            rc=$?
            wait $tailpid 2>/dev/null
            secs=$(($(date +%s) - t0))
            busy_after=$(cpu_busy)
            rows=0
            [ -f "$run_csv" ] && rows=$(wc -l <"$run_csv")
            if [ "$rc" != 0 ] && [ "$rows" = 0 ] && [ "$attempt" = 1 ]; then
                say "$tag: nothing measured (exit status $rc; log $log.attempt1): retrying once"
                mv "$log" "$log.attempt1"
                continue
            fi
            break
            done
            if [ "$rows" -gt 0 ]; then
                cat "$run_csv" >>"$CSV"
            fi
            if [ "$rc" = 0 ] && [ "$rows" = "$npoints" ]; then
                say "DONE $tag: $rows points in ${secs}s"
                record "$mpi" "$transport" "$np" ok "$secs" "$rows" "CPU busy before/after: ${busy_before}%/${busy_after}%"
            elif [ "$rows" = "$npoints" ] && grep -q "grid_bench: done" "$log"; then
                # Every point was measured (the rows are kept), but the job did not end:
                # MPICH over UCX/TCP can stay in MPI_Finalize for ever, pure MPI too
                # (tests/c/repro/mpich_tcp_finalize_hang.c). A failure of the run all the same.
                say "FAILED $tag: $rows points in ${secs}s, then exit status $rc: MPI_Finalize did not return"
                record "$mpi" "$transport" "$np" failed "$secs" "$rows" "CPU busy before/after: ${busy_before}%/${busy_after}%; all points measured, then MPI_Finalize did not return (exit status $rc)"
                status=1
            else
                say "FAILED $tag: exit status $rc, $rows of $npoints points (log: $log)"
                tail -n 15 "$log" | sed 's/^/    | /'
                record "$mpi" "$transport" "$np" failed "$secs" "$rows" "exit status $rc; see $log"
                status=1
            fi
        done
    done
done
total=$(($(date +%s) - T0))
echo >>"$MANIFEST"
echo "Total: ${total} s." >>"$MANIFEST"
say "all runs done in ${total}s: $CSV ($(($(wc -l <"$CSV") - 1)) points), $MANIFEST"
exit $status

#!/bin/sh
# Check `inferd topo`: the machine, the usable set and the placement plan it prints.
#
# Why: workers must be pinned to the cores this process may really use (DESIGN.md §5),
# as in a container: its affinity mask and its cgroup's CPU quota, not the host's core
# count. This runs the real binary
#   - on this machine, as is and under `taskset -c 0` (usable cores = 1, and a second
#     worker is reported as oversubscribed, never silently);
#   - in a cgroup of its own with a CPU quota of 1.5 CPUs (cgroup v1 cpu controller or
#     v2 cpu.max, when this user may create one; skipped otherwise, but for root: see
#     skip() below), and in a cpuset cgroup of CPU 0 (the machine stays whole, CPU 0
#     alone usable);
#   - on an hwloc synthetic machine of 2 packages x 4 cores x 2 hyperthreads, where the
#     exact plans are known: default, workers x threads, use_logical_core, node_id, quota;
#   - on an hwloc XML export of a 2-core machine (--xml), and the same with a core that
#     holds no PU, cut short, or with an entity (refused, naming the line); its DTD is
#     never read;
#   - with bad options: exit status 2, exactly one line on stderr, nothing on stdout.
# A status >= 128 (a crash, a sanitizer abort) always fails.
#
# Usage: topo_test.sh INFERD_BIN WORKDIR
# Prints one line per case and "N passed, N failed, N skipped"; exits 1 on any failure.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 INFERD_BIN WORKDIR" >&2
    exit 2
fi
inferd=$1 work=$2
[ -x "$inferd" ] || { echo "topo_test: $inferd is not an executable" >&2; exit 2; }
mkdir -p "$work" || exit 2

passed=0 failed=0 skipped=0
case_name= case_status=0 case_why=

# begin NAME EXPECTED_STATUS COMMAND...: runs COMMAND, keeps its stdout and stderr.
begin() {
    case_name=$1 want=$2
    shift 2
    case_why=
    case_status=0
    "$@" >"$work/$case_name.out" 2>"$work/$case_name.err" || case_status=$?
    if [ "$case_status" -ge 128 ]; then
        case_why="$case_why; killed by a signal (status $case_status)"
    elif [ "$case_status" -ne "$want" ]; then
        case_why="$case_why; exit status $case_status, expected $want"
    fi
}

# out_has REGEX: stdout has a line matching REGEX (grep -E).
out_has() {
    grep -Eq -- "$1" "$work/$case_name.out" || case_why="$case_why; stdout lacks /$1/"
}
out_lacks() {
    grep -Eq -- "$1" "$work/$case_name.out" && case_why="$case_why; stdout has /$1/"
}
# one_error_line REGEX: exactly one line on stderr, matching REGEX; nothing on stdout.
one_error_line() {
    lines=$(awk 'END { print NR }' "$work/$case_name.err")
    [ "$lines" = 1 ] || case_why="$case_why; $lines lines on stderr, expected 1"
    grep -Eq -- "$1" "$work/$case_name.err" || case_why="$case_why; stderr lacks /$1/"
    [ -s "$work/$case_name.out" ] && case_why="$case_why; output on stdout"
}
quiet_stderr() {
    [ -s "$work/$case_name.err" ] && case_why="$case_why; stderr not empty: $(head -c 200 "$work/$case_name.err")"
}

end() {
    if [ -z "$case_why" ]; then
        passed=$((passed + 1))
        echo "ok    $case_name"
    else
        failed=$((failed + 1))
        echo "FAIL  $case_name:${case_why#;}"
        sed 's/^/      | /' "$work/$case_name.out" "$work/$case_name.err" | head -40
    fi
}

# skip NAME WHY: a case this machine cannot run. As root (CI runs as root, on a machine
# that can run them all) that is a failure: a test that cannot run has not passed.
# INFERD_TEST_ALLOW_SKIP=1 makes it a skip there too (a container without a writable
# cgroup tree, say), said on its own line and in the summary.
skip() {
    if [ "$(id -u)" = 0 ] && [ "${INFERD_TEST_ALLOW_SKIP:-0}" != 1 ]; then
        failed=$((failed + 1))
        echo "FAIL  $1: not run: $2 (as root it must run; INFERD_TEST_ALLOW_SKIP=1 to skip it)"
        return
    fi
    skipped=$((skipped + 1))
    echo "skip  $1: $2"
}

# ---- this machine --------------------------------------------------------------------

begin machine 0 "$inferd" topo
out_has '^machine: this machine$'
out_has '^  [0-9]+ packages?, [0-9]+ NUMA nodes?, [0-9]+ physical cores?, [0-9]+ logical CPUs?$'
out_has '^    core 0: cpus [0-9]'
out_has '^usable: [1-9][0-9]* of [0-9]+ physical cores?'
out_has '^  cpu quota: '
out_has '^plan: [1-9][0-9]* workers?, physical cores only$'
out_has '^  worker 0: NUMA node [0-9]+, [1-9][0-9]* threads?, cpus [0-9]'
out_lacks 'oversubscribed'
quiet_stderr
end

if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
    # The affinity mask is honoured: one usable core, one thread on cpu 0.
    begin taskset_cpu0 0 taskset -c 0 "$inferd" topo
    out_has '^usable: 1 of [0-9]+ physical cores?, 1 of [0-9]+ logical CPUs? \(cpus 0\)$'
    out_has '^  worker 0: NUMA node [0-9]+, 1 thread, cpus 0 \(cores 0\)$'
    out_has '^  uses 1 of 1 usable physical cores$'
    out_has '^plan: 1 worker,'
    end

    # Two workers on one core: a plan, and it says so.
    begin taskset_cpu0_two_workers 0 taskset -c 0 "$inferd" topo --workers 2
    out_has '^  worker 1: NUMA node [0-9]+, 1 thread, cpus 0 '
    out_has '^  uses 1 of 1 usable physical cores \(oversubscribed\)$'
    out_has '^warning: 2 workers on 1 usable physical cores: workers share cores \(oversubscribed\)'
    end
else
    skip taskset_cpu0 "taskset cannot run here"
fi

# ---- this machine in a cgroup with a CPU quota of 1.5 CPUs -------------------------------

cgroup= quota_file=
if [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] 2>/dev/null; then
    cgroup=/sys/fs/cgroup/cpu/inferd_topo_test_$$
    mkdir "$cgroup" 2>/dev/null && echo 150000 >"$cgroup/cpu.cfs_quota_us" 2>/dev/null &&
        echo 100000 >"$cgroup/cpu.cfs_period_us" 2>/dev/null && quota_file=$cgroup/cpu.cfs_quota_us
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cgroup=/sys/fs/cgroup/inferd_topo_test_$$
    mkdir "$cgroup" 2>/dev/null && echo "150000 100000" >"$cgroup/cpu.max" 2>/dev/null && quota_file=$cgroup/cpu.max
fi
if [ -n "$quota_file" ]; then
    begin cgroup_quota 0 sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" topo' sh "$cgroup" "$inferd"
    out_has "^  cpu quota: 1.50 CPUs \\($quota_file\\): at most 1 computing thread$"
    out_has '^  worker 0: NUMA node [0-9]+, 1 thread, '
    out_has '^  uses 1 of 1 usable physical cores$'
    end
else
    skip cgroup_quota "cannot make a cgroup with a CPU quota here"
fi
[ -n "$cgroup" ] && rmdir "$cgroup" 2>/dev/null

# ---- this machine in a cpuset cgroup of CPU 0 alone --------------------------------------
# The machine stays whole and the cut shows in `usable`, as taskset's does (hwloc drops
# what a cpuset leaves out unless asked to keep it: "usable: 1 of 1" hid the cut).

cpuset= cpuset_ok=
total_pus=$(awk '/^  [0-9]+ packages?,/ { print $(NF - 2) }' "$work/machine.out")
if [ "${total_pus:-1}" -gt 1 ] && [ -w /sys/fs/cgroup/cpuset/cpuset.cpus ] 2>/dev/null; then
    cpuset=/sys/fs/cgroup/cpuset/inferd_topo_test_$$
    mkdir "$cpuset" 2>/dev/null && echo 0 >"$cpuset/cpuset.cpus" 2>/dev/null &&
        cat /sys/fs/cgroup/cpuset/cpuset.mems >"$cpuset/cpuset.mems" 2>/dev/null && cpuset_ok=1
elif [ "${total_pus:-1}" -gt 1 ] && grep -qw cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cpuset=/sys/fs/cgroup/inferd_topo_test_cpuset_$$
    mkdir "$cpuset" 2>/dev/null && echo 0 >"$cpuset/cpuset.cpus" 2>/dev/null && cpuset_ok=1
fi
if [ -n "$cpuset_ok" ]; then
    begin cgroup_cpuset_cpu0 0 sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" topo' sh "$cpuset" "$inferd"
    out_has "^  [0-9]+ packages?, [0-9]+ NUMA nodes?, [0-9]+ physical cores?, $total_pus logical CPUs$"
    out_has "^usable: 1 of [0-9]+ physical cores?, 1 of $total_pus logical CPUs \\(cpus 0\\)$"
    out_has '^  worker 0: NUMA node [0-9]+, 1 thread, cpus 0 \(cores 0\)$'
    end
else
    skip cgroup_cpuset_cpu0 "cannot make a cpuset cgroup here, or this machine has one CPU"
fi
[ -n "$cpuset" ] && rmdir "$cpuset" 2>/dev/null

# ---- a synthetic machine: 2 packages x (1 NUMA node, 4 cores x 2 PUs) -------------------

synth="pack:2 numa:1 core:4 pu:2"

begin synthetic_default 0 "$inferd" topo --synthetic "$synth"
out_has "^machine: synthetic '$synth'$"
out_has '^  2 packages, 2 NUMA nodes, 8 physical cores, 16 logical CPUs$'
out_has '^    core 5: cpus 10-11$'
out_has '^usable: 8 of 8 physical cores, 16 of 16 logical CPUs \(cpus 0-15\)$'
out_has '^plan: 2 workers, physical cores only$'
out_has '^  worker 0: NUMA node 0, 4 threads, cpus 0,2,4,6 \(cores 0-3\)$'
out_has '^  worker 1: NUMA node 1, 4 threads, cpus 8,10,12,14 \(cores 4-7\)$'
out_has '^  uses 8 of 8 usable physical cores$'
out_lacks '^warning'
quiet_stderr
end

begin synthetic_workers_threads_fit 0 "$inferd" topo --synthetic "$synth" --workers 4 --threads-per-worker 2
out_has '^plan: 4 workers,'
out_has '^  worker 3: NUMA node 1, 2 threads, cpus 12,14 \(cores 6-7\)$'
out_lacks '^warning'
end

begin synthetic_threads_lowered 0 "$inferd" topo --synthetic "$synth" --workers 3 --threads-per-worker 4
out_has '^  worker 2: NUMA node 0, 2 threads, cpus 4,6 \(cores 2-3\)$'
out_has '^  uses 6 of 8 usable physical cores$'
out_has '^warning: threads_per_worker 4 reduced to 2: 3 workers x 4 threads do not fit'
end

begin synthetic_oversubscribed 0 "$inferd" topo --synthetic "$synth" --workers 9
out_has '^  worker 8: NUMA node 0, 1 thread, cpus 0 \(cores 0\)$'
out_has '^warning: 9 workers on 8 usable physical cores: workers share cores \(oversubscribed\); use at most 8 workers or use_logical_core$'
end

begin synthetic_logical 0 "$inferd" topo --synthetic "$synth" --use-logical-core --workers 4
out_has '^plan: 4 workers, logical cores allowed$'
out_has '^  worker 0: NUMA node 0, 4 threads, cpus 0-3 \(cores 0-1\)$'
out_has '^  uses 16 of 16 usable logical CPUs$'
end

begin synthetic_node_id 0 "$inferd" topo --synthetic "$synth" --node-id 1
out_has '^plan: 1 worker, physical cores only, NUMA node 1 only$'
out_has '^  worker 0: NUMA node 1, 4 threads, cpus 8,10,12,14 \(cores 4-7\)$'
end

begin synthetic_cpus 0 "$inferd" topo --synthetic "$synth" --cpus 2-9
out_has '^usable: 4 of 8 physical cores, 8 of 16 logical CPUs \(cpus 2-9\)$'
out_has '^    core 0: cpus 0-1 \(not usable\)$'
out_has '^  worker 0: NUMA node 0, 3 threads, cpus 2,4,6 \(cores 1-3\)$'
out_has '^  worker 1: NUMA node 1, 1 thread, cpus 8 \(cores 4\)$'
end

begin synthetic_quota 0 "$inferd" topo --synthetic "$synth" --cpu-quota 3
out_has '^  cpu quota: 3.00 CPUs \(given\): at most 3 computing threads$'
out_has '^  worker 0: NUMA node 0, 2 threads, cpus 0,2 \(cores 0-1\)$'
out_has '^  worker 1: NUMA node 1, 1 thread, cpus 8 \(cores 4\)$'
out_has '^warning: CPU quota of 3.00 CPUs \(given\): using 3 of 8 usable physical cores$'
end

# An hwloc XML export (lstopo --of xml) of a 2-core machine: its machine and plan; the same
# with a core that holds no PU: one line naming the line and the object, exit 2.
cat >"$work/small.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" allowed_nodeset="0x00000001">
    <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001"/>
      </object>
      <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001">
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001"/>
      </object>
    </object>
  </object>
</topology>
XML
begin xml_export 0 "$inferd" topo --xml "$work/small.xml"
out_has '^  1 package, 1 NUMA node, 2 physical cores, 2 logical CPUs$'
out_has '^  worker 0: NUMA node 0, 2 threads, cpus 0-1 \(cores 0-1\)$'
end
grep -v 'type="PU" os_index="1"' "$work/small.xml" >"$work/core_without_pu.xml"
head -n 8 "$work/small.xml" >"$work/truncated.xml"

# libxml2 reads the export without fetching anything or expanding an entity. trap.dtd is
# a FIFO that nothing writes: opening it would block, and the case would time out. The
# DOCTYPE names it as the DTD, which is never read (XML_PARSE_DTDLOAD is not given); a
# DOCTYPE that declares entities is refused before any is used, and an entity that is not
# declared is an error.
rm -f "$work/trap.dtd" && mkfifo "$work/trap.dtd"
sed "s|\"hwloc2.dtd\"|\"$work/trap.dtd\"|" "$work/small.xml" >"$work/dtd_not_read.xml"
sed -e "s|SYSTEM \"hwloc2.dtd\">|[<!ENTITY one \"1\"><!ENTITY e SYSTEM \"$work/trap.dtd\">]>|" \
    -e 's|<object type="PU" os_index="1" |<object type="PU" os_index="\&one;" |' \
    -e 's|local_memory="1073741824"/>|local_memory="1073741824">\&e;</object>|' "$work/small.xml" >"$work/entity_declared.xml"
sed 's|<object type="PU" os_index="1" |<object type="PU" os_index="1\&e;" |' "$work/small.xml" >"$work/entity_undeclared.xml"
begin xml_dtd_not_read 0 timeout 20 "$inferd" topo --xml "$work/dtd_not_read.xml"
out_has '^  1 package, 1 NUMA node, 2 physical cores, 2 logical CPUs$'
quiet_stderr
end

begin help 0 "$inferd" topo --help
out_has '^usage: inferd topo '
end

# ---- bad options ---------------------------------------------------------------------------

bad() {
    name=$1 regex=$2
    shift 2
    begin "$name" 2 "$inferd" topo "$@"
    one_error_line "$regex"
    end
}
bad bad_workers_word '^inferd topo: --workers wants 0\.\.4096: x' --workers x
bad bad_workers_negative '^inferd topo: --workers wants 0\.\.4096: -1' --workers -1
bad bad_threads_missing '^inferd topo: missing value for: --threads-per-worker' --threads-per-worker
bad bad_node_word '^inferd topo: --node-id wants a NUMA node number' --node-id one
bad bad_node_absent '^inferd topo: node_id 7: no such NUMA node \(nodes: 0-1\)$' --synthetic "$synth" --node-id 7
bad bad_option '^inferd topo: unknown option: --bogus' --bogus
bad bad_short_option '^inferd topo: unknown option: -z' -z
bad bad_argument '^inferd topo: unexpected argument: extra' extra
bad bad_synthetic "^inferd topo: topology: bad hwloc synthetic description 'pack:two'$" --synthetic pack:two
bad bad_cpus "^inferd topo: topology: bad CPU list 'x-y'" --synthetic "$synth" --cpus x-y
bad bad_cpus_trailing "^inferd topo: topology: bad CPU list '1x,0'" --synthetic "$synth" --cpus 1x,0
bad bad_cpus_semicolon "^inferd topo: topology: bad CPU list '0;1'" --synthetic "$synth" --cpus '0;1'
bad bad_cpus_none "^inferd topo: topology: CPU list '99' names no CPU this process may use" --synthetic "$synth" --cpus 99
bad bad_quota '^inferd topo: --cpu-quota wants a number of CPUs: abc' --cpu-quota abc
bad bad_xml "^inferd topo: topology: cannot read hwloc XML '/nonexistent.xml'" --xml /nonexistent.xml
bad bad_xml_core_without_pu "^inferd topo: topology: xml .*core_without_pu.xml line 10: object Core holds no PU$" \
    --xml "$work/core_without_pu.xml"
bad bad_xml_truncated "^inferd topo: topology: xml .*truncated.xml line 8: the document ends inside <object>$" --xml "$work/truncated.xml"
begin bad_xml_entity_declared 2 timeout 20 "$inferd" topo --xml "$work/entity_declared.xml"
one_error_line "^inferd topo: topology: xml .*entity_declared.xml line 3: the DOCTYPE before <topology> declares"
end
bad bad_xml_entity_undeclared "^inferd topo: topology: xml .*entity_undeclared.xml line 11: Entity 'e' not defined$" \
    --xml "$work/entity_undeclared.xml"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

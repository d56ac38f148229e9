#!/usr/bin/env python3
"""Write a SimGrid platform (not named platform.py: that would shadow Python's own module for plot.py): a Dragonfly in the style of Perlmutter's GPU partition
(HPE Slingshot 11), and its hostfile (RANKS_PER_NODE ranks on each node, in order).

    make_platform.py <ranks> <platform.xml> <hostfile>

Figures (README.md says where they come from): 16 nodes per switch, 4 switches per
chassis, 8 chassis per group (32 switches: one cabinet), all-to-all links within a
group, 200 Gb/s = 25 GB/s per link and per node, 1.5 us per link hop (Slingshot's
~2 us MPI latency over a 3-hop route stays in range), 4 ranks per node (one per GPU).
"""
import math
import os
import sys

NODES_PER_SWITCH, SWITCHES_PER_CHASSIS, CHASSIS_PER_GROUP = 16, 4, 8
RANKS_PER_NODE = 4
BANDWIDTH, LATENCY, NODE_SPEED = "25GBps", "1.5us", "1Gf"

# PLATFORM_LINKS=<between two chassis>,<between two switches> (default 1,1): more
# parallel links inside a group, to see what the group's thin paths cost (README.md).
LINKS_CHASSIS, LINKS_SWITCH = (int(x) for x in os.environ.get("PLATFORM_LINKS", "1,1").split(","))

ranks, xml_path, hosts_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
nodes = math.ceil(ranks / RANKS_PER_NODE)
groups = math.ceil(nodes / (NODES_PER_SWITCH * SWITCHES_PER_CHASSIS * CHASSIS_PER_GROUP))
# SimGrid's DRAGONFLY: "groups,links between two groups;chassis per group,links between
# two chassis;switches per chassis,links between two switches;nodes per switch".
topo = f"{groups},1;{CHASSIS_PER_GROUP},{LINKS_CHASSIS};{SWITCHES_PER_CHASSIS},{LINKS_SWITCH};{NODES_PER_SWITCH}"
total = groups * CHASSIS_PER_GROUP * SWITCHES_PER_CHASSIS * NODES_PER_SWITCH
with open(xml_path, "w") as f:
    f.write(f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="dragonfly" prefix="node-" suffix="" radical="0-{total - 1}" core="{RANKS_PER_NODE}"
           speed="{NODE_SPEED}" bw="{BANDWIDTH}" lat="{LATENCY}" topology="DRAGONFLY" topo_parameters="{topo}"/>
</platform>
""")
with open(hosts_path, "w") as f:
    f.writelines(f"node-{r // RANKS_PER_NODE}\n" for r in range(ranks))
print(f"platform: Dragonfly {topo} ({groups} group(s), {nodes} nodes used of {total}), "
      f"{BANDWIDTH}, {LATENCY} a hop, {RANKS_PER_NODE} ranks/node, node speed {NODE_SPEED}")

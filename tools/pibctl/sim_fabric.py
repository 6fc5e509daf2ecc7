"""Simulated fabrics: thousands of switches and CAs that one switch process
simulates beside the guests (fabric-switch/src/sim_fabric.hh).

A fabric comes from a generator, an ibnetdiscover output, or a fabric
file (the switch's own format, docs/wire.md "Simulated fabrics"):

    fat-tree:k=K,n=N       a k-ary n-tree: N levels of K^(N-1) switches of
                           2K ports, K^N CAs
    torus:XxYxZ[,hosts=H]  switches in a torus of any dimensions, each with
                           H CAs (default 1)
    dragonfly:a=A,p=P,h=H  A routers a group in a full mesh, P CAs and H
                           global links a router, A*H+1 groups
    FILE                   ibnetdiscover's output, or a fabric file

A generator's `vls=N` (1, 2, 4 or 8; 1 by default) gives every simulated
port N data VLs (docs/wire.md, "Virtual lanes"): what opensm's
torus-2QoS, and dfsssp on a topology with cycles, need.

Guests take CA places: of the fabric's CAs, the ones `place()` picks are
cut out, and the switch ports they were cabled to become the process's
ports 1..N, in order.
"""

import re
import shlex
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

SWITCH_GUID = 0x0250494253500000  # "PIBSP"; node k: + k
CA_GUID = 0x0250494243000000      # "PIBC"; CA k: + 4k (its ports: + 1, + 2)
MAX_NODES = 48 * 1024             # SimulatedFabric::kMaxNodes
MAX_SWITCH_PORTS = 254
VLS = (1, 2, 4, 8)                # the data VLs a simulated port may offer


class FabricError(Exception):
    pass


@dataclass
class Node:
    switch: bool
    guid: int
    ports: int
    description: str


@dataclass
class SimFabric:
    nodes: list = field(default_factory=list)
    links: list = field(default_factory=list)  # ((node, port), (node, port))
    vls: int = 1  # the data VLs of every simulated port
    torus_shape: tuple = ()  # a torus generator's dimensions

    def add(self, switch: bool, ports: int, description: str, guid: int = 0) -> int:
        if not guid:
            guid = SWITCH_GUID + len(self.nodes) if switch else CA_GUID + 4 * len(self.nodes)
        self.nodes.append(Node(switch, guid, ports, description))
        return len(self.nodes) - 1

    def link(self, a: int, a_port: int, b: int, b_port: int) -> None:
        self.links.append(((a, a_port), (b, b_port)))

    @property
    def cas(self) -> list:
        return [i for i, n in enumerate(self.nodes) if not n.switch]

    @property
    def switches(self) -> list:
        return [i for i, n in enumerate(self.nodes) if n.switch]

    def validate(self) -> "SimFabric":
        if not self.nodes or len(self.nodes) > MAX_NODES:
            raise FabricError(f"a simulated fabric has 1 to {MAX_NODES} nodes, "
                              f"not {len(self.nodes)}")
        used = set()
        for end in (e for link in self.links for e in link):
            node, port = end
            if not 1 <= port <= self.nodes[node].ports:
                raise FabricError(f"{self.nodes[node].description}: no port {port}")
            if end in used:
                raise FabricError(f"{self.nodes[node].description}: port {port} has two cables")
            used.add(end)
        for n in self.nodes:
            if n.ports > (MAX_SWITCH_PORTS if n.switch else 2):
                raise FabricError(f"{n.description}: {n.ports} ports")
        return self


def fat_tree(k: int, n: int) -> SimFabric:
    """A k-ary n-tree: level 0 the leaves. Switch <w, l> (w: n-1 digits
    base k) has ports 1..k down and k+1..2k up; its up port k+1+j leads to
    <w with digit l set to j, l+1>, at that one's down port 1 + w[l]."""
    if k < 2 or n < 1 or k ** n > MAX_NODES:
        raise FabricError(f"fat-tree:k={k},n={n}: k from 2, n from 1, k^n CAs up to {MAX_NODES}")
    fab = SimFabric()
    words = list(product(range(k), repeat=n - 1))
    ids = {}
    for level in range(n):
        for w in words:
            name = "".join(map(str, w)) or "0"
            ids[w, level] = fab.add(True, 2 * k, f"fat-tree L{level} S{name}")
    for level in range(n - 1):
        for w in words:
            for j in range(k):
                up = w[:level] + (j,) + w[level + 1:]
                fab.link(ids[w, level], k + 1 + j, ids[up, level + 1], 1 + w[level])
    for w in words:
        for x in range(k):
            ca = fab.add(False, 1, f"fat-tree CA {''.join(map(str, w + (x,)))} HCA-1")
            fab.link(ids[w, 0], 1 + x, ca, 1)
    return fab


def torus(dims: list, hosts: int = 1) -> SimFabric:
    """Switches on a torus of `dims`; for dimension d, port 2d+1 leads to
    the next switch and 2d+2 to the one before; CAs on the ports after."""
    if not dims or any(d < 2 for d in dims) or hosts < 0:
        raise FabricError(f"torus:{'x'.join(map(str, dims))}: every dimension from 2")
    fab = SimFabric(torus_shape=tuple(dims))
    ports = 2 * len(dims) + hosts
    ids = {}
    for at in product(*(range(d) for d in dims)):
        ids[at] = fab.add(True, ports, f"torus S{'.'.join(map(str, at))}")
    for at, s in ids.items():
        for d, size in enumerate(dims):
            nxt = at[:d] + ((at[d] + 1) % size,) + at[d + 1:]
            fab.link(s, 2 * d + 1, ids[nxt], 2 * d + 2)
        for h in range(hosts):
            ca = fab.add(False, 1, f"torus CA {'.'.join(map(str, at))}/{h} HCA-1")
            fab.link(s, 2 * len(dims) + 1 + h, ca, 1)
    return fab


def dragonfly(a: int, p: int, h: int) -> SimFabric:
    """A*H+1 groups of A routers in a full mesh (ports P+1..P+A-1), P CAs
    a router (ports 1..P) and H global links (ports P+A..P+A+H-1): global
    link t = r*H + j of group G leads to group G+t+1, at its link
    A*H-1-t, so every two groups share one."""
    groups = a * h + 1
    if a < 1 or p < 0 or h < 1 or groups * a * (p + 1) > MAX_NODES:
        raise FabricError(f"dragonfly:a={a},p={p},h={h}: too large, or a or h below 1")
    fab = SimFabric()
    radix = p + (a - 1) + h
    rid = {(g, r): fab.add(True, radix, f"dragonfly G{g} R{r}")
           for g in range(groups) for r in range(a)}
    for g in range(groups):
        for r in range(a):
            for r2 in range(r + 1, a):  # the group's mesh
                fab.link(rid[g, r], p + 1 + (r2 - 1), rid[g, r2], p + 1 + r)
            for j in range(h):
                t = r * h + j
                g2, t2 = (g + t + 1) % groups, a * h - 1 - t
                if (g, t) < (g2, t2):
                    fab.link(rid[g, r], p + a + j, rid[g2, t2 // h], p + a + t2 % h)
    for (g, r), s in rid.items():
        for x in range(p):
            ca = fab.add(False, 1, f"dragonfly CA G{g} R{r} {x} HCA-1")
            fab.link(s, 1 + x, ca, 1)
    return fab


_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)")?')
_PORT = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([SHR])-([0-9a-fA-F]+)"\[(\d+)\]')


def from_ibnetdiscover(text: str) -> SimFabric:
    """ibnetdiscover's topology output: its switches and CAs with the
    GUIDs and descriptions it found, and every cable once."""
    fab = SimFabric()
    index, cables, current = {}, set(), None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        node = _NODE.match(line)
        if node:
            kind, ports, _, guid, desc = node.groups()
            if kind == "Rt":
                raise FabricError(f"line {number}: routers are not simulated")
            guid = int(guid, 16)
            if guid in index:
                raise FabricError(f"line {number}: node {guid:#x} again")
            index[guid] = current = fab.add(kind == "Switch", int(ports),
                                            (desc or f"{guid:#x}")[:63], guid)
            continue
        port = _PORT.match(line)
        if port and current is not None:
            local, _, guid, remote = port.groups()
            cables.add((current, int(local), int(guid, 16), int(remote)))
    for a, a_port, guid, b_port in sorted(cables):
        if guid not in index:
            raise FabricError(f"a cable to {guid:#x}, which the output does not describe")
        b = index[guid]
        if (b, b_port) < (a, a_port) and (b, b_port, fab.nodes[a].guid, a_port) in cables:
            continue  # listed at both ends: taken once
        fab.link(a, a_port, b, b_port)
    return fab.validate()


def from_fabric_file(text: str) -> SimFabric:
    """A fabric file (the switch's own format); its attach statements are
    left to place()."""
    fab = SimFabric()
    index = {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise FabricError(f"line {number}: {e}") from None
        if not words:
            continue
        try:
            if words[0] in ("switch", "ca"):
                guid = int(words[1], 0)
                index[guid] = fab.add(words[0] == "switch", int(words[2], 0), words[3], guid)
            elif words[0] == "link":
                fab.link(index[int(words[1], 0)], int(words[2], 0),
                         index[int(words[3], 0)], int(words[4], 0))
            elif words[0] == "vls":
                fab.vls = int(words[1], 0)
                if fab.vls not in VLS:
                    raise ValueError("vls is 1, 2, 4 or 8")
            elif words[0] != "attach":
                raise FabricError(f"no statement {words[0]!r}")
        except (IndexError, ValueError, KeyError) as e:
            raise FabricError(f"line {number}: {line.strip()!r}: {e}") from None
    return fab.validate()



def parse_spec(spec: str) -> SimFabric:
    """A generator's spec, or a file: ibnetdiscover's output or a fabric file."""
    kind, _, args = spec.partition(":")
    try:
        if kind == "fat-tree":
            kw = _keywords(args, ("k", "n"), optional=("vls",))
            return _with_vls(fat_tree(kw["k"], kw["n"]), kw)
        if kind == "torus":
            shape, _, rest = args.partition(",")
            kw = _keywords(rest, (), optional=("hosts", "vls"))
            return _with_vls(torus([int(d) for d in shape.split("x")], kw.get("hosts", 1)), kw)
        if kind == "dragonfly":
            kw = _keywords(args, ("a", "p", "h"), optional=("vls",))
            return _with_vls(dragonfly(kw["a"], kw["p"], kw["h"]), kw)
    except ValueError as e:
        raise FabricError(f"{spec}: {e}") from None
    path = Path(spec)
    if not path.is_file():
        raise FabricError(f"{spec}: neither a generator (fat-tree:k=K,n=N, torus:XxYxZ, "
                          "dragonfly:a=A,p=P,h=H) nor a file")
    text = path.read_text(errors="replace")
    if _NODE.search(text) or re.search(r"^\s*(Switch|Ca)\s", text, re.M):
        return from_ibnetdiscover(text)
    return from_fabric_file(text)


def _with_vls(fab: SimFabric, kw: dict) -> SimFabric:
    fab.vls = kw.get("vls", 1)
    if fab.vls not in VLS:
        raise ValueError(f"vls={fab.vls}: 1, 2, 4 or 8")
    return fab.validate()


def _keywords(text: str, names: tuple, optional: tuple = ()) -> dict:
    """`names` must be given; `optional` may be."""
    kw = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in names + optional:
            raise ValueError(f"unknown parameter {key!r} (takes {', '.join(names + optional)})")
        kw[key] = int(value)
    missing = [n for n in names if n not in kw]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    return kw


def torus_2qos_conf(fab: SimFabric) -> str:
    """opensm's torus-2QoS.conf (torus-2QoS.conf(5)) for a fabric of the
    torus generator: its radix in each of 2 or 3 dimensions, and the seed
    of each: the link from the switch at the origin to the next one in it
    (port 2d+1, the generator's "plus" direction)."""
    shape = fab.torus_shape
    if len(shape) not in (2, 3):
        raise FabricError("torus-2QoS routes tori of 2 or 3 dimensions; this fabric is "
                          + (f"a torus of {len(shape)}" if shape else "not the torus generator's"))
    guid = {n.description: n.guid for n in fab.nodes if n.switch}
    origin = (0,) * len(shape)

    def at(coordinates):
        return guid[f"torus S{'.'.join(map(str, coordinates))}"]
    lines = [f"torus {' '.join(map(str, shape + (1,) * (3 - len(shape))))}"]
    for d, axis in enumerate("xyz"[:len(shape)]):
        step = origin[:d] + (1,) + origin[d + 1:]
        lines.append(f"{axis}p_link {at(origin):#x} {at(step):#x}")
    return "\n".join(lines) + "\n"


def place(fab: SimFabric, guests: int) -> list:
    """The CAs guests take, spread over the fabric's CAs: the first and the
    last, and the rest evenly between, so that guests' paths cross it."""
    cas = fab.cas
    if guests > len(cas):
        raise FabricError(f"{guests} guests and {len(cas)} CA places in the fabric")
    if guests <= 1:
        return cas[:guests]
    return [cas[round(i * (len(cas) - 1) / (guests - 1))] for i in range(guests)]


def render(fab: SimFabric, guest_cas: list) -> str:
    """The fabric file with the CAs in `guest_cas` cut out: the switch
    ports they were cabled to are its attach statements, in that order."""
    taken = set(guest_cas)
    attach = {}
    lines = [f"# {len(fab.switches)} switches, {len(fab.cas) - len(taken)} simulated CAs, "
             f"{len(taken)} guests' places"]
    if fab.vls != 1:
        lines.append(f"vls {fab.vls}")
    for i, n in enumerate(fab.nodes):
        if i not in taken:
            lines.append(f'{"switch" if n.switch else "ca"} {n.guid:#x} {n.ports} '
                         f'"{n.description}"')
    for (a, a_port), (b, b_port) in fab.links:
        if a in taken or b in taken:
            ca, (sw, sw_port) = (a, (b, b_port)) if a in taken else (b, (a, a_port))
            if fab.nodes[sw].switch:
                attach[ca] = (sw, sw_port)
            continue
        lines.append(f"link {fab.nodes[a].guid:#x} {a_port} {fab.nodes[b].guid:#x} {b_port}")
    for ca in guest_cas:
        if ca not in attach:
            raise FabricError(f"{fab.nodes[ca].description} has no cable to a switch")
        sw, port = attach[ca]
        lines.append(f"attach {fab.nodes[sw].guid:#x} {port}")
    return "\n".join(lines) + "\n"

"""What a fabric is made of: switches, guests, and the cables between them.

`./pib fabric up` builds one from --vms/--switches (a chain) or reads one
from a topology file (--topology FILE). The file format, one statement per
line, `#` starts a comment:

    switch NAME [ports=N] [guid=0xHEX]
    vm vmN SWITCH:PORT [SWITCH:PORT] [personality=mlx5]
                                        # HCA port 1 (and port 2); mlx5: the
                                        # HCA is a ConnectX (docs/mlx5.md)
    link SWITCH:PORT SWITCH:PORT
    tcp-listen SWITCH:PORT HOST:PORT    # a switch on another host dials in
    tcp-connect SWITCH:PORT HOST:PORT   # dial a switch on another host
    fault SWITCH:PORT SPEC...           # inject faults from the start (see
                                        # docs/user-guide.md, "Fault injection")
    fault NAME:GUID:PORT SPEC...        # the same on a cable inside the simulated
                                        # fabric NAME, at port PORT of node GUID
    capture SWITCH:PORT FILE            # record the port's packets from the start
                                        # to a pcap file ("Packet capture")
    share DIR                           # a host directory every guest has at
                                        # the same path ("RDMA in your CI")
    simulated NAME SPEC places=N        # a whole fabric of simulated switches
                                        # and CAs as switch NAME, its ports 1..N
                                        # the CA places guests take; SPEC: a
                                        # generator or a file (sim_fabric.py,
                                        # "Simulated fabrics" in the user guide)

Guests are named vm1..vmN (their hostnames and management addresses
follow from N). Every switch port holds at most one cable.
"""

import os
from collections import deque
from dataclasses import asdict, dataclass, field

SWITCH_GUID = 0x0250494253570000  # "PIBSW"; the k-th switch gets + k
MAX_SWITCH_PORTS = 254
MAX_VMS = 64
HCA_PORTS = 2
PERSONALITIES = ("pib", "mlx5")  # pib-hca's personality property


class TopologyError(Exception):
    pass


@dataclass
class Switch:
    name: str
    ports: int = 8
    guid: int = 0
    tcp_listen: dict = field(default_factory=dict)   # port -> "HOST:PORT"
    tcp_connect: dict = field(default_factory=dict)  # port -> "HOST:PORT"
    faults: dict = field(default_factory=dict)       # port -> "loss=5% dup=1% ..."
    captures: dict = field(default_factory=dict)     # port -> absolute pcap path
    simulate: str = ""  # a simulated fabric's spec (sim_fabric.py); ports: its CA places
    # A simulated fabric's cable ends inside it: "0xGUID:PORT" -> "loss=1% ..."
    link_faults: dict = field(default_factory=dict)


@dataclass
class Guest:
    name: str
    index: int
    cables: list = field(default_factory=list)  # [switch, port] per HCA port, from port 1
    personality: str = "pib"  # the HCA's: pib, or mlx5 (a ConnectX)


@dataclass
class Link:
    a: str
    a_port: int
    b: str
    b_port: int


@dataclass
class Topology:
    switches: list = field(default_factory=list)
    guests: list = field(default_factory=list)
    links: list = field(default_factory=list)
    # The `share` statement's directory; the fabric keeps it, not the
    # topology it saves (a snapshot does not depend on it).
    share: str = field(default="", compare=False)

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["share"]
        return data

    @staticmethod
    def from_dict(data: dict) -> "Topology":
        def ports_of(d):
            return {int(k): v for k, v in d.items()}
        return Topology(
            switches=[Switch(s["name"], s["ports"], s["guid"], ports_of(s["tcp_listen"]),
                             ports_of(s["tcp_connect"]), ports_of(s.get("faults", {})),
                             ports_of(s.get("captures", {})), s.get("simulate", ""),
                             s.get("link_faults", {}))
                      for s in data["switches"]],
            guests=[Guest(g["name"], g["index"], [tuple(c) for c in g["cables"]],
                          g.get("personality", "pib"))
                    for g in data["guests"]],
            links=[Link(**link) for link in data["links"]],
        )

    def neighbours(self, switch: str):
        """(local port, remote switch, remote port) for every inter-switch
        cable of `switch`."""
        for link in self.links:
            if link.a == switch:
                yield link.a_port, link.b, link.b_port
            if link.b == switch:
                yield link.b_port, link.a, link.a_port

    def first_hops(self, src: str, dst: str) -> set:
        """The ports of `src` that start a shortest path to `dst`: where a
        minimum-hop routing engine such as opensm's may send traffic."""
        if src == dst:
            return set()
        dist = {dst: 0}
        queue = deque([dst])
        while queue:
            node = queue.popleft()
            for _, other, _ in self.neighbours(node):
                if other not in dist:
                    dist[other] = dist[node] + 1
                    queue.append(other)
        if src not in dist:
            return set()
        return {port for port, other, _ in self.neighbours(src)
                if dist.get(other) == dist[src] - 1}

    def validate(self) -> "Topology":
        names = set()
        for s in self.switches:
            if s.name in names:
                raise TopologyError(f"switch {s.name}: the name is used twice")
            names.add(s.name)
            if not 1 <= s.ports <= MAX_SWITCH_PORTS:
                raise TopologyError(f"switch {s.name}: ports must be 1..{MAX_SWITCH_PORTS}")
        if not self.switches:
            raise TopologyError("a fabric needs at least one switch")
        if not 1 <= len(self.guests) <= MAX_VMS:
            raise TopologyError(f"a fabric needs 1..{MAX_VMS} VMs")
        indices = sorted(g.index for g in self.guests)
        if indices != list(range(1, len(self.guests) + 1)):
            raise TopologyError("VMs must be named vm1..vmN without gaps")
        guids = [s.guid for s in self.switches]
        if len(set(guids)) != len(guids):
            raise TopologyError("two switches have the same GUID")

        used = {}

        def take(switch, port, what):
            if switch not in names:
                raise TopologyError(f"{what}: no switch named {switch}")
            ports = self.switch(switch).ports
            if not 1 <= port <= ports:
                raise TopologyError(f"{what}: {switch} has ports 1..{ports}, not {port}")
            if (switch, port) in used:
                raise TopologyError(f"{what}: {switch}:{port} is already cabled to "
                                    f"{used[(switch, port)]}")
            used[(switch, port)] = what

        for g in self.guests:
            if not 1 <= len(g.cables) <= HCA_PORTS:
                raise TopologyError(f"{g.name}: give 1 or {HCA_PORTS} switch ports")
            for n, (switch, port) in enumerate(g.cables, 1):
                take(switch, port, f"{g.name} port {n}")
        for link in self.links:
            what = f"link {link.a}:{link.a_port} {link.b}:{link.b_port}"
            for end in (link.a, link.b):
                if end in names and self.switch(end).simulate:
                    raise TopologyError(f"{what}: {end} is a simulated fabric; only guests "
                                        "take its places")
            take(link.a, link.a_port, what)
            take(link.b, link.b_port, what)
        for s in self.switches:
            for port in (*s.tcp_listen, *s.tcp_connect):
                take(s.name, port, f"TCP link of {s.name}")
            for what, ports in (("fault", s.faults), ("capture", s.captures)):
                for port in ports:
                    if not 1 <= port <= s.ports:
                        raise TopologyError(f"{what} on {s.name}: it has ports 1..{s.ports}, "
                                            f"not {port}")
        self._check_connected()
        return self

    def _check_connected(self) -> None:
        """One opensm, in vm1, manages the fabric: everything must be
        reachable from vm1 (unless a TCP link may close the gap)."""
        if any(s.tcp_listen or s.tcp_connect for s in self.switches):
            return
        seen = set()
        vm1 = next(g for g in self.guests if g.index == 1)
        frontier = [vm1.cables[0][0]]
        while frontier:
            switch = frontier.pop()
            if switch not in seen:
                seen.add(switch)
                frontier.extend(other for _, other, _ in self.neighbours(switch))
        for s in self.switches:
            if s.name not in seen:
                raise TopologyError(f"switch {s.name} is not connected to vm1's switch")


def chain(vms: int, switches: int) -> Topology:
    """switch1..switchN in a chain: the last port of switch k is cabled to
    the second-to-last port of switch k-1. The VMs go round-robin over the
    switches, from port 1 up."""
    if not 1 <= switches <= 16:
        raise TopologyError("--switches must be between 1 and 16")
    if not 1 <= vms <= MAX_VMS:
        raise TopologyError(f"--vms must be between 1 and {MAX_VMS}")
    per_switch = -(-vms // switches)
    ports = max(8, per_switch + 2)
    topo = Topology()
    for k in range(1, switches + 1):
        topo.switches.append(Switch(f"switch{k}", ports, SWITCH_GUID + k))
        if k > 1:
            topo.links.append(Link(f"switch{k}", ports, f"switch{k - 1}", ports - 1))
    for i in range(1, vms + 1):
        topo.guests.append(Guest(f"vm{i}", i, [(f"switch{(i - 1) % switches + 1}",
                                                (i - 1) // switches + 1)]))
    return topo.validate()


def _cable_end(text: str, where: str):
    switch, sep, port = text.rpartition(":")
    if not sep or not switch or not port.isdigit():
        raise TopologyError(f"{where}: expected SWITCH:PORT, got {text!r}")
    return switch, int(port)


def _address(text: str, where: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise TopologyError(f"{where}: expected HOST:PORT, got {text!r}")
    return text


def _switch_port(topo: Topology, text: str, where: str):
    """SWITCH:PORT of a switch declared above: (the Switch, the port)."""
    switch, port = _cable_end(text, where)
    try:
        return topo.switch(switch), port
    except KeyError:
        raise TopologyError(f"{where}: no switch named {switch} (yet)") from None


def _inner_end(topo: Topology, text: str, where: str):
    """NAME:GUID:PORT, the end of a cable inside the simulated fabric NAME:
    (the Switch, "0xGUID:PORT"). The switch process says whether that
    node and cable exist when it starts."""
    name, guid, port = text.split(":")
    try:
        sw = topo.switch(name)
    except KeyError:
        raise TopologyError(f"{where}: no switch named {name} (yet)") from None
    if not sw.simulate:
        raise TopologyError(f"{where}: {name} is not a simulated fabric: SWITCH:PORT names "
                            "its ports")
    try:
        number = int(guid, 16 if guid.lower().startswith("0x") else 10)
    except ValueError:
        number = -1
    if not 0 < number < 1 << 64 or not port.isdigit() or not 1 <= int(port) <= 254:
        raise TopologyError(f"{where}: expected NAME:GUID:PORT, got {text!r}")
    return sw, f"{number:#x}:{int(port)}"


def _simulated(topo: Topology, args: list, where: str) -> Switch:
    """simulated NAME SPEC places=N: a file SPEC is taken as absolute."""
    if len(args) != 3 or not args[2].startswith("places="):
        raise TopologyError(f"{where}: simulated needs NAME SPEC places=N")
    name, spec, places = args[0], args[1], args[2].split("=", 1)[1]
    if not places.isdigit():
        raise TopologyError(f"{where}: bad value in {args[2]!r}")
    if ":" not in spec or os.path.exists(spec):
        spec = os.path.abspath(spec)
    return Switch(name, int(places), SWITCH_GUID + len(topo.switches) + 1, simulate=spec)


def simulated(spec: str, vms: int) -> Topology:
    """A simulated fabric of `spec` with guests vm1..vmN in its CA places."""
    if not 1 <= vms <= MAX_VMS:
        raise TopologyError(f"--vms must be between 1 and {MAX_VMS}")
    if ":" not in spec or os.path.exists(spec):
        spec = os.path.abspath(spec)
    topo = Topology(switches=[Switch("fabric", vms, SWITCH_GUID + 1, simulate=spec)])
    topo.guests = [Guest(f"vm{i}", i, [("fabric", i)]) for i in range(1, vms + 1)]
    return topo.validate()


def parse(text: str, source: str = "topology") -> Topology:
    topo = Topology()
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{number}"
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        kind, args = words[0], words[1:]
        if kind == "switch":
            if not args:
                raise TopologyError(f"{where}: switch needs a name")
            sw = Switch(args[0], guid=SWITCH_GUID + len(topo.switches) + 1)
            for opt in args[1:]:
                key, _, value = opt.partition("=")
                try:
                    if key == "ports":
                        sw.ports = int(value)
                    elif key == "guid":
                        sw.guid = int(value, 16)
                    else:
                        raise TopologyError(f"{where}: unknown switch option {opt!r}")
                except ValueError:
                    raise TopologyError(f"{where}: bad value in {opt!r}") from None
            if ":" in sw.name:
                raise TopologyError(f"{where}: a switch name cannot contain ':'")
            topo.switches.append(sw)
        elif kind == "vm":
            if len(args) < 2:
                raise TopologyError(f"{where}: vm needs a name and SWITCH:PORT")
            name = args[0]
            if not (name.startswith("vm") and name[2:].isdigit() and int(name[2:]) > 0):
                raise TopologyError(f"{where}: VMs are named vm1, vm2, ...; not {name!r}")
            words = [a for a in args[1:] if not a.startswith("personality=")]
            personality = "pib"
            for word in args[1:]:
                if word.startswith("personality="):
                    personality = word.split("=", 1)[1]
            if personality not in PERSONALITIES:
                raise TopologyError(f"{where}: personality={personality}: "
                                    f"one of {', '.join(PERSONALITIES)}")
            topo.guests.append(Guest(name, int(name[2:]), [_cable_end(a, where) for a in words],
                                     personality))
        elif kind == "link":
            if len(args) != 2:
                raise TopologyError(f"{where}: link needs two SWITCH:PORT ends")
            (a, pa), (b, pb) = (_cable_end(a, where) for a in args)
            topo.links.append(Link(a, pa, b, pb))
        elif kind in ("tcp-listen", "tcp-connect"):
            if len(args) != 2:
                raise TopologyError(f"{where}: {kind} needs SWITCH:PORT and HOST:PORT")
            sw, port = _switch_port(topo, args[0], where)
            table = sw.tcp_listen if kind == "tcp-listen" else sw.tcp_connect
            table[port] = _address(args[1], where)
        elif kind == "fault":
            if len(args) < 2:
                raise TopologyError(f"{where}: fault needs SWITCH:PORT and what to inject")
            if args[0].count(":") == 2:
                sw, end = _inner_end(topo, args[0], where)
                sw.link_faults[end] = " ".join(args[1:])
                continue
            sw, port = _switch_port(topo, args[0], where)
            # The switch checks the words when it starts (and says which is wrong).
            sw.faults[port] = " ".join(args[1:])
        elif kind == "capture":
            if len(args) != 2:
                raise TopologyError(f"{where}: capture needs SWITCH:PORT and a file")
            sw, port = _switch_port(topo, args[0], where)
            sw.captures[port] = os.path.abspath(args[1])
        elif kind == "simulated":
            topo.switches.append(_simulated(topo, args, where))
        elif kind == "share":
            if len(args) != 1:
                raise TopologyError(f"{where}: share needs one directory")
            topo.share = os.path.abspath(args[0])
        else:
            raise TopologyError(f"{where}: unknown statement {kind!r}")
    topo.guests.sort(key=lambda g: g.index)
    try:
        return topo.validate()
    except TopologyError as e:
        raise TopologyError(f"{source}: {e}") from None

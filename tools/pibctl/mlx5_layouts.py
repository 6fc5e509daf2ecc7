"""The ConnectX personality's field constants against Linux's mlx5_ifc.h.

The core names each field of a command's input or output by its bit
offset and width (qemu-hw/core/src/mlx5/mlx5_ifc.hh), typed by hand from the
public layouts; an offset typed wrong is a bug no unit test sees, since
the tests share the constant (an XRC QP's xrcd read from next_send_psn's
place was one). This check reads the layouts themselves: mlx5_ifc.h of
each kernel whose headers the cache holds is parsed into every
structure's fields with their offsets, and each constant of the core that
says where it lives is compared with it.

A constant says where it lives through the base it is counted from: a
line `constexpr uint32_t kContext = 8 * 0x18; // ifc: create_qp_in.qpc`
makes every `field(kContext + ...)` of that file the field of qpc named
after the constant (kLogRqSize: log_rq_size), less the base's name if it
begins with it (base kQpc, kQpcPd: pd), unless its own line says
`// ifc: NAME` for a field named otherwise (`// ifc: create_mkey_out.mkey_index`
for one of another structure). A comment line `// ifc fields: cmd_hca_cap`
does the same for the fields of a namespace counted from the structure's
start."""

import re
from pathlib import Path

from pibctl import paths

# The core files whose constants are checked.
CHECKED = ("mlx5_queue_pairs.cc", "mlx5_completion_queues.cc", "mlx5_shared_receive_queues.cc",
           "mlx5_event_queues.cc", "mlx5_hca_caps.cc", "mlx5_commands.cc", "mlx5_commands_mkey.cc",
           "mlx5_commands_port.cc", "mlx5_commands_uctx.cc", "mlx5_user_memories.cc",
           "mlx5_commands_umem.cc", "mlx5_general_objects.cc", "mlx5_general_objects.hh")
SOURCE_DIR = paths.REPO / "qemu-hw" / "core" / "src" / "mlx5"

_STRUCT = re.compile(r"^(struct|union) mlx5_ifc_(\w+)_bits \{")
_FIELD = re.compile(r"^\s*u8\s+(\w+)((?:\[\w*\])*)\[(0x[0-9a-fA-F]+|\d+)\];")
_NESTED = re.compile(r"^\s*(?:struct|union) mlx5_ifc_(\w+)_bits\s+(\w+)((?:\[\w*\])*);")


def _count(dims: str):
    """The number of elements `[a][b]` dimensions give (a flexible [] or
    [0]: none; None when one is a name, which only matters to the fields
    after it)."""
    n = 1
    for d in re.findall(r"\[(\w*)\]", dims):
        if d and not d[0].isdigit():
            return None
        n *= int(d, 0) if d else 0
    return n


def _step(name: str, member: str, unit: int, n) -> int:
    if n is None:
        raise ValueError(f"mlx5_ifc_{name}_bits.{member}: an array sized by a name")
    return unit * n


def parse_ifc(text: str) -> dict:
    """{structure: (is_union, [(name, width_or_struct, count)])}."""
    structs, current = {}, None
    for line in text.splitlines():
        m = _STRUCT.match(line)
        if m:
            current = (m.group(1) == "union", [])
            structs[m.group(2)] = current
            continue
        if current is None:
            continue
        if line.startswith("};"):
            current = None
        elif m := _FIELD.match(line):
            current[1].append((m.group(1), int(m.group(3), 0), _count(m.group(2))))
        elif m := _NESTED.match(line):
            current[1].append((m.group(2), m.group(1), _count(m.group(3))))
    return structs


class Layouts:
    """The fields of mlx5_ifc.h's structures, by dotted path, as (bit
    offset, width) from the start of the outermost structure."""

    def __init__(self, text: str):
        self.structs = parse_ifc(text)
        self._sizes = {}
        self._flat = {}

    def flat(self, name: str) -> dict:
        """fields(name), made once."""
        if name not in self._flat:
            self._flat[name] = self.fields(name)
        return self._flat[name]

    def size(self, name: str) -> int:
        if name not in self._sizes:
            is_union, members = self.structs[name]
            sizes = [_step(name, m, w if isinstance(w, int) else self.size(w), n)
                     for m, w, n in members]
            self._sizes[name] = max(sizes, default=0) if is_union else sum(sizes)
        return self._sizes[name]

    def fields(self, name: str, base: int = 0, prefix: str = "") -> dict:
        out = {}
        is_union, members = self.structs[name]
        offset = base
        for member, width, n in members:
            if isinstance(width, int):
                out[prefix + member] = (offset, width)
                step = _step(name, member, width, n)
            else:
                out.update(self.fields(width, offset, f"{prefix}{member}."))
                step = _step(name, member, self.size(width), n)
            if not is_union:
                offset += step
        return out


_SECTION = re.compile(r"^\s*// ifc fields: ([\w.]+)")
_BASE = re.compile(r"constexpr uint32_t (k\w+) = ([^;]+);\s*// ifc: ([\w.]+)")
_CONST = re.compile(r"constexpr uint32_t (k\w+) = ([^;]+);")
_FIELD_CONST = re.compile(r"constexpr Field (k\w+) = field\(([^,]+), (\d+)\);(?:\s*// ifc: ([\w.]+))?")


def _snake(constant: str) -> str:
    """kLogRqSize -> log_rq_size."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", constant[1:]).lower()


def _evaluate(expr: str, names: dict) -> int:
    tokens = re.findall(r"0x[0-9a-fA-F]+|\d+|k\w+|[-+*/() ]|<<", expr)
    if "".join(tokens) != expr:
        raise ValueError(expr)
    return int(eval(" ".join(str(names[t]) if t.startswith("k") else t for t in tokens), {}))


def core_fields(source: str):
    """The fields of a core file that name their place: [(constant, path,
    bit, width)], each path a structure then its members."""
    names, bases, out = {}, {}, []
    section = None  # the structure of the base-less fields that follow
    # A declaration clang-format wrapped after its '=' is one line here.
    source = re.sub(r"=\s*\n\s*field\(", "= field(", source)
    for line in source.splitlines():
        if m := _SECTION.match(line):
            section = m.group(1)
        elif line.startswith("} // namespace"):
            section = None
        if m := _BASE.search(line):
            bases[m.group(1)] = m.group(3)
        if m := _CONST.search(line):
            try:
                names[m.group(1)] = _evaluate(m.group(2).strip(), names)
            except (ValueError, KeyError):
                pass
        elif m := _FIELD_CONST.search(line):
            expr = m.group(2).strip()
            base = next((b for b in re.findall(r"k\w+", expr) if b in bases), None)
            where = bases[base] if base else section
            if not where and "." not in (m.group(4) or ""):
                continue
            name = m.group(1)
            if base and name.startswith(base) and name[len(base):len(base) + 1].isupper():
                name = "k" + name[len(base):]
            member = m.group(4) or _snake(name)
            # A dotted name is the whole path: a field of another structure.
            path = member if "." in member else f"{where}.{member}"
            out.append((m.group(1), path, _evaluate(expr, names), int(m.group(3))))
    return out


def headers():
    """The mlx5_ifc.h of each kernel whose headers the cache holds."""
    root = paths.cache_dir() / "kernel-headers"
    return sorted(root.glob("*/usr/src/linux-headers-*-common/include/linux/mlx5/mlx5_ifc.h"))


def _only_reserved(fields: dict, member: str, bit: int, width: int) -> bool:
    """Whether bits [bit, bit + width) of `member`'s structure hold nothing
    but `member` itself and fields this header reserves."""
    inner = member.rsplit(".", 1)[0] + "." if "." in member else ""
    # A structure this header lacks altogether (odp_cap's memory scheme
    # block in 6.1) lies in reserved bits of its parent, or not at all.
    while inner and not any(name.startswith(inner) for name in fields):
        inner = inner[:-1].rsplit(".", 1)[0] + "." if "." in inner[:-1] else ""
    overlapping = [name for name, (b, w) in fields.items()
                   if name.startswith(inner) and b < bit + width and bit < b + w]
    return bool(overlapping) and all(
        name == member or name.rsplit(".", 1)[-1].startswith("reserved") for name in overlapping)


def _place(fields: dict, member: str, bit: int, width: int):
    """How a constant of `width` bits at `bit` meets `member` in this
    header: "match", "absent" (the header lacks the field and reserves
    those bits: an older kernel's), or what differs."""
    where = fields.get(member)
    if where == (bit, width):
        return "match"
    if where is None:
        return "absent" if _only_reserved(fields, member, bit, width) else f"no field {member}"
    # A kernel that widened a field into its reserved neighbour (mkc's
    # log_page_size, 5 bits in 6.1, 6 in 6.12) is read right by the wider
    # constant.
    if bit <= where[0] and sum(where) <= bit + width and \
            _only_reserved(fields, member, bit, width):
        return "match"
    # A 64-bit address the header splits into halves (the low one short of
    # its alignment bits).
    low = fields.get(member[:-2] + "_l")
    if width == 64 and member.endswith("_h") and where == (bit, 32) and low and \
            low[0] == bit + 32:
        return "match"
    return f"{member} is bit 0x{where[0]:x}, {where[1]} wide"


def check(header: Path):
    """(checked, problems, absent): every named field of the CHECKED files
    against `header`; `absent` names those this header does not have but
    keeps reserved where the constant reads (an older kernel's), which
    another header must then have."""
    layouts = Layouts(header.read_text(errors="replace"))
    checked, problems, absent = 0, [], []
    for name in CHECKED:
        for constant, path, bit, width in core_fields((SOURCE_DIR / name).read_text()):
            struct, member = path.split(".", 1)
            checked += 1
            place = _place(layouts.flat(struct), member, bit, width)
            if place == "absent":
                absent.append(f"{name}: {constant} ({path})")
            elif place != "match":
                problems.append(f"{name}: {constant} (bit 0x{bit:x}, {width} wide, in {struct}): "
                                f"{place}")
    return checked, problems, absent

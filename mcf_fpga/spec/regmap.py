"""Register maps: the registers an AXI4-Lite slave decodes, and a slave's map of windows.

The hardware's register files (``hdl.bus.regfile.AXI4LiteRegisterFile``) are built from these
``Register`` definitions, and every generated description of a map (IP-XACT ``component.xml``,
the PYNQ ``.hwh`` registers, the C header and the Markdown page: ``boards.ip``) is written from
the same objects, so a description cannot drift from the decoder.

* ``Register(name, offset, access, width, reset, doc, clear, fields)``: one 32-bit word at a
  byte ``offset`` (a multiple of 4) of its window; ``width`` low bits are implemented (reads of
  the bits above give 0); ``fields`` names bit ranges inside ``width`` bits, by default one
  field ``value`` covering all of them (:meth:`Register.bit_fields`).
* ``Window(name, base, addr_bits, registers)``: a window of ``2**addr_bits`` bytes at byte
  ``base`` (a multiple of its size) of a slave, holding ``registers`` at offsets inside it.
* ``RegisterMap(name, addr_bits, windows)``: a slave of ``2**addr_bits`` bytes; windows must
  not overlap. :meth:`RegisterMap.flat` lists every register with its address in the slave
  and its map-unique name ``<window>_<register>``.

Invalid definitions raise ``ValueError`` naming the register or window and the limit.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Access", "Field", "Register", "Window", "RegisterMap", "FlatRegister", "DATA_BITS", "check_registers",
           "to_json_dict", "from_json_dict"]

#: every register is one 32-bit AXI4-Lite word
DATA_BITS = 32


class Access(enum.Enum):
    RW = "rw"
    RO = "ro"
    WO = "wo"

    @property
    def ipxact(self) -> str:
        """The IP-XACT (and PYNQ .hwh) spelling: read-write, read-only, write-only."""
        return {"rw": "read-write", "ro": "read-only", "wo": "write-only"}[self.value]


@dataclass(frozen=True)
class Field:
    """Bits ``[lsb, lsb + width)`` of a register, named ``name``."""
    name: str
    lsb: int
    width: int = 1
    doc: str = ""

    @property
    def mask(self) -> int:
        """The field's bits in place (``((1 << width) - 1) << lsb``)."""
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int            # byte offset, multiple of 4
    access: Access = Access.RW
    width: int = 32
    reset: int = 0
    doc: str = ""
    clear: bool = False    #: RW only: a ``name_clr`` input puts the value back to ``reset``
    fields: tuple = ()     #: ``Field``s inside ``width`` bits; () = one field ``value``

    def __post_init__(self):
        if not self.name.isidentifier() or self.name == "bus":
            raise ValueError(f"register name must be an identifier other than 'bus', got {self.name!r}")
        if self.offset < 0 or self.offset % 4:
            raise ValueError(f"register {self.name}: offset must be a non-negative multiple of 4, "
                             f"got {self.offset:#x}")
        if not 1 <= self.width <= DATA_BITS:
            raise ValueError(f"register {self.name}: width must be in 1..{DATA_BITS}, got {self.width}")
        if self.clear and self.access is not Access.RW:
            raise ValueError(f"register {self.name}: clear needs access RW, got {self.access.name}")
        if not 0 <= self.reset < 1 << self.width:
            raise ValueError(f"register {self.name}: reset {self.reset:#x} does not fit its "
                             f"width of {self.width} bits")
        used, names = 0, set()
        for f in self.fields:
            if not isinstance(f, Field) or not f.name.isidentifier() or f.name in names:
                raise ValueError(f"register {self.name}: fields must be Fields with unique "
                                 f"identifier names, got {f!r}")
            if f.lsb < 0 or f.width < 1 or f.lsb + f.width > self.width:
                raise ValueError(f"register {self.name}: field {f.name} bits [{f.lsb}, "
                                 f"{f.lsb + f.width}) outside its width of {self.width} bits")
            if used & f.mask:
                raise ValueError(f"register {self.name}: field {f.name} overlaps another field")
            used |= f.mask
            names.add(f.name)

    def bit_fields(self) -> tuple:
        """``fields``, or one field ``value`` of ``width`` bits at bit 0 when none are named."""
        return self.fields or (Field("value", 0, self.width, self.doc),)

    @property
    def mask(self) -> int:
        """The implemented bits (``(1 << width) - 1``)."""
        return (1 << self.width) - 1


def check_registers(registers, size: int, span: str, where: str = ""):
    """``registers`` have distinct names and offsets below ``size`` (bytes), else a ValueError
    starting with ``where`` that names the register; ``span`` says what ``size`` is in it."""
    names, offsets = set(), {}
    for r in registers:
        if r.name in names:
            raise ValueError(f"{where}duplicate register name {r.name!r}")
        if r.offset in offsets:
            raise ValueError(f"{where}registers {offsets[r.offset]!r} and {r.name!r} share offset {r.offset:#x}")
        if r.offset >= size:
            raise ValueError(f"{where}register {r.name} offset {r.offset:#x} outside {span}")
        names.add(r.name)
        offsets[r.offset] = r.name


@dataclass(frozen=True)
class Window:
    """``registers`` at offsets inside ``2**addr_bits`` bytes at byte ``base`` of a slave."""
    name: str
    base: int
    addr_bits: int
    registers: tuple = ()
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "registers", tuple(self.registers))
        if not self.name.isidentifier():
            raise ValueError(f"window name must be an identifier, got {self.name!r}")
        if not 2 <= self.addr_bits <= 32:
            raise ValueError(f"window {self.name}: addr_bits must be in 2..32, got {self.addr_bits}")
        if self.base < 0 or self.base % self.size:
            raise ValueError(f"window {self.name}: base {self.base:#x} must be a non-negative "
                             f"multiple of its size {self.size:#x}")
        check_registers(self.registers, self.size, f"its {self.size:#x} bytes", f"window {self.name}: ")

    @property
    def size(self) -> int:
        return 1 << self.addr_bits


@dataclass(frozen=True)
class FlatRegister:
    """One register of a map: ``address`` in the slave, ``name`` unique in the map."""
    name: str
    address: int
    window: Window
    register: Register


@dataclass(frozen=True)
class RegisterMap:
    """A slave of ``2**addr_bits`` bytes holding ``windows`` (see the module docstring)."""
    name: str
    addr_bits: int
    windows: tuple = field(default_factory=tuple)
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "windows", tuple(self.windows))
        if not self.name.isidentifier():
            raise ValueError(f"register map name must be an identifier, got {self.name!r}")
        if not 2 <= self.addr_bits <= 40:
            raise ValueError(f"register map {self.name}: addr_bits must be in 2..40, got {self.addr_bits}")
        spans = []
        for w in self.windows:
            if w.base + w.size > self.size:
                raise ValueError(f"register map {self.name}: window {w.name} [{w.base:#x}, "
                                 f"{w.base + w.size:#x}) exceeds its {self.size:#x} bytes")
            for other in spans:
                if w.base < other.base + other.size and other.base < w.base + w.size:
                    raise ValueError(f"register map {self.name}: windows {other.name} and {w.name} overlap")
            spans.append(w)
        names = [f.name for f in self.flat()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"register map {self.name}: flat register names repeat: {', '.join(dup)}")

    @property
    def size(self) -> int:
        return 1 << self.addr_bits

    def flat(self) -> list:
        """Every register as a :class:`FlatRegister`, by address."""
        out = [FlatRegister(f"{w.name}_{r.name}", w.base + r.offset, w, r)
               for w in self.windows for r in w.registers]
        return sorted(out, key=lambda f: f.address)

    def window(self, name: str) -> Window:
        for w in self.windows:
            if w.name == name:
                return w
        raise KeyError(f"register map {self.name} has no window {name!r}")


def to_json_dict(regmap: RegisterMap) -> dict:
    """``regmap`` as plain JSON data (:func:`from_json_dict` reads it back equal)."""
    def reg(r):
        return {"name": r.name, "offset": r.offset, "access": r.access.value, "width": r.width,
                "reset": r.reset, "doc": r.doc, "clear": r.clear,
                "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "doc": f.doc} for f in r.fields]}
    return {"name": regmap.name, "addr_bits": regmap.addr_bits, "doc": regmap.doc,
            "windows": [{"name": w.name, "base": w.base, "addr_bits": w.addr_bits, "doc": w.doc,
                         "registers": [reg(r) for r in w.registers]} for w in regmap.windows]}


def from_json_dict(d) -> RegisterMap:
    """The ``RegisterMap`` of :func:`to_json_dict`'s data; ValueError naming what is malformed."""
    try:
        def reg(r):
            fields = tuple(Field(f["name"], int(f["lsb"]), int(f["width"]), str(f.get("doc", "")))
                           for f in r.get("fields", ()))
            return Register(str(r["name"]), int(r["offset"]), Access(r["access"]), int(r["width"]),
                            int(r["reset"]), str(r.get("doc", "")), bool(r.get("clear", False)), fields)
        return RegisterMap(str(d["name"]), int(d["addr_bits"]),
                           [Window(str(w["name"]), int(w["base"]), int(w["addr_bits"]),
                                   [reg(r) for r in w["registers"]], str(w.get("doc", "")))
                            for w in d["windows"]], str(d.get("doc", "")))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"register map data: missing or mistyped {exc}") from None

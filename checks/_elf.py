"""Reading a constant a shared library's exported function returns, from the file alone (no dlopen).

Why: the create gate's stack probe (checks/_loader_trace.py) must tell which NCCL torch was built with (what
torch.cuda.nccl.version() reports) without loading libtorch_cuda, whose loading is most of the 400 MB the full probe
maps and dirties. torch::cuda::nccl::version() compiles to `return <constant>`, so the answer is in the function's
first instruction. The symbol is found through the file's GNU hash table, so only a few kilobytes of a 450 MB
library are read. Anything else than a little-endian ELF64 with a GNU hash table, a file for another machine than
x86-64 (aarch64's code is another instruction set; the caller then loads the library and asks it), or a function
whose code is not one of the plain `return constant` forms (after the endbr64 a CET build puts first) answers None.
Standard library only.
"""
import struct
from typing import List, Optional, Tuple

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_SYMTAB, DT_GNU_HASH = 0, 5, 6, 0x6FFFFEF5
DT_VERDEF, DT_VERNEED = 0x6FFFFFFC, 0x6FFFFFFE
LOADER_READ = 64 * 1024  # bytes asked ahead at each table the loader reads: its string table is most of it
SYM_SIZE = 24  # Elf64_Sym
EM_X86_64 = 62
ENDBR64 = b"\xf3\x0f\x1e\xfa"  # the indirect-branch landing pad -fcf-protection puts at each function's entry


class _Image:
    """An open ELF64 file: its loadable segments (for address -> file offset) and its dynamic table."""

    def __init__(self, fh):
        self.fh = fh
        ident = self.read(0, 64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise ValueError("not a little-endian ELF64 file")
        self.machine, = struct.unpack_from("<H", ident, 18)
        phoff, = struct.unpack_from("<Q", ident, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", ident, 0x36)
        self.loads, dynamic = [], None
        for i in range(phnum):
            p_type, _flags, offset, vaddr, _paddr, filesz, _memsz = struct.unpack_from(
                "<IIQQQQQ", self.read(phoff + i * phentsize, 48))
            if p_type == PT_LOAD:
                self.loads.append((vaddr, filesz, offset))
            elif p_type == PT_DYNAMIC:
                dynamic = (offset, filesz)
        if dynamic is None:
            raise ValueError("no dynamic section")
        self.dyn = {}
        data = self.read(*dynamic)
        for pos in range(0, len(data) - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == DT_NULL:
                break
            self.dyn.setdefault(tag, value)

    def read(self, offset, size):
        self.fh.seek(offset)
        return self.fh.read(size)

    def offset(self, vaddr):
        """File offset of a virtual address inside a loadable segment's file bytes."""
        for start, size, off in self.loads:
            if start <= vaddr < start + size:
                return off + vaddr - start
        raise ValueError("address 0x%x is in no loadable segment" % vaddr)

    def symbol(self, name):
        """The value (address) of the exported symbol `name`, looked up in the GNU hash table; None if absent."""
        if DT_GNU_HASH not in self.dyn:
            return None
        table = self.offset(self.dyn[DT_GNU_HASH])
        nbuckets, symoffset, bloom_size, _shift = struct.unpack("<IIII", self.read(table, 16))
        buckets = table + 16 + 8 * bloom_size
        chain = buckets + 4 * nbuckets
        wanted = _gnu_hash(name)
        index, = struct.unpack("<I", self.read(buckets + 4 * (wanted % nbuckets), 4))
        if index < symoffset:
            return None
        symtab, strtab, raw = self.offset(self.dyn[DT_SYMTAB]), self.offset(self.dyn[DT_STRTAB]), name.encode()
        while True:
            hashed, = struct.unpack("<I", self.read(chain + 4 * (index - symoffset), 4))
            if hashed | 1 == wanted | 1:
                st_name, = struct.unpack("<I", self.read(symtab + index * SYM_SIZE, 4))
                if self.read(strtab + st_name, len(raw) + 1) == raw + b"\0":
                    value, = struct.unpack("<Q", self.read(symtab + index * SYM_SIZE + 8, 8))
                    return value or None
            if hashed & 1:
                return None
            index += 1


def loader_tables(path: str) -> List[Tuple[int, int]]:
    """(file offset, size) of the tables the dynamic loader reads in a library before running any of its code,
    beyond the ELF header and dynamic table that opening it here has just read from disk: the dynamic string
    table (its needed sonames and search paths), the version tables (their checks) and the GNU hash table.
    Why: checks/_loader_trace.py asks the kernel to read these ahead, many files at once (read_tables_ahead), so
    the loader's trace of torch's libraries does not fault them in one at a time on a node's first run."""
    with open(path, "rb") as fh:
        image = _Image(fh)
    out = []
    for tag in (DT_STRTAB, DT_VERNEED, DT_VERDEF, DT_GNU_HASH):
        if tag in image.dyn:
            try:
                out.append((image.offset(image.dyn[tag]), LOADER_READ))
            except ValueError:  # an address outside the file's bytes: nothing there to read ahead
                pass
    return out


def _gnu_hash(name):
    h = 5381
    for byte in name.encode():
        h = (h * 33 + byte) & 0xFFFFFFFF
    return h


def _code(image, name, size):
    """(address, the first `size` bytes) of x86-64 function `name`, past an endbr64; None when absent or when the
    file is for another machine."""
    if image.machine != EM_X86_64:
        return None
    address = image.symbol(name)
    if address is None:
        return None
    code = image.read(image.offset(address), size + len(ENDBR64))
    if code.startswith(ENDBR64):
        return address + len(ENDBR64), code[len(ENDBR64):]
    return address, code[:size]


def returned_integer(path: str, name: str) -> Optional[int]:
    """The integer `name()` returns when its code is `movabs rax, imm64; ret` or `mov eax, imm32; ret`; else None."""
    with open(path, "rb") as fh:
        found = _code(_Image(fh), name, 11)
    if found is None:
        return None
    code = found[1]
    if code[:2] == b"\x48\xb8" and code[10:11] == b"\xc3":
        return struct.unpack_from("<Q", code, 2)[0]
    if code[:1] == b"\xb8" and code[5:6] == b"\xc3":
        return struct.unpack_from("<I", code, 1)[0]
    return None


def returned_string(path: str, name: str, limit: int = 256) -> Optional[str]:
    """The C string `name()` returns when its code is `lea rax, [rip + disp32]; ret`; else None."""
    with open(path, "rb") as fh:
        image = _Image(fh)
        found = _code(image, name, 8)
        if found is None:
            return None
        address, code = found
        if code[:3] != b"\x48\x8d\x05" or code[7:8] != b"\xc3":
            return None
        target = address + 7 + struct.unpack_from("<i", code, 3)[0]
        text = image.read(image.offset(target), limit)
    end = text.find(b"\0")
    return text[:end].decode("utf-8", "replace") if end >= 0 else None

"""Encoders and decoders built from the declarations, one pair per (message, version).

Each pair is Python source generated from the struct and compiled once, on first use:
runs of fixed-width fields become one `struct` call, arrays of structs become inline
loops, and compact (flexible-version) lengths take a one-byte fast path. That keeps the
heartbeat path to a handful of bytecodes per field. Arrays of fixed-width elements (such
as a commit's partitions, whose metadata is nearly always empty) are read with one
`iter_unpack` and written two elements a `pack`: per element, the interpreter's work is
then little more than building the object.

Decoders accept `bytes` and never trust a length: a string, byte string or array that
claims more than the rest of the frame is refused before anything is allocated, and any
other malformation surfaces as `DecodeError`, never as IndexError or the like.
"""

from __future__ import annotations

import struct as _struct
import uuid as _uuid
from collections.abc import Callable
from typing import Any

from .exceptions import DecodeError, EncodeError, ProtocolError
from .messages import blank_maker, class_for
from .schema import BYTES, STRING, UUID, Array, Field, Message, Primitive, Struct, default_of
from .varint import ONE_BYTE_UVARINTS, read_uvarint, uvarint

_I16 = _struct.Struct(">h")
_I32 = _struct.Struct(">i")
_NULL16 = b"\xff\xff"
_NULL32 = b"\xff\xff\xff\xff"

# What a decoder turns into DecodeError: every way Python reports bytes that do not fit.
_MALFORMED = (_struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, TypeError)
# What an encoder turns into EncodeError: every way Python reports a value that does not fit.
_UNFIT = (_struct.error, AttributeError, TypeError, ValueError, OverflowError)

Decoder = Callable[..., Any]
Encoder = Callable[[Any], bytes]

_DECODERS: dict[tuple[str, int], Decoder] = {}
_ENCODERS: dict[tuple[str, int], Encoder] = {}


def decoder(message: Message, version: int) -> Decoder:
    """`decode(data: bytes, offset=0, whole=True)` -> the message.

    With `whole`, bytes left over after the message are an error; without, they are ignored.
    """
    key = (message.name, version)
    fn = _DECODERS.get(key)
    if fn is None:
        _check_version(message, version)
        fn = _DECODERS[key] = _Generator(message, version).decoder()
    return fn


def encoder(message: Message, version: int) -> Encoder:
    """`encode(obj)` -> bytes of the message body at `version` (no header, no size)."""
    key = (message.name, version)
    fn = _ENCODERS.get(key)
    if fn is None:
        _check_version(message, version)
        fn = _ENCODERS[key] = _Generator(message, version).encoder()
    return fn


def _check_version(message: Message, version: int) -> None:
    if version not in message.versions:
        raise ProtocolError(f"{message.name} has no version {version} (declared: {message.versions})")


def min_size(t: Primitive | Array | Struct, version: int, flexible: bool) -> int:
    """The fewest bytes a value of `t` can take on the wire: bounds hostile array counts."""
    if isinstance(t, Struct):
        size = sum(1 if isinstance(f.type, Struct) and version in f.nullable else min_size(f.type, version, flexible)
                   for f in t.present(version))
        return size + (1 if flexible else 0)
    if isinstance(t, Array) or t in (STRING, BYTES):
        return 1 if flexible else (2 if t is STRING else 4)
    return t.size


class _Generator:
    """Writes the source of one decoder or encoder and compiles it."""

    def __init__(self, message: Message, version: int):
        self.message = message
        self.version = version
        self.flexible = version in message.flexible
        self.lines: list[str] = []
        self.functions: list[list[str]] = []  # tagged-field helpers, compiled alongside
        self.ns: dict[str, Any] = {
            "_DecodeError": DecodeError, "_EncodeError": EncodeError, "_ProtocolError": ProtocolError,
            "_MALFORMED": _MALFORMED, "_UNFIT": _UNFIT, "_uvarint": read_uvarint, "_uv": uvarint,
            "_i16": _I16.unpack_from, "_i32": _I32.unpack_from, "_p16": _I16.pack, "_p32": _I32.pack,
            "_unpack": _struct.unpack_from, "_pack": _struct.pack, "_UUID": _uuid.UUID,
            "_UV1": ONE_BYTE_UVARINTS,
        }
        self.counter = 0
        self.label = f"{message.name} v{version}"

    # -- helpers --------------------------------------------------------------------------

    def tmp(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def const(self, value: Any, base: str = "_k") -> str:
        name = self.tmp(base)
        self.ns[name] = value
        return name

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def default_expr(self, f: Field) -> str:
        value = default_of(f)
        if isinstance(value, list):
            return "[]"
        if isinstance(f.type, Struct) and not f.has_null_default:
            return self.const(class_for(f.type), "_C") + "()"
        if value is None or isinstance(value, (bool, int, float)):
            return repr(value)
        return self.const(value, "_d")

    def compile(self, name: str) -> Callable:
        source = "\n".join(line for fn in self.functions for line in fn) + "\n" + "\n".join(self.lines)
        code = compile(source, f"<codec {self.label} {name}>", "exec")
        exec(code, self.ns)  # noqa: S102 - generated from our own declarations
        return self.ns[name]

    def helper(self, build: Callable[[], None]) -> None:
        """Run `build` with a fresh line buffer and keep its lines as a separate function."""
        saved, self.lines = self.lines, []
        build()
        self.functions.append(self.lines)
        self.lines = saved

    # -- decoding -------------------------------------------------------------------------

    def decoder(self) -> Decoder:
        struct = self.message.struct
        self.emit(0, "def decode(b, p=0, whole=True):")
        self.emit(1, "end = len(b)")
        self.emit(1, "try:")
        result = self.decode_struct(struct, 2)
        self.emit(1, "except _ProtocolError:")
        self.emit(2, "raise")
        self.emit(1, "except _MALFORMED as e:")
        self.emit(2, f"raise _DecodeError('{self.label}: malformed: ' + (str(e) or type(e).__name__)) from None")
        self.emit(1, "if whole and p != end:")
        self.emit(2, f"raise _DecodeError('{self.label}: ' + str(end - p) + ' bytes left over')")
        self.emit(1, f"return {result}")
        return self.compile("decode")

    def fail(self, indent: int, what: str) -> None:
        self.emit(indent, f"raise _DecodeError('{self.label}: {what}')")

    def decode_struct(self, struct: Struct, ind: int) -> str:
        """Emit code that reads `struct` at `p` into a new object; return its variable."""
        values: dict[str, str] = {}
        run: list[tuple[str, str]] = []  # (struct code, variable) read by one unpack

        def flush():
            if not run:
                return
            fmt = ">" + "".join(code for code, _ in run)
            unpack = self.const(_struct.Struct(fmt).unpack_from, "_u")
            self.emit(ind, f"{', '.join(v for _, v in run)}, = {unpack}(b, p)")
            self.emit(ind, f"p += {_struct.calcsize(fmt)}")
            run.clear()

        for f in struct.present(self.version):
            var = values[f.name] = self.tmp("v")
            if isinstance(f.type, Primitive) and f.type.fixed:
                run.append((f.type.struct_code, var))
            elif f.type is UUID:
                flush()
                self.decode_uuid(f, var, ind)
            elif isinstance(f.type, Struct):
                flush()
                self.decode_nested(f, var, ind)
            else:
                n = self.tmp("n")
                if self.flexible:
                    flush()
                    self.decode_length(f.type, n, ind)
                else:  # a classic length prefix is fixed-width: read it with the run
                    run.append(("h" if f.type is STRING else "i", n))
                    flush()
                self.decode_value(f, var, n, ind)
        flush()
        if self.flexible:
            self.decode_tags(struct, values, ind)
        return self.build(struct, values, ind)

    def decode_nested(self, f: Field, var: str, ind: int) -> None:
        """A struct-valued field: inline, or after a marker byte if nullable (-1 null, 1 present)."""
        if self.version not in f.nullable:
            self.emit(ind, f"{var} = {self.decode_struct(f.type, ind)}")
            return
        marker = self.tmp("m")
        self.emit(ind, "if p >= end:")
        self.fail(ind + 1, f"{f.name}: truncated")
        self.emit(ind, f"{marker} = b[p]")
        self.emit(ind, "p += 1")
        self.emit(ind, f"if {marker} == 255:")
        self.emit(ind + 1, f"{var} = None")
        self.emit(ind, f"elif {marker} != 1:")
        self.fail(ind + 1, f"{f.name}: neither null nor present")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{var} = {self.decode_struct(f.type, ind + 1)}")

    def build(self, struct: Struct, values: dict[str, str], ind: int) -> str:
        """Emit the object of `struct` from the expressions in `values`; return its variable.

        Fields missing from `values` take their defaults.
        """
        # a blank instance and slot stores: under a third of the cost of keyword construction
        obj = self.tmp("o")
        self.emit(ind, f"{obj} = {self.const(blank_maker(struct), '_B')}()")
        for f in struct.fields:
            self.emit(ind, f"{obj}.{f.name} = {values.get(f.name) or self.default_expr(f)}")
        return obj

    def decode_length(self, t: Primitive | Array, var: str, ind: int) -> None:
        """Read a length or count into `var`; -1 means null (compact: stored as n + 1)."""
        if self.flexible:
            self.emit(ind, f"{var} = b[p]")
            self.emit(ind, f"if {var} < 128:")
            self.emit(ind + 1, "p += 1")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{var}, p = _uvarint(b, p)")
            self.emit(ind, f"{var} -= 1")
        else:
            reader, width = ("_i16", 2) if t is STRING else ("_i32", 4)
            self.emit(ind, f"{var}, = {reader}(b, p)")
            self.emit(ind, f"p += {width}")

    def decode_uuid(self, f: Field, var: str, ind: int) -> None:
        self.emit(ind, "if p + 16 > end:")
        self.fail(ind + 1, f"{f.name}: truncated uuid")
        self.emit(ind, f"{var} = _UUID(bytes=b[p:p + 16])")
        self.emit(ind, "p += 16")

    def decode_value(self, f: Field, var: str, n: str, ind: int) -> None:
        """Read the string, bytes or array whose length `n` has just been read."""
        t = f.type
        self.emit(ind, f"if {n} < 0:")
        if self.version in f.nullable:
            self.emit(ind + 1, f"if {n} != -1:")
            self.fail(ind + 2, f"{f.name}: negative length")
            self.emit(ind + 1, f"{var} = None")
        else:
            self.fail(ind + 1, f"{f.name}: null or negative length in a non-nullable field")
        self.emit(ind, "else:")
        ind += 1
        if isinstance(t, Array):
            self.decode_array(f, t, n, var, ind)
            return
        self.emit(ind, f"if {n} > end - p:")
        self.fail(ind + 1, f"{f.name}: length beyond the end of the frame")
        if t is STRING:  # empty strings (metadata, client ids) are common: skip the slice
            self.emit(ind, f"{var} = b[p:p + {n}].decode() if {n} else ''")
        else:
            self.emit(ind, f"{var} = b[p:p + {n}]")
        self.emit(ind, f"p += {n}")

    def decode_array(self, f: Field, t: Array, n: str, var: str, ind: int) -> None:
        item = t.item
        least = min_size(item, self.version, self.flexible)
        self.emit(ind, f"if {n} * {least} > end - p:")
        self.fail(ind + 1, f"{f.name}: array count beyond the end of the frame")
        if isinstance(item, Primitive) and item.fixed:
            self.emit(ind, f"{var} = list(_unpack('>%d{item.struct_code}' % {n}, b, p))")
            self.emit(ind, f"p += {n} * {item.size}")
            return
        self.emit(ind, f"{var} = []")
        if isinstance(item, Struct):
            record = self.record(item)
            if record is not None:
                self.decode_records(item, record, n, var, ind)
                return
            self.emit(ind, f"for _ in range({n}):")
            self.emit(ind + 1, f"{var}.append({self.decode_struct(item, ind + 1)})")
            return
        self.emit(ind, f"for _ in range({n}):")
        if item is UUID:
            elem = self.tmp("e")
            self.decode_uuid(f, elem, ind + 1)
            self.emit(ind + 1, f"{var}.append({elem})")
        else:
            elem, k = self.tmp("e"), self.tmp("n")
            self.decode_length(item, k, ind + 1)
            self.decode_value(Field(f.name + "[]", item), elem, k, ind + 1)
            self.emit(ind + 1, f"{var}.append({elem})")

    def record(self, struct: Struct) -> list[tuple[str, Field | None, Any]] | None:
        """`struct` as one fixed-width record, if it has such a reading: (code, field, expected).

        Fixed-width fields are read as they are (expected None). A nullable string, such as
        a commit's metadata, is read as its length prefix, expected to say "empty": clients
        almost always send it so, and an array of such elements then decodes with one
        `iter_unpack` instead of a struct call and a string check per element. Structs with
        other variable-width fields have no record reading. A record is the least the element
        can take (`min_size`), so the array's count check covers all `n` of them.
        """
        present = struct.present(self.version)
        if not present:
            return None
        record = []
        for f in present:
            if isinstance(f.type, Primitive) and f.type.fixed:
                record.append((f.type.struct_code, f, None))
            elif f.type is STRING and self.version in f.nullable:
                record.append(("B", f, 1) if self.flexible else ("h", f, 0))
            else:
                return None
        if self.flexible:  # an empty tagged-field section
            record.append(("B", None, 0))
        return record

    def decode_records(self, struct: Struct, record: list[tuple[str, Field | None, Any]],
                       n: str, var: str, ind: int) -> None:
        """Emit the reading of `n` elements of `struct` into `var` as records, and the
        general reading of the rest from the first element that is not one."""
        fmt = _struct.Struct(">" + "".join(code for code, _, _ in record))
        names = [self.tmp("r") for _ in record]
        values, checks = {}, []
        for name, (_, f, expected) in zip(names, record):
            if expected is None:
                values[f.name] = name
            else:
                checks.append(f"{name} != {expected}" if expected else name)
                if f is not None:
                    values[f.name] = "''"
        if self.flexible:
            for f in struct.tagged(self.version):
                values[f.name] = self.default_expr(f)
        self.emit(ind, f"for {', '.join(names)}, in {self.const(fmt.iter_unpack, '_it')}"
                       f"(b[p:p + {n} * {fmt.size}]):")
        if checks:
            self.emit(ind + 1, f"if {' or '.join(checks)}:")
            self.emit(ind + 2, f"p += len({var}) * {fmt.size}")
            self.emit(ind + 2, f"for _ in range({n} - len({var})):")
            self.emit(ind + 3, f"{var}.append({self.decode_struct(struct, ind + 3)})")
            self.emit(ind + 2, "break")
        self.emit(ind + 1, f"{var}.append({self.build(struct, values, ind + 1)})")
        if checks:
            self.emit(ind, "else:")
            ind += 1
        self.emit(ind, f"p += {n} * {fmt.size}")

    def decode_tags(self, struct: Struct, values: dict[str, str], ind: int) -> None:
        """The tagged-field section: known tags decoded, unknown ones skipped, as Kafka does."""
        tagged = struct.tagged(self.version)
        for f in tagged:
            values[f.name] = self.tmp("v")
            self.emit(ind, f"{values[f.name]} = {self.default_expr(f)}")
        self.emit(ind, "if b[p]:")
        count, tag, size, q = self.tmp("nt"), self.tmp("tag"), self.tmp("sz"), self.tmp("q")
        self.emit(ind + 1, f"{count}, p = _uvarint(b, p)")
        self.emit(ind + 1, f"for _ in range({count}):")
        self.emit(ind + 2, f"{tag}, p = _uvarint(b, p)")
        self.emit(ind + 2, f"{size}, p = _uvarint(b, p)")
        self.emit(ind + 2, f"{q} = p + {size}")
        self.emit(ind + 2, f"if {q} > end:")
        self.fail(ind + 3, "tagged field beyond the end of the frame")
        for i, f in enumerate(tagged):
            helper = self.tmp("_tag")
            self.helper(lambda f=f, helper=helper: self.tag_decoder(f, helper))
            self.emit(ind + 2, f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
            self.emit(ind + 3, f"{values[f.name]}, r = {helper}(b, p, {q})")
            self.emit(ind + 3, f"if r != {q}:")
            self.fail(ind + 4, f"tagged field {f.name} does not fill its declared size")
        self.emit(ind + 2, f"p = {q}")
        self.emit(ind, "else:")
        self.emit(ind + 1, "p += 1")

    def tag_decoder(self, f: Field, name: str) -> None:
        self.emit(0, f"def {name}(b, p, end):")
        var = self.tmp("v")
        if isinstance(f.type, Primitive) and f.type.fixed:
            unpack = self.const(_struct.Struct(">" + f.type.struct_code).unpack_from, "_u")
            self.emit(1, f"{var}, = {unpack}(b, p)")
            self.emit(1, f"return {var}, p + {f.type.size}")
            return
        if f.type is UUID:
            self.decode_uuid(f, var, 1)
        else:
            n = self.tmp("n")
            self.decode_length(f.type, n, 1)
            self.decode_value(f, var, n, 1)
        self.emit(1, f"return {var}, p")

    # -- encoding -------------------------------------------------------------------------

    def encoder(self) -> Encoder:
        self.encode_struct(self.message.struct, "o", 2)
        body, self.lines = self.lines, []
        single = len(body) == 1 and body[0].lstrip().startswith("_a(")
        self.emit(0, "def encode(o):")
        if not single:
            self.emit(1, "parts = []")
            self.emit(1, "_a = parts.append")
        self.emit(1, "try:")
        if single:  # every field in one pack (Heartbeat's answer): its bytes are the message
            self.emit(2, "return " + body[0].strip()[3:-1])
        else:
            self.emit(2, "pass")  # a message with no fields in this version encodes to nothing
            self.lines.extend(body)
        self.emit(1, "except _ProtocolError:")
        self.emit(2, "raise")
        self.emit(1, "except _UNFIT as e:")
        self.emit(2, f"raise _EncodeError('{self.label}: ' + (str(e) or type(e).__name__)) from None")
        if not single:
            self.emit(1, "return b''.join(parts)")
        return self.compile("encode")

    def encode_struct(self, struct: Struct, obj: str, ind: int) -> None:
        run: list[tuple[str, str]] = []  # (struct code, expression) written by one pack

        def flush():
            if not run:
                return
            pack = self.const(_struct.Struct(">" + "".join(c for c, _ in run)).pack, "_s")
            self.emit(ind, f"_a({pack}({', '.join(e for _, e in run if e)}))")
            run.clear()

        for f in struct.present(self.version):
            expr = f"{obj}.{f.name}"
            if isinstance(f.type, Primitive) and f.type.fixed:
                run.append((f.type.struct_code, expr))
            elif f.type is UUID:
                run.append(("16s", f"{expr}.bytes"))
            elif isinstance(f.type, Struct):
                flush()
                self.encode_nested(f, expr, ind)
            else:
                v = self.tmp("x")
                self.encode_prepare(f, expr, v, ind)
                length = self.length_expr(f, v)
                if self.flexible:
                    flush()
                    self.emit_uvarint(length, ind)
                else:  # a classic length prefix is fixed-width: write it with the run
                    run.append(("h" if f.type is STRING else "i", length))
                    flush()
                self.encode_body(f, v, ind)
        if self.flexible:
            tagged = struct.tagged(self.version)
            if tagged:
                flush()
                self.encode_tags(tagged, obj, ind)
            else:
                run.append(("x", ""))  # an empty tagged-field section: one zero byte
        flush()

    def encode_nested(self, f: Field, expr: str, ind: int) -> None:
        v = self.tmp("x")
        self.emit(ind, f"{v} = {expr}")
        if self.version in f.nullable:
            self.emit(ind, f"if {v} is None:")
            self.emit(ind + 1, "_a(b'\\xff')")
            self.emit(ind, "else:")
            self.emit(ind + 1, "_a(b'\\x01')")
            self.encode_struct(f.type, v, ind + 1)
            return
        self.emit(ind, f"if {v} is None:")
        self.emit(ind + 1, f"raise _EncodeError('{self.label}: {f.name} is not nullable in this version')")
        self.encode_struct(f.type, v, ind)

    def encode_prepare(self, f: Field, expr: str, v: str, ind: int) -> None:
        """Bind the value of a string, bytes or array field to `v` (strings as UTF-8)."""
        self.emit(ind, f"{v} = {expr}")
        if self.version in f.nullable:
            if f.type is STRING:
                self.emit(ind, f"if {v} is not None:")
                self.emit(ind + 1, f"{v} = {v}.encode()")
            return
        self.emit(ind, f"if {v} is None:")
        self.emit(ind + 1, f"raise _EncodeError('{self.label}: {f.name} is not nullable in this version')")
        if f.type is STRING:
            self.emit(ind, f"{v} = {v}.encode()")

    def length_expr(self, f: Field, v: str) -> str:
        length = f"len({v}) + 1" if self.flexible else f"len({v})"
        if self.version in f.nullable:
            return f"({'0' if self.flexible else '-1'} if {v} is None else {length})"
        return length

    def emit_uvarint(self, expr: str, ind: int) -> None:
        k = self.tmp("k")
        self.emit(ind, f"{k} = {expr}")
        self.emit(ind, f"_a(_UV1[{k}] if {k} < 128 else _uv({k}))")

    def encode_body(self, f: Field, v: str, ind: int) -> None:
        """Write the contents of a string, bytes or array whose length is written."""
        if self.version in f.nullable:
            self.emit(ind, f"if {v} is not None:")
            ind += 1
        if not isinstance(f.type, Array):
            self.emit(ind, f"_a({v})")
            return
        item = f.type.item
        if isinstance(item, Primitive) and item.fixed:
            self.emit(ind, f"_a(_pack('>%d{item.struct_code}' % len({v}), *{v}))")
            return
        elem = self.tmp("e")
        if isinstance(item, Struct) and self.all_fixed(item):
            # a list comprehension of packs, each of two elements (a pack call costs more than
            # its fields), then the odd one out: no per-element append call
            present = item.present(self.version)
            codes = "".join(g.type.struct_code for g in present) + ("x" if self.flexible else "")
            pack = self.const(_struct.Struct(">" + codes).pack, "_s")
            pack2 = self.const(_struct.Struct(">" + codes * 2).pack, "_s")
            other, pairs = self.tmp("e"), self.tmp("i")
            args = ", ".join(f"{elem}.{g.name}" for g in present)
            args2 = ", ".join(f"{e}.{g.name}" for e in (elem, other) for g in present)
            self.emit(ind, f"{pairs} = iter({v})")
            self.emit(ind, f"parts += [{pack2}({args2}) for {elem}, {other} in zip({pairs}, {pairs})]")
            self.emit(ind, f"if len({v}) & 1:")
            self.emit(ind + 1, f"{elem} = {v}[-1]")
            self.emit(ind + 1, f"_a({pack}({args}))")
            return
        self.emit(ind, f"for {elem} in {v}:")
        if isinstance(item, Struct):
            self.encode_struct(item, elem, ind + 1)
        elif item is UUID:
            self.emit(ind + 1, f"_a({elem}.bytes)")
        else:
            x, element = self.tmp("x"), Field(f.name + "[]", item)
            self.encode_prepare(element, elem, x, ind + 1)
            length = self.length_expr(element, x)
            if self.flexible:
                self.emit_uvarint(length, ind + 1)
            else:
                self.emit(ind + 1, f"_a({'_p16' if item is STRING else '_p32'}({length}))")
            self.encode_body(element, x, ind + 1)

    def all_fixed(self, struct: Struct) -> bool:
        """Whether every field of `struct` in this version is fixed-width and untagged."""
        present = struct.present(self.version)
        return (bool(present) and not struct.tagged(self.version)
                and all(isinstance(g.type, Primitive) and g.type.fixed for g in present))

    def encode_tags(self, tagged: tuple[Field, ...], obj: str, ind: int) -> None:
        """Tagged fields are written only when they differ from their default."""
        tags = self.tmp("tags")
        self.emit(ind, f"{tags} = []")
        for f in tagged:
            helper = self.tmp("_tag")
            self.helper(lambda f=f, helper=helper: self.tag_encoder(f, helper))
            value = self.tmp("t")
            self.emit(ind, f"{value} = {obj}.{f.name}")
            default = default_of(f)
            if isinstance(default, list):
                self.emit(ind, f"if {value}:")
            else:
                self.emit(ind, f"if {value} != {self.default_expr(f)}:")
            self.emit(ind + 1, f"{tags}.append({helper}({value}))")
        self.emit(ind, f"_a(_uv(len({tags})))")
        self.emit(ind, f"parts.extend({tags})")

    def tag_encoder(self, f: Field, name: str) -> None:
        self.emit(0, f"def {name}(value):")
        self.emit(1, "parts = []")
        self.emit(1, "_a = parts.append")
        if isinstance(f.type, Primitive) and f.type.fixed:
            pack = self.const(_struct.Struct(">" + f.type.struct_code).pack, "_s")
            self.emit(1, f"_a({pack}(value))")
        elif f.type is UUID:
            self.emit(1, "_a(value.bytes)")
        else:
            v = self.tmp("x")
            self.encode_prepare(f, "value", v, 1)
            self.emit_uvarint(self.length_expr(f, v), 1)
            self.encode_body(f, v, 1)
        self.emit(1, "body = b''.join(parts)")
        self.emit(1, f"return _uv({f.tag}) + _uv(len(body)) + body")

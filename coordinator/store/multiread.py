"""ZooKeeper's multiRead (opcode 22, ZooKeeper 3.6 and later), which kazoo does not offer:
many getData and getChildren reads in one request, each answered on its own (a missing znode
fails its read only).

A new owner reads every group and offset shard of a group-partition: thousands of znodes.
One request per znode costs kazoo most of a millisecond of Python each, one thread doing it
all; one request per level of the tree costs the same few round trips whatever the number
of groups. This is a request object kazoo's connection sends like its own: a `type`, a
`serialize()` and a `deserialize()`, in ZooKeeper's jute encoding of MultiOperationRecord
and MultiResponse.
"""

from __future__ import annotations

from collections import namedtuple

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (GetChildren, GetData, MultiHeader, int_struct, multiheader_struct,
                                          read_buffer, read_string, stat_struct, write_string)
from kazoo.protocol.states import ZnodeStat

GET, CHILDREN = GetData.type, GetChildren.type


class MultiRead(namedtuple("MultiRead", "operations")):
    """`operations`: (GET or CHILDREN, absolute path) pairs. The answer is a list in the same
    order: (data, ZnodeStat) for GET, a list of child names for CHILDREN, or the exception of
    a read that failed (NoNodeError, ...)."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for kind, path in self.operations:
            b.extend(MultiHeader(kind, False, -1).serialize())
            b.extend(write_string(path))
            b.append(0)  # no watch
        return b + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list:
        results = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GET:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value or b"", stat))
            elif header.type == CHILDREN:
                count = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(data, offset)
                    children.append(child)
                results.append(children)
            else:  # -1: an error result
                err = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[err]())
            header, offset = MultiHeader.deserialize(data, offset)
        return results

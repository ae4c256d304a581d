"""Writes the small pickles of tests/snapshot.rs (run from this folder with
any Python 3.8+: `python3 make_pickles.py`; no torch needed).

- `opcodes/NAME.pickle`: one or a few values per case, together using every
  opcode Keel's pickle reader supports, written by Python's own pickler
  where it emits the opcode (protocols 2 to 5) and by hand (`raw`) where it
  does not (LIST, DICT, TUPLE, BINUNICODE8, BINBYTES8, POP, POP_MARK, DUP);
  `expected.json` holds each case's value as `canon` writes it, so the
  test compares what Keel decoded with what Python loads.
- `refused/NAME.pickle`: pickles Keel must refuse (objects, sets, text
  protocols), with the opcode its error must name in `refused.json`.
- `snapshot_small.pickle`: the real GPT-2 snapshot cut to its first 12
  segments and 60 trace entries (for fuzzing: small enough to mutate
  thousands of times), and `old_format.pickle`, `missing_key.pickle`: a
  snapshot as PyTorch 1.x wrote it (a list of segments, blocks without
  addresses, stacks in `history`), and one whose entry 1 has no `size`;
  `extreme_values.pickle`: every action with sizes, addresses and times at
  the ends of their ranges, an inconsistent history, a device with no
  history and one with no segments.
"""
import gzip, json, os, pickle, pickletools, struct

HERE = os.path.dirname(os.path.abspath(__file__))


def canon(o):
    """A JSON form that keeps the types pickle keeps."""
    if o is None or isinstance(o, bool):
        return o
    if isinstance(o, int):
        if -2**63 <= o < 2**63:
            return {"int": str(o)}
        # Keel keeps only the width of an int past 64 bits.
        return {"bigint_bytes": len(pickle.encode_long(o))}
    if isinstance(o, float):
        return {"float": repr(o)}
    if isinstance(o, str):
        return o
    if isinstance(o, (bytes, bytearray)):
        return {"bytes": o.hex()}
    if isinstance(o, list):
        return [canon(x) for x in o]
    if isinstance(o, tuple):
        return {"tuple": [canon(x) for x in o]}
    if isinstance(o, dict):
        return {"dict": [[canon(k), canon(v)] for k, v in o.items()]}
    raise TypeError(type(o))


shared = {"name": "forward", "filename": "model.py", "line": 12}
many = [str(i) for i in range(300)]  # > 256 memo entries: LONG_BINPUT/GET
cases = {
    # Protocol 2: BINPUT/BINGET, BININT1/2/BININT, LONG1, BINFLOAT,
    # BINUNICODE, TUPLE1-3, EMPTY_TUPLE, MARK+TUPLE, NONE, NEWTRUE/NEWFALSE,
    # EMPTY_LIST+APPEND(S), EMPTY_DICT+SETITEM(S).
    "proto2_mixed": (2, [None, True, False, 1, 255, 256, 65535, 65536, -1,
                         2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63, 2**64,
                         1.5, -0.25, 3.0, "héllo", (), (1,), (1, 2),
                         (1, 2, 3), (1, 2, 3, 4), [7], {"k": 1},
                         {"a": [shared, shared], "b": shared}]),
    "proto2_long_memo": (2, [many, many[::-1]]),
    # Protocol 3: bytes (SHORT_BINBYTES, BINBYTES).
    "proto3_bytes": (3, [b"abc", b"x" * 300, {"b": b""}]),
    # Protocol 4: PROTO, FRAME, MEMOIZE, SHORT_BINUNICODE, LONG_BINGET.
    "proto4_frames": (4, {"frames": [shared] * 3, "many": many + many,
                          "nested": [[1, [2, [3, {"x": None}]]]]}),
    # Protocol 5: BYTEARRAY8.
    "proto5_bytearray": (5, [bytearray(b"\x00\x01\xff"), 2**100, -2**100]),
}


def raw_cases():
    """Opcodes Python's pickler does not emit for these values."""
    def s(t):
        b = t.encode()
        return b"\x8c" + bytes([len(b)]) + b

    return {
        # LIST and DICT (protocol 0/1 builders, allowed in any protocol).
        "raw_list_dict": (b"\x80\x02(K\x01K\x02l(" + s("a") + b"K\x01" + s("b") + b"K\x02d\x86.",
                          ([1, 2], {"a": 1, "b": 2})),
        # BINUNICODE8 and BINBYTES8 (Python writes them only past 4 GB).
        "raw_wide_lengths": (b"\x80\x04(\x8d" + struct.pack("<Q", 3) + b"abc\x8e" + struct.pack("<Q", 2) + b"xyt.",
                             ("abc", b"xy")),
        # POP, POP_MARK, DUP; LONG_BINPUT/LONG_BINGET; LONG4; BINUNICODE.
        "raw_stack_ops": (b"\x80\x02]K\x060(K\x07K\x081(K\x05K\x092er\x10\x00\x00\x000j\x10\x00\x00\x00\x8b\x02\x00\x00\x00\xff\x7fX\x02\x00\x00\x00\xc3\xa9\x87.",
                          ([5, 9, 9], 32767, "é")),
    }


class Point:
    """An object: pickled by reference to its class, which Keel refuses."""


def main():
    os.makedirs(os.path.join(HERE, "opcodes"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "refused"), exist_ok=True)
    expected = {}
    used = set()
    for name, (proto, value) in cases.items():
        data = pickle.dumps(value, protocol=proto)
        assert pickle.loads(data) == value
        used.update(op.name for op, _, _ in pickletools.genops(data))
        open(os.path.join(HERE, "opcodes", name + ".pickle"), "wb").write(data)
        expected[name] = canon(value)
    for name, (data, value) in raw_cases().items():
        assert pickle.loads(data) == value, (name, pickle.loads(data))
        used.update(op.name for op, _, _ in pickletools.genops(data))
        open(os.path.join(HERE, "opcodes", name + ".pickle"), "wb").write(data)
        expected[name] = canon(value)
    json.dump(expected, open(os.path.join(HERE, "expected.json"), "w"), indent=1, sort_keys=True)
    print("opcodes used:", " ".join(sorted(used)))

    refused = {
        "set": (pickle.dumps({1, 2}, protocol=4), "EMPTY_SET"),
        "set_proto2": (pickle.dumps({1, 2}, protocol=2), "GLOBAL"),
        "object": (pickle.dumps(Point(), protocol=4), "STACK_GLOBAL"),
        "bytes_proto2": (pickle.dumps(b"ab", protocol=2), "GLOBAL"),
        "text_protocol0": (pickle.dumps([1], protocol=0), "PUT"),
    }
    want = {}
    for name, (data, op) in refused.items():
        open(os.path.join(HERE, "refused", name + ".pickle"), "wb").write(data)
        # The first opcode Keel does not read, and where it is.
        first = next((o.name, pos) for o, _, pos in pickletools.genops(data) if o.name not in used)
        want[name] = {"opcode": first[0], "byte": first[1]}
    json.dump(want, open(os.path.join(HERE, "refused.json"), "w"), indent=1, sort_keys=True)

    real = os.path.join(HERE, "..", "import", "gpt2_train_memory_snapshot.pickle.gz")
    snap = pickle.load(gzip.open(real))
    small = {
        "segments": snap["segments"][:12],
        "device_traces": [snap["device_traces"][0][:60]],
        "allocator_settings": snap["allocator_settings"],
    }
    open(os.path.join(HERE, "snapshot_small.pickle"), "wb").write(pickle.dumps(small, protocol=4))

    frame = {"filename": "train.py", "line": 7, "name": "step"}
    old = [
        {"device": 0, "address": 4096, "total_size": 3072, "allocated_size": 1536,
         "active_size": 1536, "stream": 0, "segment_type": "small",
         "blocks": [
             {"size": 1024, "state": "active_allocated",
              "history": [{"addr": 4096, "real_size": 1000, "frames": [frame]}]},
             {"size": 512, "state": "active_pending_free",
              "history": [{"addr": 5120, "real_size": 4, "frames": [frame]}]},
             {"size": 1536, "state": "inactive"},
         ]},
    ]
    open(os.path.join(HERE, "old_format.pickle"), "wb").write(pickle.dumps(old, protocol=2))
    bad = {
        "segments": [],
        "device_traces": [[
            {"action": "alloc", "addr": 1, "size": 2, "stream": 0, "frames": []},
            {"action": "alloc", "addr": 1, "stream": 0, "frames": []},
        ]],
    }
    open(os.path.join(HERE, "missing_key.pickle"), "wb").write(pickle.dumps(bad, protocol=4))
    top = 2**63 - 1
    extreme = {
        "segments": [
            {"device": 0, "address": top - 10, "total_size": top, "stream": -1,
             "segment_type": "large", "is_expandable": True, "frames": [],
             "blocks": [{"address": top - 10, "size": top, "requested_size": top,
                         "state": "active_allocated", "frames": []}]},
            {"device": 3, "address": 0, "total_size": 0, "stream": 0,
             "segment_type": "small", "blocks": []},
        ],
        "device_traces": [[
            {"action": a, "addr": addr, "size": size, "stream": -2**63, "time_us": t, "frames": []}
            for a, addr, size, t in [
                ("segment_map", top, top, -2**63),
                ("alloc", top - 10, top, top),
                ("free_requested", 0, 0, 0),
                ("free_completed", top - 10, 1, 5),
                ("free_completed", 12345, top, 6),
                ("segment_unmap", 0, top, 7),
                ("segment_free", top - 10, top, 8),
                ("segment_alloc", 0, 0, 9),
                ("oom", top, top, 10),
                ("snapshot", 0, 0, 11),
                ("user_defined", 0, 0, -2**63),
                ("free", top, top, top),
            ]
        ], [], [
            {"action": "alloc", "addr": 1, "size": 1, "frames": []},
        ]],
    }
    open(os.path.join(HERE, "extreme_values.pickle"), "wb").write(pickle.dumps(extreme, protocol=4))


main()

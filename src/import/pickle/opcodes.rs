//! Every pickle opcode (protocols 0–5, as `Lib/pickle.py` defines them), what argument it
//! carries, and whether a snapshot reader accepts it.
//!
//! Accepted: the binary opcodes that build plain data — numbers, strings, bytes, `None`,
//! booleans, lists, dicts, tuples, sets — plus the stack and memo bookkeeping around them.
//! Refused: every opcode that names, imports, calls or instantiates a Python object (that is
//! how a pickle runs code), out-of-band buffers, and the protocol-0 text forms of data, which
//! no snapshot uses (PyTorch's snapshots are written with the default protocol, 4 or 5).

/// The argument that follows an opcode in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    None,
    U8,
    U16,
    /// Four bytes, little-endian (signed for `BININT`, unsigned for indices and lengths).
    U32,
    /// An 8-byte big-endian IEEE double.
    F64,
    /// An 8-byte little-endian count (`FRAME`).
    U64,
    /// A length byte, then that many bytes.
    Len1,
    /// A 4-byte little-endian length, then that many bytes.
    Len4,
    /// An 8-byte little-endian length, then that many bytes.
    Len8,
    /// Text up to a newline (protocol 0).
    Line,
    /// Two lines of text (`GLOBAL`, `INST`).
    TwoLines,
}

/// Why an opcode is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It looks up, calls or builds a Python object: executing it would run code.
    Code(&'static str),
    /// Plain data, but in a form no snapshot is written in.
    Unsupported(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub code: u8,
    pub name: &'static str,
    pub arg: Arg,
    pub refused: Option<Refusal>,
}

const fn ok(code: u8, name: &'static str, arg: Arg) -> Op {
    Op {
        code,
        name,
        arg,
        refused: None,
    }
}

const fn code(code: u8, name: &'static str, arg: Arg, why: &'static str) -> Op {
    Op {
        code,
        name,
        arg,
        refused: Some(Refusal::Code(why)),
    }
}

const fn text(code: u8, name: &'static str, arg: Arg) -> Op {
    Op {
        code,
        name,
        arg,
        refused: Some(Refusal::Unsupported(
            "a protocol-0 text opcode; snapshots are pickled with protocol 2 or later",
        )),
    }
}

const GLOBAL_WHY: &str = "it looks up a Python object by module and name, which imports code";
const CALL_WHY: &str = "it calls a Python object";
const INSTANCE_WHY: &str = "it creates an instance of a Python class";

/// Every opcode by name, accepted or not.
pub const OPS: &[Op] = &[
    ok(b'(', "MARK", Arg::None),
    ok(b'.', "STOP", Arg::None),
    ok(b'0', "POP", Arg::None),
    ok(b'1', "POP_MARK", Arg::None),
    ok(b'2', "DUP", Arg::None),
    text(b'F', "FLOAT", Arg::Line),
    text(b'I', "INT", Arg::Line),
    ok(b'J', "BININT", Arg::U32),
    ok(b'K', "BININT1", Arg::U8),
    text(b'L', "LONG", Arg::Line),
    ok(b'M', "BININT2", Arg::U16),
    ok(b'N', "NONE", Arg::None),
    code(
        b'P',
        "PERSID",
        Arg::Line,
        "it asks the unpickler for an outside object by id",
    ),
    code(
        b'Q',
        "BINPERSID",
        Arg::None,
        "it asks the unpickler for an outside object by id",
    ),
    code(b'R', "REDUCE", Arg::None, CALL_WHY),
    text(b'S', "STRING", Arg::Line),
    ok(b'T', "BINSTRING", Arg::Len4),
    ok(b'U', "SHORT_BINSTRING", Arg::Len1),
    text(b'V', "UNICODE", Arg::Line),
    ok(b'X', "BINUNICODE", Arg::Len4),
    ok(b'a', "APPEND", Arg::None),
    code(
        b'b',
        "BUILD",
        Arg::None,
        "it sets an object's state (calls __setstate__)",
    ),
    code(b'c', "GLOBAL", Arg::TwoLines, GLOBAL_WHY),
    ok(b'd', "DICT", Arg::None),
    ok(b'}', "EMPTY_DICT", Arg::None),
    ok(b'e', "APPENDS", Arg::None),
    ok(b'g', "GET", Arg::Line),
    ok(b'h', "BINGET", Arg::U8),
    code(b'i', "INST", Arg::TwoLines, INSTANCE_WHY),
    ok(b'j', "LONG_BINGET", Arg::U32),
    ok(b'l', "LIST", Arg::None),
    ok(b']', "EMPTY_LIST", Arg::None),
    code(b'o', "OBJ", Arg::None, INSTANCE_WHY),
    ok(b'p', "PUT", Arg::Line),
    ok(b'q', "BINPUT", Arg::U8),
    ok(b'r', "LONG_BINPUT", Arg::U32),
    ok(b's', "SETITEM", Arg::None),
    ok(b't', "TUPLE", Arg::None),
    ok(b')', "EMPTY_TUPLE", Arg::None),
    ok(b'u', "SETITEMS", Arg::None),
    ok(b'G', "BINFLOAT", Arg::F64),
    ok(0x80, "PROTO", Arg::U8),
    code(0x81, "NEWOBJ", Arg::None, INSTANCE_WHY),
    code(
        0x82,
        "EXT1",
        Arg::U8,
        "it looks up a registered extension, which is a global",
    ),
    code(
        0x83,
        "EXT2",
        Arg::U16,
        "it looks up a registered extension, which is a global",
    ),
    code(
        0x84,
        "EXT4",
        Arg::U32,
        "it looks up a registered extension, which is a global",
    ),
    ok(0x85, "TUPLE1", Arg::None),
    ok(0x86, "TUPLE2", Arg::None),
    ok(0x87, "TUPLE3", Arg::None),
    ok(0x88, "NEWTRUE", Arg::None),
    ok(0x89, "NEWFALSE", Arg::None),
    ok(0x8a, "LONG1", Arg::Len1),
    ok(0x8b, "LONG4", Arg::Len4),
    ok(b'B', "BINBYTES", Arg::Len4),
    ok(b'C', "SHORT_BINBYTES", Arg::Len1),
    ok(0x8c, "SHORT_BINUNICODE", Arg::Len1),
    ok(0x8d, "BINUNICODE8", Arg::Len8),
    ok(0x8e, "BINBYTES8", Arg::Len8),
    ok(0x8f, "EMPTY_SET", Arg::None),
    ok(0x90, "ADDITEMS", Arg::None),
    ok(0x91, "FROZENSET", Arg::None),
    code(0x92, "NEWOBJ_EX", Arg::None, INSTANCE_WHY),
    code(0x93, "STACK_GLOBAL", Arg::None, GLOBAL_WHY),
    ok(0x94, "MEMOIZE", Arg::None),
    ok(0x95, "FRAME", Arg::U64),
    ok(0x96, "BYTEARRAY8", Arg::Len8),
    Op {
        code: 0x97,
        name: "NEXT_BUFFER",
        arg: Arg::None,
        refused: Some(Refusal::Unsupported(
            "it refers to an out-of-band buffer the file does not hold",
        )),
    },
    Op {
        code: 0x98,
        name: "READONLY_BUFFER",
        arg: Arg::None,
        refused: Some(Refusal::Unsupported(
            "it refers to an out-of-band buffer the file does not hold",
        )),
    },
];

/// The opcode table indexed by byte (`None`: not an opcode).
pub fn table() -> [Option<Op>; 256] {
    let mut t = [None; 256];
    for op in OPS {
        t[op.code as usize] = Some(*op);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_and_the_code_running_ones_are_refused() {
        let mut seen = [false; 256];
        for op in OPS {
            assert!(!seen[op.code as usize], "{} listed twice", op.name);
            seen[op.code as usize] = true;
        }
        assert_eq!(OPS.len(), 68);
        let t = table();
        for name in [
            "GLOBAL",
            "STACK_GLOBAL",
            "REDUCE",
            "BUILD",
            "INST",
            "OBJ",
            "NEWOBJ",
            "NEWOBJ_EX",
            "EXT1",
            "EXT2",
            "EXT4",
            "PERSID",
            "BINPERSID",
        ] {
            let op = OPS.iter().find(|o| o.name == name).unwrap();
            assert!(
                matches!(op.refused, Some(Refusal::Code(_))),
                "{name} must be refused as code"
            );
            assert_eq!(t[op.code as usize].unwrap().name, name);
        }
        assert!(t[0xff].is_none());
    }
}

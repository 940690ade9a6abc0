//! The reader against pickles Python wrote (bytes copied from `pickle.dumps`), and against
//! pickles that try to run code.

use std::rc::Rc;

use super::{Budget, KeepAll, List, Machine, Sink, Value, load_bytes};

/// `pickle.dumps({'a': [1, -2, 3.5, None, True, False, 'x'*30, b'by', (1, 2)], 'big':
/// 0x7f431b400000, 'neg': -(1<<40), 's': 'é'}, protocol=4)`.
const PROTO4: &[u8] = b"\x80\x04\x95q\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88\x89\x8c\x1exxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\x94C\x02by\x94K\x01K\x02\x86\x94e\x8c\x03big\x94\x8a\x06\x00\x00@\x1bC\x7f\x8c\x03neg\x94\x8a\x06\x00\x00\x00\x00\x00\xff\x8c\x01s\x94\x8c\x02\xc3\xa9\x94u.";

/// The same without bytes (protocol 2 writes bytes through `_codecs.encode`, a global).
const PROTO2: &[u8] = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88\x89X\x1e\x00\x00\x00xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxq\x03K\x01K\x02\x86q\x04eX\x03\x00\x00\x00bigq\x05\x8a\x06\x00\x00@\x1bC\x7fX\x03\x00\x00\x00negq\x06\x8a\x06\x00\x00\x00\x00\x00\xffX\x01\x00\x00\x00sq\x07X\x02\x00\x00\x00\xc3\xa9q\x08u.";

/// `pickle.dumps([shared, shared], protocol=3)` with `shared = {'k': 'v'}`: one dict, twice.
const SHARED3: &[u8] =
    b"\x80\x03]q\x00(}q\x01X\x01\x00\x00\x00kq\x02X\x01\x00\x00\x00vq\x03sh\x01e.";

/// An object whose `__reduce__` is `(os.system, ("touch /tmp/headroom-pickle-ran",))`,
/// pickled with protocols 0, 2 and 4.
const EVIL0: &[u8] = b"cposix\nsystem\np0\n(Vtouch /tmp/headroom-pickle-ran\np1\ntp2\nRp3\n.";
const EVIL2: &[u8] = b"\x80\x02cposix\nsystem\nq\x00X\x1e\x00\x00\x00touch /tmp/headroom-pickle-ranq\x01\x85q\x02Rq\x03.";
const EVIL4: &[u8] = b"\x80\x04\x959\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x1etouch /tmp/headroom-pickle-ran\x94\x85\x94R\x94.";

fn load(bytes: &[u8]) -> Result<(Value, u8), super::PickleError> {
    load_bytes(bytes, &mut KeepAll)
}

fn check_data(v: &Value) {
    let d = v.as_dict().expect("a dict");
    let a = d.get("a").unwrap();
    let items = a.as_list().unwrap().items.borrow();
    assert_eq!(items[0].as_int(), Some(1));
    assert_eq!(items[1].as_int(), Some(-2));
    assert!(matches!(items[2], Value::Float(f) if f == 3.5));
    assert!(matches!(items[3], Value::None));
    assert!(matches!(items[4], Value::Bool(true)));
    assert!(matches!(items[5], Value::Bool(false)));
    assert_eq!(items[6].as_str(), Some("x".repeat(30).as_str()));
    assert_eq!(d.get("big").unwrap().as_int(), Some(0x7f43_1b40_0000));
    assert_eq!(d.get("neg").unwrap().as_int(), Some(-(1 << 40)));
    assert_eq!(d.get("s").unwrap().as_str(), Some("é"));
    let Value::Tuple(t, _) = items.last().unwrap() else {
        panic!("a tuple last")
    };
    assert_eq!((t[0].as_int(), t[1].as_int()), (Some(1), Some(2)));
}

#[test]
fn data_pickles_of_protocols_2_to_4_read_back() {
    let (v, p) = load(PROTO4).unwrap();
    assert_eq!(p, 4);
    check_data(&v);
    let bytes = v.as_dict().unwrap().get("a").unwrap();
    assert!(matches!(
        &bytes.as_list().unwrap().items.borrow()[7],
        Value::Bytes(b) if &b[..] == b"by"
    ));
    let (v, p) = load(PROTO2).unwrap();
    assert_eq!(p, 2);
    check_data(&v);
}

#[test]
fn a_memoized_object_is_one_object() {
    let (v, _) = load(SHARED3).unwrap();
    let l = v.as_list().unwrap().items.borrow();
    let (Value::Dict(a), Value::Dict(b)) = (&l[0], &l[1]) else {
        panic!("two dicts")
    };
    assert!(Rc::ptr_eq(a, b));
    assert_eq!(a.get("k").unwrap().as_str(), Some("v"));
}

#[test]
fn code_is_refused_at_its_opcode_and_nothing_runs() {
    let marker = std::path::Path::new("/tmp/headroom-pickle-ran");
    let _ = std::fs::remove_file(marker);
    for (bytes, name, code, offset) in [
        (EVIL0, "GLOBAL", 0x63, 0),
        (EVIL2, "GLOBAL", 0x63, 2),
        (EVIL4, "STACK_GLOBAL", 0x93, 28),
    ] {
        let e = load(bytes).unwrap_err();
        assert!(e.refused, "{e}");
        assert_eq!(e.offset, offset, "{e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "byte {offset}: opcode {name} (0x{code:02x}) is refused"
            )),
            "{msg}"
        );
        assert!(msg.contains("nothing in it is run"), "{msg}");
    }
    assert!(!marker.exists(), "the payload ran");
}

#[test]
fn every_code_running_opcode_is_refused_by_name() {
    // Each opcode alone after PROTO 4 (its argument, if any, is never read).
    for (code, name) in [
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (0x93, "STACK_GLOBAL"),
    ] {
        let e = load(&[0x80, 4, b'N', code, b'.']).unwrap_err();
        assert!(e.refused && e.offset == 3, "{name}: {e}");
        assert!(e.to_string().contains(&format!("opcode {name} ")), "{e}");
    }
    // Out-of-band buffers and protocol-0 text are not code, but not snapshot data either.
    let e = load(&[0x80, 5, 0x97, b'.']).unwrap_err();
    assert!(e.to_string().contains("NEXT_BUFFER") && e.to_string().contains("not supported"));
    let e = load(b"I42\n.").unwrap_err();
    assert!(e.to_string().contains("INT") && e.to_string().contains("protocol-0"));
}

#[test]
fn broken_streams_say_where() {
    let e = load(b"").unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = load(b"{\"segments\": []}").unwrap_err();
    assert!(e.to_string().contains("not a pickle file"), "{e}");
    let e = load(&PROTO4[..40]).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    // A GET of a slot never written.
    let e = load(&[0x80, 4, b'h', 7, b'.']).unwrap_err();
    assert_eq!(
        e.to_string(),
        "byte 2: BINGET: memo slot 7 is read before it is written"
    );
    // A memo id far past the memo: refused instead of a huge table.
    let e = load(&[0x80, 2, b'N', b'r', 0xff, 0xff, 0xff, 0x7f, b'.']).unwrap_err();
    assert!(e.to_string().contains("far past"), "{e}");
    // An integer wider than 64 bits.
    let e = load(&[0x80, 2, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, b'.']).unwrap_err();
    assert!(e.to_string().contains("does not fit in 64 bits"), "{e}");
}

#[test]
fn a_frame_that_runs_past_the_end_of_the_file_is_refused() {
    // `{}` then STOP in a frame of their 2 bytes; a frame longer than the file is refused,
    // whether STOP comes by the slow path (a `}` read alone) or by the dicts' fast path.
    let framed = |n: u64, body: &[u8]| {
        let mut p = vec![0x80, 4, 0x95];
        p.extend_from_slice(&n.to_le_bytes());
        p.extend_from_slice(body);
        p
    };
    assert!(load(&framed(2, b"}.")).is_ok());
    // Bytes past STOP that the frame covers are read through, as Python's reader does.
    assert!(load(&framed(5, b"}.abc")).is_ok());
    let e = load(&framed(1000, b"}.")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "byte 2: FRAME: its 1000 bytes run past the end of the file, 998 bytes short (truncated?)"
    );
    let e = load(&framed(u64::MAX, b"}.")).unwrap_err();
    assert!(
        e.to_string().contains("run past the end of the file"),
        "{e}"
    );
    // A second frame after a list's first item (the dict fast path skips it).
    let mut two = framed(2, b"](}");
    two.extend_from_slice(&[0x95]);
    two.extend_from_slice(&500u64.to_le_bytes());
    two.extend_from_slice(b"}e.");
    let e = load(&two).unwrap_err();
    assert!(e.to_string().contains("its 500 bytes run past"), "{e}");
}

#[test]
fn a_sink_can_take_list_items() {
    struct TakeInts(Vec<i64>);
    impl Sink for TakeInts {
        fn append(&mut self, _: &Rc<List>, item: Value) -> Result<Option<Value>, String> {
            match item {
                Value::Int(i) => {
                    self.0.push(i);
                    Ok(None)
                }
                other => Ok(Some(other)),
            }
        }
    }
    let mut sink = TakeInts(Vec::new());
    let (v, _) = load_bytes(PROTO4, &mut sink).unwrap();
    assert_eq!(sink.0, [1, -2]);
    let d = v.as_dict().unwrap();
    // Left in the list: what the sink did not take (the tuple's ints are not list items).
    assert_eq!(
        d.get("a").unwrap().as_list().unwrap().items.borrow().len(),
        7
    );
}

/// `objects` copies of `object` in a list (batches of 1,000, as Python writes them), under
/// `{"segments": ...}` when `in_dict`.
fn memo_heavy(object: &[u8], objects: usize, in_dict: bool) -> Vec<u8> {
    let mut b = b"\x80\x04".to_vec();
    if in_dict {
        b.extend_from_slice(b"}\x94\x8c\x08segments\x94");
    }
    b.extend_from_slice(b"]\x94");
    for batch in 0..objects.div_ceil(1000) {
        b.push(b'(');
        for _ in 0..(objects - batch * 1000).min(1000) {
            b.extend_from_slice(object);
        }
        b.push(b'e');
    }
    if in_dict {
        b.push(b's');
    }
    b.push(b'.');
    b
}

/// Runs `bytes` under `budget`, the first value required to be a dict: the error, and what the
/// machine counted as held when it stopped.
fn bounded(bytes: &[u8], budget: Budget) -> (Result<Value, super::PickleError>, u64) {
    let mut sink = KeepAll;
    let mut m = Machine::new(&mut sink).bounded(budget, true);
    let r = m.run(bytes);
    (r, m.held_bytes())
}

const TIGHT: Budget = Budget {
    per_file_byte: 24,
    fixed_bytes: 1 << 20,
    scalar_list_items: 1_500_000,
};

#[test]
fn a_first_value_other_than_a_dict_is_refused_at_the_first_check() {
    for object in [&b"}\x94"[..], b"N"] {
        let e = bounded(&memo_heavy(object, 100_000, false), TIGHT)
            .0
            .unwrap_err();
        // The first opcode at or past 64 KiB.
        assert!((65_536..65_536 + 3).contains(&e.offset), "{e}");
        assert!(
            e.message
                .starts_with("the pickle's first value is a list, not the dict"),
            "{e}"
        );
    }
    // A small one is read to its end (its caller says what it is), or to an opcode refused.
    assert!(bounded(&memo_heavy(b"}\x94", 1000, false), TIGHT).0.is_ok());
    let e = bounded(EVIL4, TIGHT).0.unwrap_err();
    assert!(e.refused, "{e}");
}

#[test]
fn memo_heavy_values_past_the_budget_are_refused_within_a_check_of_it() {
    // 2 MB of memoized empty dicts: each takes about 80 bytes per byte of its two opcodes.
    let bytes = memo_heavy(b"}\x94", 1_000_000, true);
    let (r, held) = bounded(&bytes, TIGHT);
    let e = r.unwrap_err();
    assert!(
        e.message.contains("in memory, more than the ")
            && e.message.contains("24 bytes per byte read, plus 1 MiB"),
        "{e}"
    );
    // Refused at the first check past the bound (one every 64 KiB of input), long before the
    // end of the file.
    assert!(held > TIGHT.limit(e.offset), "{held}");
    assert!(e.offset <= super::budget::CHECK_EVERY_BYTES + 16, "{e}");
    // Without a budget the same pickle reads whole, a million dicts.
    let (v, _) = load(&bytes).unwrap();
    let segments = v.as_dict().unwrap().get("segments").unwrap();
    assert_eq!(segments.as_list().unwrap().items.borrow().len(), 1_000_000);
}

#[test]
fn values_within_the_budget_are_read_whatever_their_count() {
    // Small ints take 12 bytes per byte (`K\x05`: a 24-byte list item), under 24.
    let bytes = memo_heavy(b"K\x05", 1_000_000, true);
    let (r, held) = bounded(&bytes, TIGHT);
    let v = r.unwrap();
    let segments = v.as_dict().unwrap().get("segments").unwrap();
    assert_eq!(segments.as_list().unwrap().items.borrow().len(), 1_000_000);
    assert!(held <= TIGHT.limit(bytes.len() as u64), "{held}");
    // Empty lists, not memoized, take over 100 bytes per byte (each an `Rc` and a list item).
    let (r, _) = bounded(&memo_heavy(b"]", 1_000_000, true), TIGHT);
    assert!(r.unwrap_err().message.contains("in memory, more than"));
    // Past the count of list items other than lists and dicts, the next is refused.
    let e = bounded(&memo_heavy(b"K\x05", 2_000_000, true), TIGHT)
        .0
        .unwrap_err();
    assert!(
        e.message.starts_with(
            "APPENDS: more than 1500000 list items that are neither dicts nor lists (this one is 5)"
        ),
        "{e}"
    );
    assert_eq!(e.offset, 2 + 13 + 2 + 1500 * 2002 + 2001, "{e}");
}

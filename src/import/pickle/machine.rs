//! The second pass: the pickle's stack machine, restricted to data. Every opcode here builds
//! or moves plain values; the first pass has already refused everything else.

use std::collections::HashMap;
use std::io::Read;
use std::rc::Rc;

use super::input::Input;
use super::opcodes::table;
use super::scan::{Scan, refusal, text_index};
use super::value::{Dict, List, Value};
use super::{IdSet, PickleError};

/// Sees every item appended to a list (`APPEND`, `APPENDS`, `LIST`): returns it to keep it in
/// the list, or `None` once it has taken the item itself. An error stops the read.
pub trait Sink {
    fn append(&mut self, list: &Rc<List>, item: Value) -> Result<Option<Value>, String>;
}

pub struct Machine<'a, S: Sink> {
    scan: &'a Scan,
    sink: &'a mut S,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Only the slots some `GET` reads (from the first pass).
    memo: HashMap<u32, Value>,
    defined: IdSet,
    /// Distinct memo ids defined so far (`MEMOIZE` uses the next one, as Python's `len(memo)`).
    memo_len: u32,
    scratch: Vec<u8>,
}

impl<'a, S: Sink> Machine<'a, S> {
    pub fn new(scan: &'a Scan, sink: &'a mut S) -> Machine<'a, S> {
        Machine {
            scan,
            sink,
            stack: Vec::with_capacity(4096),
            marks: Vec::new(),
            memo: HashMap::new(),
            defined: IdSet::default(),
            memo_len: 0,
            scratch: Vec::new(),
        }
    }

    /// Runs the pickle in `input` to its `STOP` and returns the value it built.
    pub fn run<R: Read>(mut self, input: R) -> Result<Value, PickleError> {
        let ops = table();
        let mut input = Input::new(input);
        loop {
            input.op_offset = input.offset();
            let at = input.op_offset;
            let Some(b) = input.next_byte()? else {
                return Err(PickleError::at(at, "the file ends before STOP"));
            };
            let op = ops[b as usize]
                .ok_or_else(|| PickleError::at(at, format!("0x{b:02x} is not a pickle opcode")))?;
            if let Some(why) = op.refused {
                // The first pass refuses these; the file changed between the passes.
                return Err(PickleError {
                    offset: at,
                    message: refusal(op.name, op.code, why),
                    refused: true,
                });
            }
            let err = |m: String| PickleError::at(at, format!("{}: {m}", op.name));
            match b {
                b'.' => {
                    return self
                        .stack
                        .pop()
                        .ok_or_else(|| err("nothing on the stack to return".into()));
                }
                0x80 => {
                    let p = input.array::<1>(op.name)?[0];
                    if p > 5 {
                        return Err(err(format!(
                            "protocol {p} is newer than any this reader knows (0–5)"
                        )));
                    }
                }
                0x95 => {
                    input.array::<8>(op.name)?;
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.stack.len() > self.marks.last().copied().unwrap_or(0) {
                        self.stack.pop();
                    } else {
                        self.pop_mark().map_err(err)?;
                    }
                }
                b'1' => {
                    self.pop_mark().map_err(err)?;
                }
                b'2' => {
                    let top = self.top().map_err(err)?.clone();
                    self.stack.push(top);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(input.array::<4>(op.name)?);
                    self.stack.push(Value::Int(v as i64));
                }
                b'K' => {
                    let v = input.array::<1>(op.name)?[0];
                    self.stack.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = u16::from_le_bytes(input.array::<2>(op.name)?);
                    self.stack.push(Value::Int(v as i64));
                }
                0x8a | 0x8b => {
                    let n = if b == 0x8a {
                        input.array::<1>(op.name)?[0] as u64
                    } else {
                        i32::from_le_bytes(input.array::<4>(op.name)?).max(0) as u64
                    };
                    if n > 16 {
                        return Err(err(format!(
                            "an integer of {n} bytes does not fit in 64 bits"
                        )));
                    }
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    self.stack
                        .push(Value::Int(long(&self.scratch).map_err(err)?));
                }
                b'G' => {
                    let v = f64::from_be_bytes(input.array::<8>(op.name)?);
                    self.stack.push(Value::Float(v));
                }
                b'U' | b'C' | 0x8c => {
                    let n = input.array::<1>(op.name)?[0] as u64;
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                b'T' | b'X' | b'B' => {
                    let n = u32::from_le_bytes(input.array::<4>(op.name)?) as u64;
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                0x8d | 0x8e | 0x96 => {
                    let n = u64::from_le_bytes(input.array::<8>(op.name)?);
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                b'}' => self.stack.push(Value::Dict(Rc::new(Dict::default()))),
                b']' | 0x8f => self.stack.push(Value::List(Rc::new(List::default()))),
                b')' => self.stack.push(Value::Tuple(Rc::from(Vec::new()))),
                b'd' => {
                    let items = self.pop_mark().map_err(err)?;
                    let dict = Rc::new(Dict::default());
                    set_items(&dict, items).map_err(err)?;
                    self.stack.push(Value::Dict(dict));
                }
                b's' | b'u' => {
                    let items = if b == b's' {
                        if self.stack.len() < 2 {
                            return Err(err("needs a key and a value".into()));
                        }
                        self.stack.split_off(self.stack.len() - 2)
                    } else {
                        self.pop_mark().map_err(err)?
                    };
                    let Value::Dict(dict) = self.top().map_err(err)? else {
                        return Err(err(format!(
                            "the target is a {}, not a dict",
                            self.top().map_err(err)?.type_name()
                        )));
                    };
                    let dict = dict.clone();
                    set_items(&dict, items).map_err(err)?;
                }
                b'l' => {
                    let items = self.pop_mark().map_err(err)?;
                    let list = Rc::new(List::default());
                    self.extend(&list, items).map_err(err)?;
                    self.stack.push(Value::List(list));
                }
                b'a' | b'e' | 0x90 => {
                    let items = if b == b'a' {
                        vec![self.stack.pop().ok_or_else(|| err("empty stack".into()))?]
                    } else {
                        self.pop_mark().map_err(err)?
                    };
                    let Value::List(list) = self.top().map_err(err)? else {
                        return Err(err(format!(
                            "the target is a {}, not a list",
                            self.top().map_err(err)?.type_name()
                        )));
                    };
                    let list = list.clone();
                    self.extend(&list, items).map_err(err)?;
                }
                b't' | 0x91 => {
                    let items = self.pop_mark().map_err(err)?;
                    self.stack.push(Value::Tuple(Rc::from(items)));
                }
                0x85..=0x87 => {
                    let n = (b - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err(err(format!("needs {n} items on the stack")));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(Rc::from(items)));
                }
                b'g' | b'h' | b'j' => {
                    let id = match b {
                        b'g' => {
                            input.line_into(&mut self.scratch, op.name)?;
                            text_index(&self.scratch, at)?
                        }
                        b'h' => input.array::<1>(op.name)?[0] as u32,
                        _ => u32::from_le_bytes(input.array::<4>(op.name)?),
                    };
                    let v = self.memo.get(&id).cloned().ok_or_else(|| {
                        err(format!("memo slot {id} is read before it is written"))
                    })?;
                    self.stack.push(v);
                }
                b'p' | b'q' | b'r' | 0x94 => {
                    let id = match b {
                        b'p' => {
                            input.line_into(&mut self.scratch, op.name)?;
                            text_index(&self.scratch, at)?
                        }
                        b'q' => input.array::<1>(op.name)?[0] as u32,
                        b'r' => u32::from_le_bytes(input.array::<4>(op.name)?),
                        _ => self.memo_len,
                    };
                    if !self.defined.contains(id) {
                        self.defined.insert(id);
                        self.memo_len += 1;
                    }
                    if self.scan.referenced.contains(id) {
                        let top = self.top().map_err(err)?.clone();
                        self.memo.insert(id, top);
                    } else {
                        self.top().map_err(err)?;
                    }
                }
                _ => {
                    return Err(err("is not handled by this reader".into()));
                }
            }
        }
    }

    fn top(&self) -> Result<&Value, String> {
        self.stack
            .last()
            .ok_or_else(|| "the stack is empty".to_string())
    }

    /// Everything above the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| "no MARK to go back to".to_string())?;
        if m > self.stack.len() {
            return Err("the stack is shorter than its MARK".into());
        }
        Ok(self.stack.split_off(m))
    }

    fn extend(&mut self, list: &Rc<List>, items: Vec<Value>) -> Result<(), String> {
        for item in items {
            if let Some(v) = self.sink.append(list, item)? {
                list.items.borrow_mut().push(v);
            }
        }
        Ok(())
    }

    /// The bytes just read as a `str` (text opcodes) or `bytes`.
    fn text_or_bytes(&self, opcode: u8) -> Value {
        match opcode {
            // Python 3 reads protocol-1/2 byte strings as text too (encoding "ASCII" by
            // default); invalid sequences are replaced rather than refused.
            b'U' | b'T' | b'X' | 0x8c | 0x8d => {
                Value::Str(Rc::from(String::from_utf8_lossy(&self.scratch).as_ref()))
            }
            _ => Value::Bytes(Rc::from(self.scratch.as_slice())),
        }
    }
}

fn set_items(dict: &Rc<Dict>, items: Vec<Value>) -> Result<(), String> {
    if items.len() % 2 != 0 {
        return Err(format!("{} items do not make key/value pairs", items.len()));
    }
    let mut d = dict.items.borrow_mut();
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        if !matches!(
            k,
            Value::Str(_) | Value::Int(_) | Value::Bool(_) | Value::None | Value::Tuple(_)
        ) {
            return Err(format!("a {} cannot be a dict key", k.type_name()));
        }
        // A repeated key replaces the earlier value, as in Python.
        if let Some(slot) = d.iter_mut().find(|(x, _)| same_key(x, &k)) {
            slot.1 = v;
        } else {
            d.push((k, v));
        }
    }
    Ok(())
}

fn same_key(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::None, Value::None) => true,
        _ => false,
    }
}

/// A little-endian two's-complement integer (`LONG1`, `LONG4`) that must fit in 64 bits.
fn long(bytes: &[u8]) -> Result<i64, String> {
    let Some(&last) = bytes.last() else {
        return Ok(0);
    };
    if bytes.len() > 16 {
        return Err(format!("an integer of {} bytes", bytes.len()));
    }
    let mut wide = [if last & 0x80 != 0 { 0xff } else { 0 }; 16];
    wide[..bytes.len()].copy_from_slice(bytes);
    let v = i128::from_le_bytes(wide);
    i64::try_from(v).map_err(|_| format!("the integer {v} does not fit in 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::long;

    #[test]
    fn longs_are_twos_complement_little_endian() {
        assert_eq!(long(&[]).unwrap(), 0);
        assert_eq!(long(&[0xff]).unwrap(), -1);
        assert_eq!(long(&[0x00, 0x01]).unwrap(), 256);
        assert_eq!(long(&[0xff, 0x00]).unwrap(), 255);
        assert_eq!(
            long(&[0x00, 0x00, 0x40, 0x1b, 0x43, 0x7f, 0x00]).unwrap(),
            0x7f43_1b40_0000
        );
        assert!(long(&[0, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
    }
}

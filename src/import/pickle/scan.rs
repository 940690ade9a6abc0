//! The first pass: every opcode checked against the table (a refused one stops the read here,
//! before anything is built), and the memo slots the stream reads back noted.

use std::io::Read;

use super::input::Input;
use super::opcodes::{Arg, Refusal, table};
use super::{IdSet, PickleError};

/// What the first pass learned.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// The `PROTO` byte (0 when the stream has none: protocol 0 or 1).
    pub protocol: u8,
    /// Memo ids some `GET` reads: the only slots the second pass keeps.
    pub referenced: IdSet,
    /// Dicts the stream creates (an upper bound for the records it may hold).
    pub dicts: u64,
    /// Bytes up to and including `STOP`.
    pub bytes: u64,
}

/// The refusal message for an opcode.
pub(super) fn refusal(name: &str, code: u8, why: Refusal) -> String {
    match why {
        Refusal::Code(why) => format!(
            "opcode {name} (0x{code:02x}) is refused: {why}; a memory snapshot holds only data, and nothing in it is run"
        ),
        Refusal::Unsupported(why) => {
            format!("opcode {name} (0x{code:02x}) is not supported: {why}")
        }
    }
}

/// Reads the stream's argument for `arg` and returns the integer it holds (indices, lengths).
pub(super) fn skip_arg<R: Read>(
    input: &mut Input<R>,
    arg: Arg,
    name: &str,
    line: &mut Vec<u8>,
) -> Result<u64, PickleError> {
    Ok(match arg {
        Arg::None => 0,
        Arg::U8 => input.array::<1>(name)?[0] as u64,
        Arg::U16 => u16::from_le_bytes(input.array::<2>(name)?) as u64,
        Arg::U32 => u32::from_le_bytes(input.array::<4>(name)?) as u64,
        Arg::F64 | Arg::U64 => u64::from_le_bytes(input.array::<8>(name)?),
        Arg::Len1 => {
            let n = input.array::<1>(name)?[0] as u64;
            input.skip(n, name)?;
            n
        }
        Arg::Len4 => {
            let n = u32::from_le_bytes(input.array::<4>(name)?) as u64;
            input.skip(n, name)?;
            n
        }
        Arg::Len8 => {
            let n = u64::from_le_bytes(input.array::<8>(name)?);
            input.skip(n, name)?;
            n
        }
        Arg::Line => {
            input.line_into(line, name)?;
            0
        }
        Arg::TwoLines => {
            input.line_into(line, name)?;
            input.line_into(line, name)?;
            0
        }
    })
}

/// A decimal memo index written as text (`GET`, `PUT`).
pub(super) fn text_index(line: &[u8], offset: u64) -> Result<u32, PickleError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            PickleError::at(
                offset,
                format!(
                    "memo index {:?} is not a number",
                    String::from_utf8_lossy(line)
                ),
            )
        })
}

/// Checks every opcode of the pickle in `input` and notes the memo slots read back.
pub fn scan<R: Read>(input: R) -> Result<Scan, PickleError> {
    let ops = table();
    let mut input = Input::new(input);
    let mut out = Scan::default();
    let mut line = Vec::new();
    let mut first = true;
    loop {
        input.op_offset = input.offset();
        let Some(b) = input.next_byte()? else {
            return Err(PickleError::at(
                input.offset(),
                if first {
                    "the file is empty".to_string()
                } else {
                    "the file ends before the pickle's STOP opcode (truncated?)".to_string()
                },
            ));
        };
        let Some(op) = ops[b as usize] else {
            return Err(PickleError::at(
                input.op_offset,
                if first {
                    format!("0x{b:02x} is not a pickle opcode: this is not a pickle file")
                } else {
                    format!("0x{b:02x} is not a pickle opcode (a corrupt file?)")
                },
            ));
        };
        if let Some(why) = op.refused {
            return Err(PickleError {
                offset: input.op_offset,
                message: refusal(op.name, op.code, why),
                refused: true,
            });
        }
        first = false;
        let n = skip_arg(&mut input, op.arg, op.name, &mut line)?;
        match b {
            0x80 => out.protocol = n as u8,
            b'h' | b'j' => out.referenced.insert(n as u32),
            b'g' => out.referenced.insert(text_index(&line, input.op_offset)?),
            b'}' | b'd' => out.dicts += 1,
            b'.' => {
                out.bytes = input.offset();
                return Ok(out);
            }
            _ => {}
        }
    }
}

//! A one-pass reader for workload files of the usual shape, which makes each written step into
//! a `Step` as soon as its table closes, so reading holds one step's table at a time instead of
//! the whole document as a tree (tokens, events, the `toml` crate's document and its `Table`).
//!
//! It reads tokens from the `toml` crate's own lexer and decodes every key and scalar with its
//! own decoders (`toml_parser`), so a value it reads is the value `toml::from_str` gives. It
//! reads a subset of TOML: section headers of one or two simple keys (`[workload]`,
//! `[expect.peak]`), `[[phase]]` array tables whose keys are `name` and `steps`, and key-value
//! pairs of one simple key with strings, numbers, booleans, arrays and inline tables. Anything
//! else, and anything that would be an error (a duplicate key, a bad scalar, a step that does
//! not parse), makes it give up (`None`): `parse` then reads the file through the `toml` crate,
//! which accepts every TOML document and names the place of every error.

use std::borrow::Cow;

use toml_parser::lexer::{Lexer, Token, TokenKind};
use toml_parser::{ErrorSink, ParseError, Source, Span};

use crate::workload::step::Step;

/// A file as read: every section but the phases as a table, and each phase with its steps made.
pub(super) struct Read {
    pub sections: toml::Table,
    pub phases: Vec<ReadPhase>,
}

pub(super) struct ReadPhase {
    pub name: String,
    /// Each written step with its 1-based position.
    pub steps: Vec<(usize, Step)>,
}

/// Arrays and inline tables nested deeper than this are left to the `toml` crate (which has a
/// limit of its own), so a hostile file cannot exhaust the stack here.
const MAX_DEPTH: u32 = 64;

/// Gives up: the caller reads the file the general way.
#[derive(Debug)]
struct GiveUp;

type R<T> = Result<T, GiveUp>;

/// Whether a decoder reported an error.
#[derive(Default)]
struct Flag(bool);

impl ErrorSink for Flag {
    fn report_error(&mut self, _error: ParseError) {
        self.0 = true;
    }
}

/// Reads `text`, or `None` where the general reader must.
pub(super) fn read(text: &str) -> Option<Read> {
    Reader::new(text).document().ok()
}

/// Where key-value pairs go: the table the last header opened.
enum Target {
    /// Before any header: nothing may be written there (every key is a section).
    Root,
    /// `[a]`.
    Table(String),
    /// `[a.b]`.
    SubTable(String, String),
    /// The latest `[[phase]]`.
    Phase,
}

/// A phase while its table is read.
#[derive(Default)]
struct PhaseDraft {
    name: Option<String>,
    steps: Option<Vec<(usize, Step)>>,
}

struct Reader<'i> {
    source: Source<'i>,
    lexer: Lexer<'i>,
    /// Tokens looked at but not taken (at most two).
    ahead: [Option<Token>; 2],
    /// The sections, each opened by a header (no key-value pair is read before one), so
    /// `[a.b]` may extend any of them.
    sections: toml::Table,
    phases: Vec<PhaseDraft>,
}

impl<'i> Reader<'i> {
    fn new(text: &'i str) -> Reader<'i> {
        let source = Source::new(text);
        Reader {
            source,
            lexer: source.lex(),
            ahead: [None, None],
            sections: toml::Table::new(),
            phases: Vec::new(),
        }
    }

    fn fill(&mut self, k: usize) {
        for i in 0..=k {
            if self.ahead[i].is_none() {
                self.ahead[i] = self.lexer.next();
            }
        }
    }

    /// The kind of the token `k` places ahead (`Eof` past the end).
    fn peek_at(&mut self, k: usize) -> TokenKind {
        self.fill(k);
        self.ahead[k].map_or(TokenKind::Eof, |t| t.kind())
    }

    fn peek(&mut self) -> TokenKind {
        self.peek_at(0)
    }

    fn take(&mut self) -> R<Token> {
        self.fill(0);
        let t = self.ahead[0].take().ok_or(GiveUp)?;
        self.ahead[0] = self.ahead[1].take();
        Ok(t)
    }

    fn expect(&mut self, kind: TokenKind) -> R<Token> {
        let t = self.take()?;
        if t.kind() == kind { Ok(t) } else { Err(GiveUp) }
    }

    fn skip_whitespace(&mut self) {
        while self.peek() == TokenKind::Whitespace {
            self.ahead[0] = self.ahead[1].take();
        }
    }

    /// Whitespace, comments and newlines (between array elements and inline-table entries).
    fn skip_blank(&mut self) -> R<()> {
        loop {
            match self.peek() {
                TokenKind::Whitespace => {
                    self.take()?;
                }
                TokenKind::Comment | TokenKind::Newline => self.checked_blank()?,
                _ => return Ok(()),
            }
        }
    }

    /// Takes a comment or newline, which the lexer does not check.
    fn checked_blank(&mut self) -> R<()> {
        let t = self.take()?;
        let raw = self.source.get(t).ok_or(GiveUp)?;
        let mut flag = Flag::default();
        if t.kind() == TokenKind::Comment {
            raw.decode_comment(&mut flag);
        } else {
            raw.decode_newline(&mut flag);
        }
        if flag.0 { Err(GiveUp) } else { Ok(()) }
    }

    /// The end of a header or key-value line: whitespace, a comment, then a newline or the end.
    fn line_end(&mut self) -> R<()> {
        self.skip_whitespace();
        if self.peek() == TokenKind::Comment {
            self.checked_blank()?;
        }
        match self.peek() {
            TokenKind::Newline => self.checked_blank(),
            TokenKind::Eof => Ok(()),
            _ => Err(GiveUp),
        }
    }

    fn document(mut self) -> R<Read> {
        let mut target = Target::Root;
        loop {
            self.skip_blank()?;
            match self.peek() {
                TokenKind::Eof => break,
                TokenKind::LeftSquareBracket => target = self.header()?,
                _ => self.pair(&target)?,
            }
        }
        let phases = self
            .phases
            .into_iter()
            .map(|p| {
                Some(ReadPhase {
                    name: p.name?,
                    steps: p.steps?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or(GiveUp)?;
        Ok(Read {
            sections: self.sections,
            phases,
        })
    }

    /// `[a]`, `[a.b]` or `[[phase]]`.
    fn header(&mut self) -> R<Target> {
        let open = self.take()?;
        let array = self.peek() == TokenKind::LeftSquareBracket;
        if array {
            let second = self.take()?;
            if second.span().start() != open.span().end() {
                return Err(GiveUp);
            }
        }
        self.skip_whitespace();
        let first = self.simple_key()?;
        self.skip_whitespace();
        let second = if self.peek() == TokenKind::Dot {
            self.take()?;
            self.skip_whitespace();
            let k = self.simple_key()?;
            self.skip_whitespace();
            Some(k)
        } else {
            None
        };
        let close = self.expect(TokenKind::RightSquareBracket)?;
        if array {
            let second_close = self.expect(TokenKind::RightSquareBracket)?;
            if second_close.span().start() != close.span().end() {
                return Err(GiveUp);
            }
        }
        self.line_end()?;
        match (array, second) {
            (true, None) if first == "phase" => {
                self.phases.push(PhaseDraft::default());
                Ok(Target::Phase)
            }
            (false, None) if first != "phase" && !self.sections.contains_key(&first) => {
                self.sections
                    .insert(first.clone(), toml::Value::Table(toml::Table::new()));
                Ok(Target::Table(first))
            }
            (false, Some(second)) => {
                let Some(toml::Value::Table(t)) = self.sections.get_mut(&first) else {
                    return Err(GiveUp);
                };
                if t.contains_key(&second) {
                    return Err(GiveUp);
                }
                t.insert(second.clone(), toml::Value::Table(toml::Table::new()));
                Ok(Target::SubTable(first, second))
            }
            _ => Err(GiveUp),
        }
    }

    /// A bare, basic or literal key of one part.
    fn simple_key(&mut self) -> R<String> {
        let t = self.take()?;
        if !matches!(
            t.kind(),
            TokenKind::Atom | TokenKind::BasicString | TokenKind::LiteralString
        ) {
            return Err(GiveUp);
        }
        let raw = self.source.get(t).ok_or(GiveUp)?;
        let mut key: Cow<'i, str> = Cow::Borrowed("");
        let mut flag = Flag::default();
        raw.decode_key(&mut key, &mut flag);
        if flag.0 {
            return Err(GiveUp);
        }
        Ok(key.into_owned())
    }

    /// `key = value` and the rest of its line, into `target`.
    fn pair(&mut self, target: &Target) -> R<()> {
        let key = self.simple_key()?;
        self.skip_whitespace();
        self.expect(TokenKind::Equals)?;
        self.skip_whitespace();
        match target {
            Target::Root => return Err(GiveUp),
            Target::Phase => {
                let draft = self.phases.last().ok_or(GiveUp)?;
                match key.as_str() {
                    "name" if draft.name.is_none() => {
                        let toml::Value::String(name) = self.value(0)? else {
                            return Err(GiveUp);
                        };
                        self.phases.last_mut().ok_or(GiveUp)?.name = Some(name);
                    }
                    "steps" if draft.steps.is_none() => {
                        let steps = self.steps()?;
                        self.phases.last_mut().ok_or(GiveUp)?.steps = Some(steps);
                    }
                    _ => return Err(GiveUp),
                }
            }
            Target::Table(a) => {
                let value = self.value(0)?;
                let Some(toml::Value::Table(t)) = self.sections.get_mut(a) else {
                    return Err(GiveUp);
                };
                insert_new(t, key, value)?;
            }
            Target::SubTable(a, b) => {
                let value = self.value(0)?;
                let Some(toml::Value::Table(t)) = self.sections.get_mut(a) else {
                    return Err(GiveUp);
                };
                let Some(toml::Value::Table(t)) = t.get_mut(b) else {
                    return Err(GiveUp);
                };
                insert_new(t, key, value)?;
            }
        }
        self.line_end()
    }

    /// A phase's `steps`: an array of step tables, each made into a `Step` when it closes.
    fn steps(&mut self) -> R<Vec<(usize, Step)>> {
        self.expect(TokenKind::LeftSquareBracket)?;
        let mut steps = Vec::new();
        self.skip_blank()?;
        while self.peek() != TokenKind::RightSquareBracket {
            if self.peek() != TokenKind::LeftCurlyBracket {
                return Err(GiveUp);
            }
            let table = self.value(1)?;
            let step = super::step_from_value(table).map_err(|_| GiveUp)?;
            steps.push((steps.len() + 1, step));
            if !self.after_element(TokenKind::RightSquareBracket)? {
                break;
            }
        }
        self.expect(TokenKind::RightSquareBracket)?;
        Ok(steps)
    }

    /// After an array element or inline-table entry: blanks, then a comma (`true`: more may
    /// follow) or the closing token (`false`, not taken).
    fn after_element(&mut self, close: TokenKind) -> R<bool> {
        self.skip_blank()?;
        match self.peek() {
            TokenKind::Comma => {
                self.take()?;
                self.skip_blank()?;
                Ok(true)
            }
            k if k == close => Ok(false),
            _ => Err(GiveUp),
        }
    }

    fn value(&mut self, depth: u32) -> R<toml::Value> {
        if depth > MAX_DEPTH {
            return Err(GiveUp);
        }
        match self.peek() {
            TokenKind::LeftCurlyBracket => {
                self.take()?;
                let mut table = toml::Table::new();
                self.skip_blank()?;
                while self.peek() != TokenKind::RightCurlyBracket {
                    let key = self.simple_key()?;
                    self.skip_whitespace();
                    self.expect(TokenKind::Equals)?;
                    self.skip_whitespace();
                    let value = self.value(depth + 1)?;
                    insert_new(&mut table, key, value)?;
                    if !self.after_element(TokenKind::RightCurlyBracket)? {
                        break;
                    }
                }
                self.expect(TokenKind::RightCurlyBracket)?;
                Ok(toml::Value::Table(table))
            }
            TokenKind::LeftSquareBracket => {
                self.take()?;
                let mut array = Vec::new();
                self.skip_blank()?;
                while self.peek() != TokenKind::RightSquareBracket {
                    array.push(self.value(depth + 1)?);
                    if !self.after_element(TokenKind::RightSquareBracket)? {
                        break;
                    }
                }
                self.expect(TokenKind::RightSquareBracket)?;
                Ok(toml::Value::Array(array))
            }
            TokenKind::BasicString
            | TokenKind::LiteralString
            | TokenKind::MlBasicString
            | TokenKind::MlLiteralString => {
                let t = self.take()?;
                self.scalar(t.span(), t.kind().encoding())
            }
            TokenKind::Atom | TokenKind::Dot => {
                // A number such as 1.5e-3 is lexed as several tokens: join those that touch.
                let mut span = self.take()?.span();
                loop {
                    match self.peek() {
                        TokenKind::Atom | TokenKind::Dot => {
                            span = span.append(self.take()?.span());
                        }
                        // A date and time separated by a space: left to the general reader.
                        TokenKind::Whitespace if self.peek_at(1) == TokenKind::Atom => {
                            return Err(GiveUp);
                        }
                        _ => break,
                    }
                }
                self.scalar(span, None)
            }
            _ => Err(GiveUp),
        }
    }

    /// A scalar decoded and converted as the `toml` crate does.
    fn scalar(
        &mut self,
        span: Span,
        encoding: Option<toml_parser::decoder::Encoding>,
    ) -> R<toml::Value> {
        use toml_parser::decoder::ScalarKind;
        let text = self
            .source
            .input()
            .get(span.start()..span.end())
            .ok_or(GiveUp)?;
        let raw = toml_parser::Raw::new_unchecked(text, encoding, span);
        let mut decoded: Cow<'i, str> = Cow::Borrowed("");
        let mut flag = Flag::default();
        let kind = raw.decode_scalar(&mut decoded, &mut flag);
        if flag.0 {
            return Err(GiveUp);
        }
        match kind {
            ScalarKind::String => Ok(toml::Value::String(decoded.into_owned())),
            ScalarKind::Boolean(b) => Ok(toml::Value::Boolean(b)),
            ScalarKind::Integer(radix) => i64::from_str_radix(&decoded, radix.value())
                .map(toml::Value::Integer)
                .map_err(|_| GiveUp),
            ScalarKind::Float => {
                let f: f64 = decoded.parse().map_err(|_| GiveUp)?;
                if f.is_infinite() && !decoded.contains("inf") {
                    return Err(GiveUp);
                }
                Ok(toml::Value::Float(f))
            }
            ScalarKind::DateTime => Err(GiveUp),
        }
    }
}

/// Adds a key that must be new (a second one is an error the general reader names).
fn insert_new(table: &mut toml::Table, key: String, value: toml::Value) -> R<()> {
    if table.contains_key(&key) {
        return Err(GiveUp);
    }
    table.insert(key, value);
    Ok(())
}

#[cfg(test)]
#[path = "onepass_tests.rs"]
mod tests;

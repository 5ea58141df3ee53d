//! The JSON of the crate's files and of the probe child's answer: a reader and a writer for
//! exactly what the records need, with no dependency, so that a test process links and a
//! project builds no serialisation framework.
//!
//! - **Reading** ([`parse`]) is strict JSON (RFC 8259): one value, surrounded by whitespace at
//!   most; strings with every escape, `\u` surrogate pairs included, and no raw control
//!   character; nesting at most [`MAX_DEPTH`] deep. Numbers keep their text, so that a `u64`
//!   is read exactly and a field that wants an integer refuses `1.5` or `-1`. Fields a record
//!   does not know are ignored; where a key appears twice, the first counts.
//! - **Writing** ([`Object`], [`Write`]) gives compact JSON: no whitespace, fields in the
//!   order written, strings escaped as JSON requires (`"`, `\`, control characters) and
//!   nothing else, floats in the shortest digits that read back (of two as near, the even
//!   one), plain with a `.0` where they have no fraction from 1e-5 to below 1e16 and with an
//!   exponent beyond (`1e+17`, `7e-6`), `null` where not finite. That is byte for byte what
//!   serde_json writes for the same fields, which earlier versions of the crate used (the
//!   golden tests of each file, in `tests/data/`, hold samples of what it wrote).
//!
//! A record type reads itself from a [`Value`] with [`Fields`], which names the field and the
//! record in every error.

use std::fmt::{self, Write as _};

/// How deeply arrays and objects may nest before [`parse`] refuses the text.
pub(crate) const MAX_DEPTH: usize = 128;

/// A JSON value as read. Numbers keep their text ([`Value::Number`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    /// The number's text as it appeared (valid JSON number syntax).
    Number(String),
    String(String),
    Array(Vec<Value>),
    /// Keys and values in the order they appeared.
    Object(Vec<(String, Value)>),
}

/// Why a text is not JSON: what was wrong and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) what: &'static str,
    pub(crate) at: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not JSON: {} at byte {}", self.what, self.at)
    }
}

/// Parses `text` as one JSON value.
pub(crate) fn parse(text: &str) -> Result<Value, ParseError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

/// [`parse`] of bytes, which must be UTF-8.
pub(crate) fn parse_bytes(bytes: &[u8]) -> Result<Value, ParseError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => Err(ParseError {
            what: "invalid UTF-8",
            at: e.valid_up_to(),
        }),
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError { what, at: self.i }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, word: &[u8], v: Value) -> Result<Value, ParseError> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end")),
            Some(b'n') => self.eat(b"null", Value::Null),
            Some(b't') => self.eat(b"true", Value::Bool(true)),
            Some(b'f') => self.eat(b"false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(self.err("nested too deeply"));
                }
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return Err(self.err("expected `,` or `]`")),
                    }
                }
            }
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(self.err("nested too deeply"));
                }
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Value::Object(fields));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a key"));
                    }
                    let key = self.string()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b':') {
                        return Err(self.err("expected `:`"));
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    fields.push((key, v));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(fields));
                        }
                        _ => return Err(self.err("expected `,` or `}`")),
                    }
                }
            }
            Some(_) => Err(self.err("expected a value")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.s.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        // ASCII only, so always valid UTF-8.
        let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        Ok(Value::Number(text))
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let Some(h) = self.s.get(self.i..self.i + 4) else {
            return Err(self.err("invalid escape"));
        };
        let mut v = 0;
        for &b in h {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.err("invalid escape")),
            };
            v = v * 16 + u32::from(d);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        loop {
            let start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            // The input is a `str` and the run stops only at ASCII bytes: valid UTF-8.
            out.push_str(std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default());
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated string"));
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                if !self.s[self.i..].starts_with(b"\\u") {
                                    return Err(self.err("lone surrogate"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("lone surrogate"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.err("lone surrogate"));
                            } else {
                                hi
                            };
                            match char::from_u32(c) {
                                Some(c) => out.push(c),
                                None => return Err(self.err("invalid escape")),
                            }
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in a string")),
            }
        }
    }
}

impl Value {
    /// The value of `key` where this is an object that has it (the first, where it appears
    /// twice).
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(fields) => {
                for (k, v) in fields {
                    if k == key {
                        return Some(v);
                    }
                }
                None
            }
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An unsigned integer written as one (no fraction, no exponent) that fits in a `u64`.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// An integer written as one that fits in an `i64`.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// What kind of value this is, for a message.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// A value a record field can hold: how it reads from JSON.
pub(crate) trait Read: Sized {
    /// What the field must be, for a message ("an unsigned integer").
    const EXPECTED: &'static str;
    fn read(v: &Value) -> Option<Self>;
}

macro_rules! read_unsigned {
    ($($t:ty),*) => {$(
        impl Read for $t {
            const EXPECTED: &'static str = concat!("an integer that fits in ", stringify!($t));
            fn read(v: &Value) -> Option<Self> {
                match v.as_u64() {
                    Some(n) => <$t>::try_from(n).ok(),
                    None => None,
                }
            }
        }
    )*};
}
read_unsigned!(u8, u16, u32, u64, usize);

impl Read for i64 {
    const EXPECTED: &'static str = "an integer that fits in i64";
    fn read(v: &Value) -> Option<Self> {
        v.as_i64()
    }
}

impl Read for i32 {
    const EXPECTED: &'static str = "an integer that fits in i32";
    fn read(v: &Value) -> Option<Self> {
        match v.as_i64() {
            Some(n) => i32::try_from(n).ok(),
            None => None,
        }
    }
}

impl Read for f64 {
    const EXPECTED: &'static str = "a number";
    fn read(v: &Value) -> Option<Self> {
        v.as_f64()
    }
}

impl Read for bool {
    const EXPECTED: &'static str = "true or false";
    fn read(v: &Value) -> Option<Self> {
        v.as_bool()
    }
}

impl Read for String {
    const EXPECTED: &'static str = "a string";
    fn read(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl<T: Read> Read for Vec<T> {
    const EXPECTED: &'static str = "an array";
    fn read(v: &Value) -> Option<Self> {
        let items = v.as_array()?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(T::read(item)?);
        }
        Some(out)
    }
}

/// The fields of one record as read: each getter names the field and the record in its error.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fields<'a> {
    record: &'static str,
    fields: &'a [(String, Value)],
}

impl<'a> Fields<'a> {
    /// The fields of `v`, which must be an object, for a record called `record` in messages.
    pub(crate) fn of(v: &'a Value, record: &'static str) -> Result<Fields<'a>, String> {
        match v {
            Value::Object(fields) => Ok(Fields { record, fields }),
            other => Err(format!(
                "{record}: expected an object, found {}",
                other.kind()
            )),
        }
    }

    /// The raw value of `key`, where present (the first, where it appears twice).
    pub(crate) fn raw(&self, key: &str) -> Option<&'a Value> {
        for (k, v) in self.fields {
            if k == key {
                return Some(v);
            }
        }
        None
    }

    /// The value of `key`, `None` where absent or null.
    fn present(&self, key: &str) -> Option<&'a Value> {
        match self.raw(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    fn missing(&self, key: &str) -> String {
        format!("{}: missing field `{key}`", self.record)
    }

    fn wrong(&self, key: &str, expected: &str, v: &Value) -> String {
        format!(
            "{}: field `{key}`: expected {expected}, found {}",
            self.record,
            v.kind()
        )
    }

    // The getters below are generic only where they read the value: what they find and the
    // errors they write are the non-generic functions above, compiled once.

    /// Field `key`, which must be present and not null.
    pub(crate) fn req<T: Read>(&self, key: &str) -> Result<T, String> {
        let Some(v) = self.present(key) else {
            return Err(self.missing(key));
        };
        match T::read(v) {
            Some(t) => Ok(t),
            None => Err(self.wrong(key, T::EXPECTED, v)),
        }
    }

    /// Field `key`: `None` where absent or null.
    pub(crate) fn opt<T: Read>(&self, key: &str) -> Result<Option<T>, String> {
        let Some(v) = self.present(key) else {
            return Ok(None);
        };
        match T::read(v) {
            Some(t) => Ok(Some(t)),
            None => Err(self.wrong(key, T::EXPECTED, v)),
        }
    }

    /// Field `key` as one of `names`, by its string (`None` where absent or null).
    pub(crate) fn one_of<T: Copy>(
        &self,
        key: &str,
        names: &[(&str, T)],
    ) -> Result<Option<T>, String> {
        let Some(s) = self.opt::<String>(key)? else {
            return Ok(None);
        };
        for (n, t) in names {
            if *n == s {
                return Ok(Some(*t));
            }
        }
        let mut known = String::new();
        for (i, (n, _)) in names.iter().enumerate() {
            if i > 0 {
                known.push_str(", ");
            }
            known.push('`');
            known.push_str(n);
            known.push('`');
        }
        Err(format!(
            "{}: field `{key}`: unknown variant `{s}`, expected one of {known}",
            self.record
        ))
    }
}

impl<'a> Fields<'a> {
    /// Field `key`, which must be present and not null, as it is.
    pub(crate) fn value(&self, key: &str) -> Result<&'a Value, String> {
        match self.present(key) {
            Some(v) => Ok(v),
            None => Err(self.missing(key)),
        }
    }

    /// Field `key` as one of `names`, which must be present.
    pub(crate) fn req_one_of<T: Copy>(&self, key: &str, names: &[(&str, T)]) -> Result<T, String> {
        match self.one_of(key, names)? {
            Some(t) => Ok(t),
            None => Err(self.missing(key)),
        }
    }

    fn in_field(&self, key: &str, error: &str) -> String {
        format!("{}: field `{key}`: {error}", self.record)
    }

    /// Field `key`, a record of type `T`, which must be present.
    pub(crate) fn record<T: Record>(&self, key: &str) -> Result<T, String> {
        match T::read_json(self.value(key)?) {
            Ok(t) => Ok(t),
            Err(e) => Err(self.in_field(key, &e)),
        }
    }

    /// Field `key`, an array of records of type `T`, which must be present.
    pub(crate) fn records<T: Record>(&self, key: &str) -> Result<Vec<T>, String> {
        let v = self.value(key)?;
        let Some(items) = v.as_array() else {
            return Err(format!(
                "{}: field `{key}`: expected an array, found {}",
                self.record,
                v.kind()
            ));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match T::read_json(item) {
                Ok(t) => out.push(t),
                Err(e) => return Err(self.in_field(key, &e)),
            }
        }
        Ok(out)
    }
}

/// A record's fields read one after another into one struct expression, keeping the first
/// error: [`FieldReader::error`] returns it, as the getters of [`Fields`] with `?` would have
/// (fields after a failed one are not read).
pub(crate) struct FieldReader<'a> {
    fields: Fields<'a>,
    error: Option<String>,
}

impl<'a> FieldReader<'a> {
    pub(crate) fn new(fields: Fields<'a>) -> FieldReader<'a> {
        FieldReader {
            fields,
            error: None,
        }
    }

    /// `r`'s value, or `placeholder` where it is an error (kept where it is the first).
    pub(crate) fn keep<T>(&mut self, r: Result<T, String>, placeholder: T) -> T {
        match r {
            Ok(t) => t,
            Err(e) => {
                self.fail(e);
                placeholder
            }
        }
    }

    fn fail(&mut self, e: String) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// [`Fields::req`].
    pub(crate) fn req<T: Read + Default>(&mut self, key: &str) -> T {
        if let Some(v) = self.value(key) {
            if let Some(t) = T::read(v) {
                return t;
            }
            self.error = Some(self.fields.wrong(key, T::EXPECTED, v));
        }
        T::default()
    }

    /// [`Fields::opt`].
    pub(crate) fn opt<T: Read>(&mut self, key: &str) -> Option<T> {
        if self.error.is_some() {
            return None;
        }
        let v = self.fields.present(key)?;
        let t = T::read(v);
        if t.is_none() {
            self.error = Some(self.fields.wrong(key, T::EXPECTED, v));
        }
        t
    }

    /// Field `key`, or `default` where absent or null.
    pub(crate) fn or<T: Read>(&mut self, key: &str, default: T) -> T {
        match self.opt(key) {
            Some(t) => t,
            None => default,
        }
    }

    /// Field `key`, or the type's default where absent or null.
    pub(crate) fn or_default<T: Read + Default>(&mut self, key: &str) -> T {
        self.opt(key).unwrap_or_default()
    }

    /// [`Fields::value`]: `None` where it is missing or an earlier field was wrong.
    pub(crate) fn value(&mut self, key: &str) -> Option<&'a Value> {
        if self.error.is_some() {
            return None;
        }
        match self.fields.value(key) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// The first error, where a field was wrong.
    pub(crate) fn error(self) -> Option<String> {
        self.error
    }
}

/// A record of one of the crate's files: how it reads itself from a JSON value and (with
/// [`Write`]) writes itself.
pub(crate) trait Record: Write + Sized {
    /// The record from `v`, or what is wrong with it (naming the field and the record).
    fn read_json(v: &Value) -> Result<Self, String>;

    /// The record from its text.
    fn from_text(text: &str) -> Result<Self, String> {
        match read_text(parse(text)) {
            Ok(v) => Self::read_json(&v),
            Err(e) => Err(e),
        }
    }

    /// The record from its text as bytes, which must be UTF-8.
    fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        match read_text(parse_bytes(bytes)) {
            Ok(v) => Self::read_json(&v),
            Err(e) => Err(e),
        }
    }

    /// The record's text: compact JSON, one line.
    fn to_text(&self) -> String {
        text_of(self)
    }
}

// What a record's reading and writing need beside the record itself, compiled once.

/// The value read, or why the text is not JSON.
fn read_text(parsed: Result<Value, ParseError>) -> Result<Value, String> {
    match parsed {
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// What `value` writes.
fn text_of(value: &dyn Write) -> String {
    let mut out = String::new();
    value.write(&mut out);
    out
}

/// A value that writes itself as JSON.
pub(crate) trait Write {
    fn write(&self, out: &mut String);
}

macro_rules! write_display {
    ($($t:ty),*) => {$(
        impl Write for $t {
            fn write(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
write_display!(u8, u16, u32, u64, usize, i32, i64, bool);

impl Write for f64 {
    fn write(&self, out: &mut String) {
        if !self.is_finite() {
            out.push_str("null");
            return;
        }
        // serde_json's form (ryu's): the shortest digits that read back (of two as near,
        // the even one), plain where the decimal exponent is -5 to 15, `1.5e+16` and `1e-6`
        // beyond.
        let (digits, exp) = shortest_digits(*self);
        if self.is_sign_negative() {
            out.push('-');
        }
        let n = digits.len() as i32;
        if (-5..=15).contains(&exp) {
            if exp < 0 {
                out.push_str("0.");
                push_zeros(out, (-exp - 1) as usize);
                out.push_str(&digits);
            } else if exp + 1 >= n {
                out.push_str(&digits);
                push_zeros(out, (exp + 1 - n) as usize);
                out.push_str(".0");
            } else {
                let (int, frac) = digits.split_at(exp as usize + 1);
                out.push_str(int);
                out.push('.');
                out.push_str(frac);
            }
        } else {
            out.push_str(&digits[..1]);
            if n > 1 {
                out.push('.');
                out.push_str(&digits[1..]);
            }
            let _ = write!(out, "e{}{exp}", if exp >= 0 { "+" } else { "" });
        }
    }
}

fn push_zeros(out: &mut String, n: usize) {
    for _ in 0..n {
        out.push('0');
    }
}

/// The decimal digits of `text`, in order.
fn digits_of(text: &str) -> String {
    let mut digits = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        }
    }
    digits
}

/// The shortest significant digits of `|f|` that read back as it, and the decimal exponent of
/// the first (`0.0125` is `("125", -2)`). Where the shortest digits could end either way at
/// the same distance (an exact tie), the even one, as ryu (and so serde_json) chooses; Rust's
/// formatting rounds such a tie up.
fn shortest_digits(f: f64) -> (String, i32) {
    let f = f.abs();
    let sci = format!("{f:e}");
    let (mantissa, exp) = match mantissa_and_exponent(&sci) {
        Some(parts) => parts,
        None => (sci.as_str(), "0"),
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits = digits_of(mantissa);
    let n = digits.len();
    // A tie: the exact value has exactly one digit more than the shortest, a 5.
    let one_more = format!("{f:.n$e}");
    match mantissa_and_exponent(&one_more) {
        Some((m, _)) if m.as_bytes().last() == Some(&b'5') => {}
        _ => return (digits, exp),
    }
    // An f64's exact decimal expansion has at most 767 significant digits.
    let exact = format!("{f:.800e}");
    let exact_digits = match mantissa_and_exponent(&exact) {
        Some((m, _)) => digits_of(m),
        None => String::new(),
    };
    let exact_bytes = exact_digits.as_bytes();
    let tie = exact_bytes.get(n) == Some(&b'5') && all_zeros(&exact_bytes[n + 1..]);
    let floor = &exact_digits[..n];
    let odd = matches!(
        floor.as_bytes().last(),
        Some(b'1' | b'3' | b'5' | b'7' | b'9')
    );
    if !tie || floor == digits || odd {
        return (digits, exp);
    }
    let candidate = format!("{}.{}e{exp}", &floor[..1], &floor[1..]);
    if candidate.parse::<f64>() == Ok(f) {
        (floor.to_string(), exp)
    } else {
        (digits, exp)
    }
}

/// The mantissa and the exponent of a number formatted with `{:e}`: `s` split at its first
/// `e`.
fn mantissa_and_exponent(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'e' {
            return Some((&s[..i], &s[i + 1..]));
        }
        i += 1;
    }
    None
}

/// Whether every byte of `bytes` is `0`.
fn all_zeros(bytes: &[u8]) -> bool {
    for &b in bytes {
        if b != b'0' {
            return false;
        }
    }
    true
}

/// `s` as a JSON string: quoted, with `"`, `\` and control characters escaped.
fn escape(s: &str, out: &mut dyn fmt::Write) -> fmt::Result {
    out.write_char('"')?;
    // Only ASCII bytes are escaped, so the text between two of them is copied whole (a
    // byte of a multi-byte character is never below 0x80): one copy a run, not a push a
    // character, which the default dev profile leaves as calls.
    let bytes = s.as_bytes();
    let (mut from, mut at) = (0, 0);
    while at < bytes.len() {
        let b = bytes[at];
        if b >= 0x20 && b != b'"' && b != b'\\' {
            at += 1;
            continue;
        }
        out.write_str(&s[from..at])?;
        match b {
            b'"' => out.write_str("\\\"")?,
            b'\\' => out.write_str("\\\\")?,
            b'\n' => out.write_str("\\n")?,
            b'\r' => out.write_str("\\r")?,
            b'\t' => out.write_str("\\t")?,
            0x08 => out.write_str("\\b")?,
            0x0c => out.write_str("\\f")?,
            _ => write!(out, "\\u{:04x}", b)?,
        }
        at += 1;
        from = at;
    }
    out.write_str(&s[from..])?;
    out.write_char('"')
}

impl Write for str {
    fn write(&self, out: &mut String) {
        let _ = escape(self, out);
    }
}

/// A string as JSON writes it ([`Write`] for `str`), to be formatted: a record written with
/// one `format!` builds its line in the standard library's own compiled code, where the
/// default dev profile leaves every push of [`Object`] as calls.
pub(crate) struct Text<'a>(pub(crate) &'a str);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        escape(self.0, f)
    }
}

/// A field after the first of an object being formatted, where its value is there:
/// `,"key":value` ([`Object::some`]); nothing where it is not.
pub(crate) struct OptField<'a>(
    pub(crate) &'static str,
    pub(crate) Option<&'a dyn fmt::Display>,
);

impl fmt::Display for OptField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(v) => write!(f, ",\"{}\":{v}", self.0),
            None => Ok(()),
        }
    }
}

/// [`OptField`] of a string: `,"key":"value"` where there; nothing where not.
pub(crate) struct OptText<'a>(pub(crate) &'static str, pub(crate) Option<&'a str>);

impl fmt::Display for OptText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(v) => write!(f, ",\"{}\":{}", self.0, Text(v)),
            None => Ok(()),
        }
    }
}

/// A number where there, to be formatted as an [`OptField`]'s value.
pub(crate) fn optional(value: &Option<u64>) -> Option<&dyn fmt::Display> {
    match value {
        Some(v) => Some(v),
        None => None,
    }
}

impl Write for String {
    fn write(&self, out: &mut String) {
        self.as_str().write(out);
    }
}

impl<T: Write + ?Sized> Write for &T {
    fn write(&self, out: &mut String) {
        (**self).write(out);
    }
}

impl<T: Write> Write for Option<T> {
    fn write(&self, out: &mut String) {
        match self {
            Some(v) => v.write(out),
            None => out.push_str("null"),
        }
    }
}

impl<T: Write> Write for [T] {
    fn write(&self, out: &mut String) {
        out.push('[');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            v.write(out);
        }
        out.push(']');
    }
}

impl<T: Write> Write for Vec<T> {
    fn write(&self, out: &mut String) {
        self.as_slice().write(out);
    }
}

/// A JSON object being written, fields in the order given.
#[derive(Debug)]
pub(crate) struct Object {
    out: String,
    empty: bool,
}

impl Object {
    pub(crate) fn new() -> Object {
        Object {
            out: String::from("{"),
            empty: true,
        }
    }

    /// Adds field `key` (a key needs no escaping: the crate's keys are plain words).
    pub(crate) fn field(&mut self, key: &str, value: impl Write) -> &mut Object {
        self.put(key, &value)
    }

    /// [`Object::field`], compiled once: the value is written through its vtable.
    fn put(&mut self, key: &str, value: &dyn Write) -> &mut Object {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        key.write(&mut self.out);
        self.out.push(':');
        value.write(&mut self.out);
        self
    }

    /// Adds field `key` where `value` is `Some`; leaves it out where `None`.
    pub(crate) fn some<T: Write>(&mut self, key: &str, value: &Option<T>) -> &mut Object {
        if let Some(v) = value {
            self.put(key, v);
        }
        self
    }

    /// Adds field `key` where `yes`.
    pub(crate) fn when(&mut self, yes: bool, key: &str, value: impl Write) -> &mut Object {
        if yes {
            self.put(key, &value);
        }
        self
    }

    /// The object's text.
    pub(crate) fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.out);
        out.push('}');
        out
    }
}

/// A value already written as JSON, added as it is.
#[derive(Debug)]
pub(crate) struct Raw(pub(crate) String);

impl Write for Raw {
    fn write(&self, out: &mut String) {
        out.push_str(&self.0);
    }
}

/// The golden test of a file of one record a line: what this version writes for `known`, one
/// a line, is `golden` byte for byte, and what it reads from `golden` is `known`.
#[cfg(test)]
pub(crate) fn check_golden<T: Record + PartialEq + fmt::Debug>(golden: &str, known: &[T]) {
    let written: String = known.iter().map(|r| r.to_text() + "\n").collect();
    assert_eq!(
        written, golden,
        "the writer's output differs from the golden file"
    );
    let read: Vec<T> = golden
        .lines()
        .map(|l| T::from_text(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(read, known, "the reader reads the golden file otherwise");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_of_value() {
        let v = parse(r#" {"a": [1, -2.5e3, true, false, null], "b": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "c": {}} "#)
            .unwrap();
        let a = v.get("a").unwrap().as_array().unwrap();
        assert_eq!(a[0].as_u64(), Some(1));
        assert_eq!(a[1].as_f64(), Some(-2500.0));
        assert_eq!(a[1].as_u64(), None);
        assert_eq!(a[2], Value::Bool(true));
        assert_eq!(a[4], Value::Null);
        assert_eq!(
            v.get("b").unwrap().as_str(),
            Some("x\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{1f600}")
        );
        assert_eq!(v.get("c"), Some(&Value::Object(vec![])));
    }

    #[test]
    fn refuses_what_is_not_json() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "{a:1}",
            "01",
            "1.",
            "-",
            "1e",
            "+1",
            "\"a",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"a\nb\"",
            "[1] 2",
            "nul",
            "{\"a\" 1}",
            "\u{feff}1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was read");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        assert_eq!(parse_bytes(b"\"\xff\"").unwrap_err().what, "invalid UTF-8");
    }

    #[test]
    fn integers_are_exact_and_checked() {
        let v = parse("[18446744073709551615, 18446744073709551616, -1, 4294967296]").unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a[0].as_u64(), Some(u64::MAX));
        assert_eq!(a[1].as_u64(), None);
        assert_eq!(a[2].as_u64(), None);
        assert_eq!(a[2].as_i64(), Some(-1));
        assert_eq!(u32::read(&a[3]), None);
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let mut o = Object::new();
        o.field("s", "q\"b\\n\n\u{1}\u{7f}é")
            .field("n", 7u64)
            .field("f", 1.0f64)
            .field("g", 0.25f64)
            .field("nan", f64::NAN)
            .field("v", vec![1u32, 2])
            .field("none", None::<u32>)
            .some("skip", &None::<u32>)
            .some("keep", &Some(3u32))
            .when(false, "no", true)
            .field("raw", Raw("{\"x\":1}".into()));
        assert_eq!(
            o.finish(),
            "{\"s\":\"q\\\"b\\\\n\\n\\u0001\u{7f}é\",\"n\":7,\"f\":1.0,\"g\":0.25,\"nan\":null,\
             \"v\":[1,2],\"none\":null,\"keep\":3,\"raw\":{\"x\":1}}"
        );
    }

    /// Strings are escaped character by character as serde_json does: `"`, `\\`, the five
    /// short escapes, `\u00XX` for the other control characters, everything else as it is;
    /// here against that rule written out for each character, over every ASCII character
    /// and multi-byte ones, at the start, middle and end of a string.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them_character_by_character() {
        fn by_character(text: &str) -> String {
            let mut out = String::from("\"");
            for c in text.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        let mut cases: Vec<String> = vec![String::new(), "é€😀".into(), "plain".into()];
        for b in 0u8..0x80 {
            let c = b as char;
            cases.push(c.to_string());
            cases.push(format!("a{c}é{c}{c}z"));
            cases.push(format!("{c}😀"));
        }
        for text in &cases {
            let mut ours = String::new();
            text.as_str().write(&mut ours);
            assert_eq!(ours, by_character(text), "{text:?}");
        }
    }

    /// Floats as serde_json (ryu) writes them, taken from its output: plain from 1e-5 to
    /// below 1e16, with an exponent (and its sign) beyond.
    #[test]
    fn floats_are_written_as_serde_json_writes_them() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1000.0, "1000.0"),
            (12.345, "12.345"),
            (0.001, "0.001"),
            (0.00001, "0.00001"),
            (0.010499999999999999, "0.010499999999999999"),
            (1.0000000000000002e-6, "1.0000000000000002e-6"),
            (7e-6, "7e-6"),
            (1e17, "1e+17"),
            (1.5e16, "1.5e+16"),
            (1e16, "1e+16"),
            (9007199254740992.0, "9007199254740992.0"),
            (999999999999999.9, "999999999999999.9"),
            (-2.5e-300, "-2.5e-300"),
            // Exactly -981446413237567.25: a tie between ...567.2 and ...567.3.
            (-3925785652950269.0 / 4.0, "-981446413237567.2"),
            (0.125, "0.125"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::INFINITY, "null"),
        ];
        for (f, want) in cases {
            let mut out = String::new();
            f.write(&mut out);
            assert_eq!(out, want, "{f:?}");
            if f.is_finite() {
                assert_eq!(parse(&out).unwrap().as_f64(), Some(f));
            }
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let text = "tab\there \u{0} \u{1f} \"quoted\" back\\slash é 😀";
        let mut o = Object::new();
        o.field("t", text)
            .field("f", -0.1f64)
            .field("big", u64::MAX);
        let v = parse(&o.finish()).unwrap();
        let f = Fields::of(&v, "test record").unwrap();
        assert_eq!(f.req::<String>("t").unwrap(), text);
        assert_eq!(f.req::<f64>("f").unwrap(), -0.1);
        assert_eq!(f.req::<u64>("big").unwrap(), u64::MAX);
    }

    #[test]
    fn fields_name_the_field_and_the_record() {
        let v = parse(r#"{"pid": "x", "n": null, "k": "blue"}"#).unwrap();
        let f = Fields::of(&v, "holder record").unwrap();
        assert_eq!(
            f.req::<u32>("pid").unwrap_err(),
            "holder record: field `pid`: expected an integer that fits in u32, found a string"
        );
        assert_eq!(
            f.req::<u32>("units").unwrap_err(),
            "holder record: missing field `units`"
        );
        assert_eq!(f.opt::<u32>("n").unwrap(), None);
        assert_eq!(FieldReader::new(f).or("units", 1usize), 1);
        assert_eq!(
            f.one_of("k", &[("red", 1), ("green", 2)]).unwrap_err(),
            "holder record: field `k`: unknown variant `blue`, expected one of `red`, `green`"
        );
        assert!(Fields::of(&Value::Null, "holder record").is_err());
    }

    #[test]
    fn a_field_reader_keeps_the_first_error() {
        let v = parse(r#"{"pid": "x", "n": 3, "b": true}"#).unwrap();
        let mut r = FieldReader::new(Fields::of(&v, "holder record").unwrap());
        assert_eq!(r.req::<u32>("n"), 3);
        assert_eq!(r.req::<u32>("pid"), 0);
        assert_eq!(r.req::<u32>("units"), 0);
        assert_eq!(r.opt::<bool>("b"), None);
        assert_eq!(
            r.error().unwrap(),
            "holder record: field `pid`: expected an integer that fits in u32, found a string"
        );
        let mut r = FieldReader::new(Fields::of(&v, "holder record").unwrap());
        assert_eq!(r.or_default::<u32>("units"), 0);
        assert_eq!(r.opt::<bool>("b"), Some(true));
        assert_eq!(r.error(), None);
    }
}

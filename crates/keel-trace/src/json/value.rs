//! The parser's vocabulary, shared by both readers: one JSON value as the
//! file has it ([`Lite`]), borrowed from the event's bytes, and an object's
//! fields in file order ([`Fields`]). Nothing here builds a tree of more
//! than one level: nested arrays and objects stay text until a reader asks
//! for them.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// At most the first 64 characters of `s`, for quoting a bad value in an
/// error message (with the full length when it was cut).
pub fn short(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        None => s.to_owned(),
        Some((cut, _)) => format!("{}... ({} bytes)", &s[..cut], s.len()),
    }
}

/// A JSON value as the file has it, borrowed: numbers keep their text
/// (exact microseconds), strings are unescaped only when they hold an
/// escape, arrays and objects stay text.
#[derive(Debug, Clone)]
pub(super) enum Lite<'a> {
    Num(&'a str),
    Str(Cow<'a, str>),
    Bool(bool),
    Null,
    /// An array, as written.
    Array(&'a str),
    /// An object, as written.
    Object(&'a str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Lite<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw: &'a RawValue = Deserialize::deserialize(d)?;
        let text = raw.get();
        Ok(match text.as_bytes().first() {
            Some(b'"') => {
                let inner = &text[1..text.len() - 1];
                if inner.contains('\\') {
                    Lite::Str(Cow::Owned(
                        serde_json::from_str(text).map_err(serde::de::Error::custom)?,
                    ))
                } else {
                    Lite::Str(Cow::Borrowed(inner))
                }
            }
            Some(b't') => Lite::Bool(true),
            Some(b'f') => Lite::Bool(false),
            Some(b'n') => Lite::Null,
            Some(b'[') => Lite::Array(text),
            Some(b'{') => Lite::Object(text),
            _ => Lite::Num(text),
        })
    }
}

impl<'a> Lite<'a> {
    /// What kind of value this is, for error messages.
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Lite::Null => "null",
            Lite::Bool(_) => "a boolean",
            Lite::Num(_) => "a number",
            Lite::Str(_) => "a string",
            Lite::Array(_) => "an array",
            Lite::Object(_) => "an object",
        }
    }

    /// A short description for error messages: numbers and strings with
    /// their value.
    pub(super) fn describe(&self) -> String {
        match self {
            Lite::Num(n) => short(n),
            Lite::Str(s) => format!("the string \"{}\"", short(s)),
            other => other.type_name().to_owned(),
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Lite::Str(s) => Some(s),
            _ => None,
        }
    }

    /// An integer written as one (`1`, not `1.0`).
    pub(super) fn as_u64(&self) -> Option<u64> {
        match self {
            Lite::Num(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// An integer written as one (`-1`, not `-1.0`).
    pub(super) fn as_i64(&self) -> Option<i64> {
        match self {
            Lite::Num(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// A number, or a string holding one.
    pub(super) fn as_f64(&self) -> Option<f64> {
        match self {
            Lite::Num(n) => n.parse().ok(),
            Lite::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The elements of an array.
    pub(super) fn elements(&self) -> Option<Vec<Lite<'a>>> {
        match self {
            Lite::Array(text) => serde_json::from_str(text).ok(),
            _ => None,
        }
    }

    /// The fields of an object.
    pub(super) fn fields(&self) -> Option<Fields<'a>> {
        match self {
            Lite::Object(text) => serde_json::from_str(text).ok(),
            _ => None,
        }
    }

    /// The value as an argument's text: strings as they are, anything else
    /// as compact JSON.
    pub(super) fn into_text(self) -> String {
        self.text().into_owned()
    }

    /// [`into_text`](Self::into_text), borrowed where it can be.
    pub(super) fn text(self) -> Cow<'a, str> {
        match self {
            Lite::Str(s) => s,
            Lite::Num(n) => Cow::Borrowed(n),
            Lite::Bool(true) => Cow::Borrowed("true"),
            Lite::Bool(false) => Cow::Borrowed("false"),
            Lite::Null => Cow::Borrowed("null"),
            Lite::Array(text) | Lite::Object(text) => Cow::Owned(compact(text)),
        }
    }
}

/// JSON text without the whitespace outside its strings.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escape) = (false, false);
    for c in text.chars() {
        if in_string {
            if escape {
                escape = false;
            } else if c == '\\' {
                escape = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_ascii_whitespace() {
            continue;
        }
        out.push(c);
    }
    out
}

/// An object's fields, in file order, borrowed where possible. A key the
/// object repeats is kept each time (see [`dedup`](Fields::dedup)).
#[derive(Debug, Default)]
pub(super) struct Fields<'a>(pub Vec<(Cow<'a, str>, Lite<'a>)>);

impl<'a> Fields<'a> {
    /// The first value of `key`.
    pub(super) fn get(&self, key: &str) -> Option<&Lite<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// One field per key, as a JSON tree reads an object: a repeated key
    /// keeps its first place and takes its last value.
    pub(super) fn dedup(self) -> Self {
        let n = self.0.len();
        // Events have a dozen fields and no repeats: that is found without
        // allocating, comparing keys whole only when their length and ends
        // agree; a large object hashes, so that none costs quadratic time.
        let repeats = if n <= 16 {
            let mut signs = [(0, 0, 0); 16];
            for (sign, (k, _)) in signs.iter_mut().zip(&self.0) {
                let b = k.as_bytes();
                *sign = (
                    b.len(),
                    b.first().copied().unwrap_or(0),
                    b.last().copied().unwrap_or(0),
                );
            }
            (1..n).any(|i| (0..i).any(|j| signs[j] == signs[i] && self.0[j].0 == self.0[i].0))
        } else {
            let mut seen = std::collections::HashSet::with_capacity(n);
            !self.0.iter().all(|(k, _)| seen.insert(&**k))
        };
        if !repeats {
            return self;
        }
        let mut place: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut out: Vec<(Cow<'a, str>, Lite<'a>)> = Vec::with_capacity(n);
        for (k, v) in self.0 {
            match place.get(&*k) {
                Some(&i) => out[i].1 = v,
                None => {
                    place.insert(k.to_string(), out.len());
                    out.push((k, v));
                }
            }
        }
        Fields(out)
    }
}

/// A map key, borrowed when it has no escapes.
struct KeyStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for KeyStr<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = KeyStr<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<KeyStr<'a>, E> {
                Ok(KeyStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<KeyStr<'a>, E> {
                Ok(KeyStr(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Fields<'a>, M::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<KeyStr<'a>, Lite<'a>>()? {
                    out.push((k.0, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A serde_json error in `bytes`, which start at byte offset `base` of
/// the input: its message, and its place as a byte offset of the input
/// (serde_json gives a line and column within `bytes`).
pub(super) fn json_error(e: &serde_json::Error, bytes: &[u8], base: u64) -> (String, u64) {
    let mut message = e.to_string();
    if let Some(cut) = message.rfind(" at line ") {
        message.truncate(cut);
    }
    // Lines and columns count from 1; the column counts bytes.
    let mut offset = 0usize;
    for _ in 1..e.line() {
        match bytes[offset..].iter().position(|&b| b == b'\n') {
            Some(n) => offset += n + 1,
            None => break,
        }
    }
    let offset = (offset + e.column().saturating_sub(1)).min(bytes.len());
    (message, base + offset as u64)
}

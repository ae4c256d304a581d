//! One event of another tool's file as the parser reads it ([`RawEvent`]),
//! the keys that name processes, threads and ids ([`Key`]), and times.

use std::borrow::Cow;

use serde::Deserialize;

use super::super::value::{Fields, Lite, short};

/// One event as the file has it; fields other tools add are ignored.
#[derive(Deserialize)]
pub(super) struct RawEvent<'a> {
    #[serde(borrow, default)]
    pub ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub pid: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub tid: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub ts: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub dur: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub id: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub id2: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub bind_id: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub flow_in: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub flow_out: Option<Lite<'a>>,
    #[serde(borrow, default)]
    pub bp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub s: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub args: Option<Fields<'a>>,
}

impl RawEvent<'_> {
    /// The event's `args.<key>`.
    pub(super) fn arg(&self, key: &str) -> Option<&Lite<'_>> {
        self.args.as_ref().and_then(|a| a.get(key))
    }

    /// The pid.
    pub(super) fn pid(&self) -> Option<Key> {
        self.pid.as_ref().and_then(Key::of)
    }

    /// The tid: a missing one is 0.
    pub(super) fn tid(&self) -> Key {
        self.tid.as_ref().and_then(Key::of).unwrap_or(Key::Num(0))
    }

    /// The (pid, tid): a missing tid is 0.
    pub(super) fn pid_tid(&self) -> Option<(Key, Key)> {
        Some((self.pid()?, self.tid()))
    }

    /// `ts` as ns.
    pub(super) fn ts(&self) -> Option<i64> {
        self.ts.as_ref().and_then(ns_of)
    }

    /// A flow or async id: `id`, or `id2` (`{"local": ..}` / `{"global": ..}`).
    pub(super) fn id(&self) -> Option<Key> {
        if let Some(id) = self.id.as_ref().and_then(Key::of) {
            return Some(id);
        }
        let id2 = self.id2.as_ref()?.fields()?;
        id2.get("global")
            .or_else(|| id2.get("local"))
            .and_then(Key::of)
    }

    pub(super) fn cat(&self) -> &str {
        self.cat.as_deref().unwrap_or("")
    }

    pub(super) fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
}

/// A pid, tid or id: numbers and strings both occur.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Num(i64),
    Str(Box<str>),
}

impl Key {
    pub(super) fn of(v: &Lite<'_>) -> Option<Key> {
        match v {
            Lite::Num(n) => n
                .parse::<i64>()
                .ok()
                .or_else(|| n.parse::<u64>().ok().map(|u| u as i64))
                .map(Key::Num)
                .or_else(|| Some(Key::Str(short(n).into()))),
            Lite::Str(s) => {
                let t = s.trim();
                if let Ok(n) = t.parse::<i64>() {
                    Some(Key::Num(n))
                } else if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))
                    && let Ok(n) = u64::from_str_radix(hex, 16)
                {
                    Some(Key::Num(n as i64))
                } else {
                    Some(Key::Str(short(s).into()))
                }
            }
            Lite::Bool(b) => Some(Key::Num(i64::from(*b))),
            _ => None,
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Num(n) => write!(f, "{n}"),
            Key::Str(s) => f.write_str(s),
        }
    }
}

/// An integer, or a number or numeric string rounded to one.
pub(super) fn int_of(v: &Lite<'_>) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && f.abs() < 9.2e18)
            .map(|f| f.round() as i64)
    })
}

/// Microseconds (a number or a numeric string) as signed ns.
pub(super) fn ns_of(v: &Lite<'_>) -> Option<i64> {
    let text = match v {
        Lite::Num(n) => n,
        Lite::Str(s) => s.trim(),
        _ => return None,
    };
    parse_ns(text)
}

/// Decimal microseconds into ns, exactly for plain decimals, through f64
/// for exponents.
fn parse_ns(text: &str) -> Option<i64> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let ns = if !int.is_empty() && digits(int) && digits(frac) {
        let mut ns: i64 = int.parse::<i64>().ok()?.checked_mul(1000)?;
        let mut scale = 100;
        for b in frac.bytes().take(3) {
            ns = ns.checked_add(i64::from(b - b'0') * scale)?;
            scale /= 10;
        }
        if frac.as_bytes().get(3).is_some_and(|&b| b >= b'5') {
            ns = ns.checked_add(1)?;
        }
        ns
    } else {
        let us: f64 = body.parse().ok()?;
        let ns = (us * 1000.0).round();
        if !(ns.is_finite() && (0.0..9.2e18).contains(&ns)) {
            return None;
        }
        ns as i64
    };
    Some(if neg { -ns } else { ns })
}

//! Python values as JSON (the forms `docs/design/objects.md` documents).
//!
//! | Python | JSON |
//! |---|---|
//! | `None`, `bool`, `int`, `float`, `str` | `null`, `true`/`false`, number, number, string |
//! | an int beyond 64 bits; NaN, ±inf | its decimal digits as a string; `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | `bytes`, `bytearray` | `{"$bytes": "<hex>"}` |
//! | `tuple`, `list` | array |
//! | `dict` with only `str` keys; other `dict` | object; `{"$dict": [[key, value], …]}` |
//! | `set`, `frozenset` | `{"$set": […]}` |
//! | a persistent reference | `{"$ref": oid, "$class": "m.C"}` (class when the reference names it); weak: `{"$weakref": oid}`; to another database: `"$database"` beside `"$ref"` |
//! | `datetime.datetime`, `date`, `time` | ISO 8601 string (`{"$class", "$value", "$tzinfo"}` with a time zone) |
//! | `decimal.Decimal` | `{"$decimal": "1.50"}` |
//! | a class or function | `{"$global": "m.f"}` |
//! | any other object | `{"$class": "m.C", "$args": […], "$state": …}` (empty parts left out) |
//! | a BTrees bucket or set | `{"$items": …, "$next": ref}` / `{"$keys": […], "$next": ref}` |
//! | a BTree or TreeSet | inline: as its one bucket; else `{"$children": [refs], "$keys": […], "$firstbucket": ref}` |
//! | a value met again inside itself | `{"$cycle": true}` |
//!
//! `$items` is an object when every key is a string, else `[[key, value], …]`.

use serde_json::{Map, Value, json};

use super::machine::{Machine, Node};

/// How much JSON one record may print (invariant 1 of the module): shared nodes reached
/// many times are printed each time, so a small pickle can ask for a huge document.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    values: usize,
}

/// Deeper nesting is refused (it also bounds the printer's recursion).
const MAX_DEPTH: usize = 200;

impl Budget {
    pub fn for_input(len: usize) -> Self {
        Budget {
            values: (len.saturating_mul(64)).max(1 << 20),
        }
    }

    fn spend(&mut self) -> Result<(), String> {
        self.values = self
            .values
            .checked_sub(1)
            .ok_or("the state is too large to show as JSON")?;
        Ok(())
    }
}

struct Printer<'m, 'a> {
    m: &'m Machine<'a>,
    budget: &'m mut Budget,
    open: Vec<bool>,
    depth: usize,
}

/// The JSON of value `root`.
pub fn to_json(m: &Machine<'_>, root: usize, budget: &mut Budget) -> Result<Value, String> {
    Printer::new(m, budget).value(root)
}

/// The JSON of an object's state, knowing its class (BTrees keep theirs as flat tuples).
pub fn state_json(
    m: &Machine<'_>,
    root: usize,
    class: Option<&str>,
    budget: &mut Budget,
) -> Result<Value, String> {
    let mut p = Printer::new(m, budget);
    if let Some(c) = class.filter(|c| c.starts_with("BTrees.")) {
        let name = c.rsplit('.').next().unwrap_or(c);
        let set = name.ends_with("Set");
        if name.ends_with("Bucket") || (set && !name.ends_with("TreeSet")) {
            if let Some(v) = p.bucket(root, set)? {
                return Ok(v);
            }
        } else if (name.ends_with("BTree") || name.ends_with("TreeSet"))
            && let Some(v) = p.tree(root, name.ends_with("TreeSet"))?
        {
            return Ok(v);
        }
    }
    p.value(root)
}

impl<'m, 'a> Printer<'m, 'a> {
    fn new(m: &'m Machine<'a>, budget: &'m mut Budget) -> Self {
        Printer {
            open: vec![false; m.nodes.len()],
            m,
            budget,
            depth: 0,
        }
    }

    fn node(&self, i: usize) -> &'m Node {
        self.m.node(i)
    }

    fn values(&mut self, items: &[usize]) -> Result<Vec<Value>, String> {
        items.iter().map(|&i| self.value(i)).collect()
    }

    fn value(&mut self, i: usize) -> Result<Value, String> {
        self.budget.spend()?;
        if self.open[i] {
            return Ok(json!({"$cycle": true}));
        }
        if self.depth >= MAX_DEPTH {
            return Err(format!("the state is nested deeper than {MAX_DEPTH}"));
        }
        self.open[i] = true;
        self.depth += 1;
        let v = self.value_inner(i);
        self.depth -= 1;
        self.open[i] = false;
        v
    }

    fn value_inner(&mut self, i: usize) -> Result<Value, String> {
        Ok(match self.node(i) {
            Node::None => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(v) => json!(v),
            Node::BigInt(s) => Value::String(s.clone()),
            Node::Float(f) => float(*f),
            Node::Str(s) => Value::String(s.clone()),
            Node::Bytes(b) => bytes(b),
            Node::Tuple(items) | Node::List(items) => Value::Array(self.values(items)?),
            Node::Dict(pairs) => self.dict(pairs)?,
            Node::Set(items) | Node::FrozenSet(items) => json!({"$set": self.values(items)?}),
            Node::Global(g) => json!({"$global": g}),
            Node::PersRef(pid) => self.reference(*pid)?,
            Node::Object { class, args, state } => self.object(*class, args, *state)?,
        })
    }

    fn dict(&mut self, pairs: &[(usize, usize)]) -> Result<Value, String> {
        if pairs
            .iter()
            .all(|(k, _)| matches!(self.node(*k), Node::Str(_)))
        {
            let mut out = Map::new();
            for (k, v) in pairs {
                if let Node::Str(key) = self.node(*k) {
                    let v = self.value(*v)?;
                    out.insert(key.clone(), v);
                }
            }
            return Ok(Value::Object(out));
        }
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            out.push(Value::Array(vec![self.value(*k)?, self.value(*v)?]));
        }
        Ok(json!({"$dict": out}))
    }

    /// The bytes a node stands for: bytes, Python 2 text read as latin-1, or the
    /// `_codecs.encode(text, 'latin1')` protocol 2 writes bytes as.
    fn bytes_of(&self, i: usize) -> Option<Vec<u8>> {
        match self.node(i) {
            Node::Bytes(b) => Some(b.clone()),
            n @ Node::Str(_) => latin1(Some(n)),
            Node::Object { class, args, .. }
                if self.global_name(*class) == Some("_codecs.encode") =>
            {
                latin1(args.first().map(|&a| self.node(a)))
            }
            _ => None,
        }
    }

    fn global_name(&self, i: usize) -> Option<&'m str> {
        match self.node(i) {
            Node::Global(g) => Some(g),
            _ => None,
        }
    }

    /// An oid: 8 bytes, big-endian.
    fn oid(&self, i: usize) -> Option<i64> {
        let b = self.bytes_of(i)?;
        Some(i64::from_be_bytes(b.as_slice().try_into().ok()?))
    }

    fn reference(&mut self, pid: usize) -> Result<Value, String> {
        if let Some(o) = self.oid(pid) {
            return Ok(json!({"$ref": o}));
        }
        match self.node(pid) {
            Node::Tuple(t) if t.len() == 2 => {
                if let Some(o) = self.oid(t[0]) {
                    return Ok(match self.global_name(t[1]) {
                        Some(c) => json!({"$ref": o, "$class": c}),
                        None => json!({"$ref": o}),
                    });
                }
            }
            // ZODB's list forms: ['w', (oid[, database])] weak, ['m', (database, oid,
            // class)] and ['n', (database, oid)] to another database.
            Node::List(l) if l.len() == 2 => {
                let tag = match self.node(l[0]) {
                    Node::Str(s) => s.as_str(),
                    _ => "",
                };
                if let Node::Tuple(args) = self.node(l[1]) {
                    let oid_at = |k: usize| args.get(k).and_then(|&i| self.oid(i));
                    let db = match args.first().map(|&i| self.node(i)) {
                        Some(Node::Str(s)) => Value::String(s.clone()),
                        _ => Value::Null,
                    };
                    match tag {
                        "w" => {
                            if let Some(o) = oid_at(0) {
                                return Ok(json!({"$weakref": o}));
                            }
                        }
                        "m" | "n" => {
                            if let Some(o) = oid_at(1) {
                                let mut v = json!({"$ref": o, "$database": db});
                                if let Some(c) = args.get(2).and_then(|&i| self.global_name(i)) {
                                    v["$class"] = json!(c);
                                }
                                return Ok(v);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Ok(json!({"$persistent_id": self.value(pid)?}))
    }

    fn object(
        &mut self,
        class: usize,
        args: &[usize],
        state: Option<usize>,
    ) -> Result<Value, String> {
        let name = self.global_name(class).unwrap_or("");
        let arg = |k: usize| args.get(k).map(|&i| self.node(i));
        match name {
            "copy_reg._reconstructor" | "copyreg._reconstructor" if !args.is_empty() => {
                return self.object(args[0], &[], state);
            }
            "__builtin__.set" | "builtins.set" | "__builtin__.frozenset" | "builtins.frozenset" => {
                if let Some(Node::List(items) | Node::Tuple(items)) = arg(0) {
                    return Ok(json!({"$set": self.values(items)?}));
                }
                if args.is_empty() {
                    return Ok(json!({"$set": []}));
                }
            }
            "_codecs.encode" => {
                if let Some(b) = latin1(arg(0)) {
                    return Ok(bytes(&b));
                }
            }
            "__builtin__.bytearray" | "builtins.bytearray" => match arg(0) {
                Some(Node::Bytes(b)) => return Ok(bytes(b)),
                None => return Ok(bytes(&[])),
                _ => {}
            },
            "datetime.datetime" | "datetime.date" | "datetime.time" => {
                let raw = args.first().and_then(|&i| self.bytes_of(i));
                if let Some(iso) = raw.and_then(|b| datetime_iso(name, &b)) {
                    return Ok(match args.get(1) {
                        Some(&tz) if !matches!(self.node(tz), Node::None) => {
                            json!({"$class": name, "$value": iso, "$tzinfo": self.value(tz)?})
                        }
                        _ => Value::String(iso),
                    });
                }
            }
            "decimal.Decimal" => {
                if let Some(Node::Str(s)) = arg(0) {
                    return Ok(json!({"$decimal": s}));
                }
            }
            _ => {}
        }
        let mut out = Map::new();
        out.insert(
            "$class".into(),
            match self.global_name(class) {
                Some(c) => Value::String(c.to_string()),
                None => self.value(class)?,
            },
        );
        if !args.is_empty() {
            out.insert("$args".into(), Value::Array(self.values(args)?));
        }
        if let Some(s) = state
            && !matches!(self.node(s), Node::None)
        {
            out.insert("$state".into(), self.value(s)?);
        }
        Ok(Value::Object(out))
    }

    /// A bucket's state: `(flat items[, next bucket])`. `None` when it is not that shape.
    fn bucket(&mut self, root: usize, set: bool) -> Result<Option<Value>, String> {
        let Node::Tuple(parts) = self.node(root) else {
            return Ok(None);
        };
        let Some(Node::Tuple(flat)) = parts.first().map(|&i| self.node(i)) else {
            return Ok(None);
        };
        if parts.len() > 2 || (!set && !flat.len().is_multiple_of(2)) {
            return Ok(None);
        }
        let mut out = Map::new();
        if set {
            out.insert("$keys".into(), Value::Array(self.values(flat)?));
        } else {
            out.insert("$items".into(), self.items(flat)?);
        }
        if let Some(&next) = parts.get(1) {
            out.insert("$next".into(), self.value(next)?);
        }
        Ok(Some(Value::Object(out)))
    }

    fn items(&mut self, flat: &[usize]) -> Result<Value, String> {
        let pairs: Vec<(usize, usize)> = flat.chunks(2).map(|p| (p[0], p[1])).collect();
        if pairs
            .iter()
            .all(|(k, _)| matches!(self.node(*k), Node::Str(_)))
        {
            return self.dict(&pairs);
        }
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            out.push(Value::Array(vec![self.value(k)?, self.value(v)?]));
        }
        Ok(Value::Array(out))
    }

    /// A BTree's or TreeSet's state: `None` (empty), `((bucket state,),)` (one inline
    /// bucket), or `((child, key, child, …), first bucket)`.
    fn tree(&mut self, root: usize, set: bool) -> Result<Option<Value>, String> {
        let parts = match self.node(root) {
            Node::None => {
                let empty = if set {
                    json!({"$keys": []})
                } else {
                    json!({"$items": {}})
                };
                return Ok(Some(empty));
            }
            Node::Tuple(p) => p,
            _ => return Ok(None),
        };
        let Some(Node::Tuple(data)) = parts.first().map(|&i| self.node(i)) else {
            return Ok(None);
        };
        if parts.len() == 1 && data.len() == 1 {
            return self.bucket(data[0], set);
        }
        if parts.len() != 2 {
            return Ok(None);
        }
        let mut children = Vec::new();
        let mut keys = Vec::new();
        for (n, &i) in data.iter().enumerate() {
            if n.is_multiple_of(2) {
                children.push(self.value(i)?);
            } else {
                keys.push(self.value(i)?);
            }
        }
        Ok(Some(json!({
            "$children": children,
            "$keys": keys,
            "$firstbucket": self.value(parts[1])?,
        })))
    }
}

fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// Text whose every character is below 256, as those bytes.
fn latin1(n: Option<&Node>) -> Option<Vec<u8>> {
    match n {
        Some(Node::Str(s)) => s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect(),
        _ => None,
    }
}

fn bytes(b: &[u8]) -> Value {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    json!({"$bytes": hex})
}

/// The ISO 8601 text of a pickled `datetime`, `date` or `time` (their `__reduce__` packs
/// the fields in bytes: year high, year low, month, day, hour, minute, second, microsecond
/// in 3 bytes; a time starts at the hour).
fn datetime_iso(class: &str, b: &[u8]) -> Option<String> {
    let us = |b: &[u8]| (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
    let frac = |us: u32| {
        if us == 0 {
            String::new()
        } else {
            format!(".{us:06}")
        }
    };
    match (class, b.len()) {
        ("datetime.date", 4) => Some(format!(
            "{:04}-{:02}-{:02}",
            u16::from(b[0]) * 256 + u16::from(b[1]),
            b[2],
            b[3]
        )),
        ("datetime.datetime", 10) => {
            let (month, day, h, m, s) = (b[2], b[3], b[4], b[5], b[6]);
            (1..=12).contains(&(month & 0x7f)).then(|| {
                format!(
                    "{:04}-{:02}-{:02}T{h:02}:{m:02}:{s:02}{}",
                    u16::from(b[0]) * 256 + u16::from(b[1]),
                    month & 0x7f,
                    day,
                    frac(us(&b[7..10]))
                )
            })
        }
        ("datetime.time", 6) => Some(format!(
            "{:02}:{:02}:{:02}{}",
            b[0] & 0x7f,
            b[1],
            b[2],
            frac(us(&b[3..6]))
        )),
        _ => None,
    }
}

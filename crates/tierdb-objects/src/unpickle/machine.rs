//! The pickle machine: opcodes of protocols 0 to 5 into an arena of [`Node`]s.
//!
//! The stack and the memo hold node indices, so a memo `GET` pushes the same node and later
//! `APPEND`s, `SETITEM`s and `BUILD`s are seen through every reference, as in Python. One
//! machine reads both pickles of a ZODB record: ZODB writes them with one pickler, so the
//! state pickle may refer to the class pickle's memo.

use std::collections::HashMap;

/// One Python value. Containers hold indices into the machine's arena.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond i64, in decimal.
    BigInt(String),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<usize>),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    FrozenSet(Vec<usize>),
    /// A class or function by name: `module.name`.
    Global(String),
    /// A persistent reference; the node is its persistent id.
    PersRef(usize),
    /// `callable(*args)` (REDUCE, NEWOBJ, INST, OBJ), then `BUILD` with `state`.
    Object {
        class: usize,
        args: Vec<usize>,
        state: Option<usize>,
    },
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Mark,
    Val(usize),
}

pub struct Machine<'a> {
    buf: &'a [u8],
    pos: usize,
    pub(super) nodes: Vec<Node>,
    stack: Vec<Slot>,
    memo: HashMap<u64, usize>,
}

type R<T> = Result<T, String>;

/// `module.Name` of a ZODB class pickle: a global, or a `(global, args)` tuple.
pub fn class_name(m: &Machine<'_>, root: usize) -> Option<String> {
    match m.node(root) {
        Node::Global(g) => Some(g.clone()),
        Node::Tuple(items) => match items.first().map(|&i| m.node(i)) {
            Some(Node::Global(g)) => Some(g.clone()),
            _ => None,
        },
        _ => None,
    }
}

impl<'a> Machine<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Machine {
            buf,
            pos: 0,
            nodes: Vec::new(),
            stack: Vec::new(),
            memo: HashMap::new(),
        }
    }

    pub fn node(&self, i: usize) -> &Node {
        // Indices come only from `add`: always in range.
        &self.nodes[i]
    }

    fn add(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    fn push(&mut self, n: Node) {
        let i = self.add(n);
        self.stack.push(Slot::Val(i));
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> R<u64> {
        let b = self.take(n)?;
        Ok(b.iter()
            .enumerate()
            .fold(0u64, |v, (i, x)| v | (u64::from(*x) << (8 * i))))
    }

    fn len(&mut self, n: usize) -> R<usize> {
        let v = self.uint(n)?;
        usize::try_from(v).map_err(|_| format!("length {v} at byte {}", self.pos))
    }

    fn line(&mut self) -> R<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or_else(|| format!("line without end at byte {}", self.pos))?;
        self.pos += n + 1;
        let l = &rest[..n];
        Ok(l.strip_suffix(b"\r").unwrap_or(l))
    }

    fn text_line(&mut self) -> R<&'a str> {
        let at = self.pos;
        std::str::from_utf8(self.line()?).map_err(|_| format!("text line not UTF-8 at byte {at}"))
    }

    fn pop(&mut self) -> R<usize> {
        match self.stack.pop() {
            Some(Slot::Val(i)) => Ok(i),
            Some(Slot::Mark) => Err(format!("mark where a value belongs at byte {}", self.pos)),
            None => Err(format!("stack empty at byte {}", self.pos)),
        }
    }

    fn top(&self) -> R<usize> {
        match self.stack.last() {
            Some(Slot::Val(i)) => Ok(*i),
            _ => Err(format!("no value on the stack at byte {}", self.pos)),
        }
    }

    /// The values above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> R<Vec<usize>> {
        let at = self
            .stack
            .iter()
            .rposition(|s| matches!(s, Slot::Mark))
            .ok_or_else(|| format!("no mark at byte {}", self.pos))?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .filter_map(|s| match s {
                Slot::Val(i) => Some(i),
                Slot::Mark => None,
            })
            .collect())
    }

    fn memo_put(&mut self, key: u64) -> R<()> {
        let v = self.top()?;
        self.memo.insert(key, v);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> R<()> {
        let v = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("memo {key} unset at byte {}", self.pos))?;
        self.stack.push(Slot::Val(v));
        Ok(())
    }

    fn append(&mut self, to: usize, items: Vec<usize>) -> R<()> {
        match &mut self.nodes[to] {
            Node::List(l) => l.extend(items),
            // `list.extend` on a list subclass instance: keep the items as its args.
            Node::Object { args, .. } => args.extend(items),
            other => return Err(format!("APPEND to {}", kind(other))),
        }
        Ok(())
    }

    fn set_items(&mut self, to: usize, items: Vec<usize>) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return Err(format!("odd number of dict items at byte {}", self.pos));
        }
        let pairs = items.chunks(2).map(|p| (p[0], p[1]));
        match &mut self.nodes[to] {
            Node::Dict(d) => d.extend(pairs),
            other => return Err(format!("SETITEM on {}", kind(other))),
        }
        Ok(())
    }

    fn string(&mut self, raw: &[u8]) -> Node {
        // A Python 2 `str`: text when it is UTF-8, bytes otherwise.
        match std::str::from_utf8(raw) {
            Ok(s) => Node::Str(s.to_string()),
            Err(_) => Node::Bytes(raw.to_vec()),
        }
    }

    fn object(&mut self, class: usize, args: usize) {
        let args = match self.node(args) {
            Node::Tuple(t) => t.clone(),
            _ => vec![args],
        };
        self.push(Node::Object {
            class,
            args,
            state: None,
        });
    }

    /// Runs one pickle to its STOP; returns the value it made.
    pub fn run(&mut self) -> R<usize> {
        self.stack.clear();
        loop {
            let at = self.pos;
            let op = *self.take(1)?.first().unwrap_or(&0);
            match op {
                0x80 => {
                    let v = self.uint(1)?;
                    if v > 5 {
                        return Err(format!("unsupported pickle protocol {v}"));
                    }
                }
                0x95 => {
                    self.uint(8)?;
                }
                b'.' => return self.pop(),
                b'(' => self.stack.push(Slot::Mark),
                b'0' => {
                    self.stack.pop().ok_or("POP on an empty stack")?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => self.stack.push(Slot::Val(self.top()?)),
                b'N' => self.push(Node::None),
                0x88 => self.push(Node::Bool(true)),
                0x89 => self.push(Node::Bool(false)),
                b'I' => {
                    let l = self.text_line()?;
                    let n = match l {
                        "00" => Node::Bool(false),
                        "01" => Node::Bool(true),
                        _ => int_text(l).ok_or_else(|| format!("bad INT at byte {at}"))?,
                    };
                    self.push(n);
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.push(Node::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.push(Node::Int(v as i64));
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.push(Node::Int(v as i64));
                }
                b'L' => {
                    let l = self.text_line()?;
                    let n = int_text(l.trim_end_matches('L'))
                        .ok_or_else(|| format!("bad LONG at byte {at}"))?;
                    self.push(n);
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.len(1)?
                    } else {
                        self.len(4)?
                    };
                    let b = self.take(n)?;
                    self.push(long_le(b));
                }
                b'F' => {
                    let l = self.text_line()?;
                    let v: f64 = l.parse().map_err(|_| format!("bad FLOAT at byte {at}"))?;
                    self.push(Node::Float(v));
                }
                b'G' => {
                    let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| "BINFLOAT")?;
                    self.push(Node::Float(f64::from_be_bytes(b)));
                }
                b'S' => {
                    let l = self.line()?;
                    let raw = unquote(l).ok_or_else(|| format!("bad STRING at byte {at}"))?;
                    let n = self.string(&raw);
                    self.push(n);
                }
                b'T' | b'U' => {
                    let n = if op == b'T' {
                        self.len(4)?
                    } else {
                        self.len(1)?
                    };
                    let raw = self.take(n)?;
                    let n = self.string(raw);
                    self.push(n);
                }
                b'V' => {
                    let l = self.line()?;
                    let s =
                        raw_unicode_escape(l).ok_or_else(|| format!("bad UNICODE at byte {at}"))?;
                    self.push(Node::Str(s));
                }
                b'X' | 0x8c | 0x8d => {
                    let n = match op {
                        b'X' => self.len(4)?,
                        0x8c => self.len(1)?,
                        _ => self.len(8)?,
                    };
                    let s = std::str::from_utf8(self.take(n)?)
                        .map_err(|_| format!("string not UTF-8 at byte {at}"))?;
                    self.push(Node::Str(s.to_string()));
                }
                b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'B' => self.len(4)?,
                        b'C' => self.len(1)?,
                        _ => self.len(8)?,
                    };
                    let b = self.take(n)?.to_vec();
                    self.push(Node::Bytes(b));
                }
                b')' => self.push(Node::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Node::Tuple(items));
                }
                b']' => self.push(Node::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    let to = self.top()?;
                    self.append(to, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let to = self.top()?;
                    self.append(to, items)?;
                }
                b'}' => self.push(Node::Dict(Vec::new())),
                b'd' => {
                    let items = self.pop_mark()?;
                    if !items.len().is_multiple_of(2) {
                        return Err(format!("odd number of dict items at byte {at}"));
                    }
                    self.push(Node::Dict(items.chunks(2).map(|p| (p[0], p[1])).collect()));
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let to = self.top()?;
                    self.set_items(to, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let to = self.top()?;
                    self.set_items(to, items)?;
                }
                0x8f => self.push(Node::Set(Vec::new())),
                0x90 => {
                    let items = self.pop_mark()?;
                    let to = self.top()?;
                    match &mut self.nodes[to] {
                        Node::Set(s) => s.extend(items),
                        other => return Err(format!("ADDITEMS to {}", kind(other))),
                    }
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Node::FrozenSet(items));
                }
                b'c' => {
                    let module = self.text_line()?;
                    let name = self.text_line()?;
                    self.push(Node::Global(format!("{module}.{name}")));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (self.node(module), self.node(name)) {
                        (Node::Str(m), Node::Str(n)) => {
                            let g = format!("{m}.{n}");
                            self.push(Node::Global(g));
                        }
                        _ => return Err(format!("STACK_GLOBAL without names at byte {at}")),
                    }
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let class = self.pop()?;
                    self.object(class, args);
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let class = self.pop()?;
                    self.object(class, args);
                }
                b'i' => {
                    let module = self.text_line()?;
                    let name = self.text_line()?;
                    let args = self.pop_mark()?;
                    let class = self.add(Node::Global(format!("{module}.{name}")));
                    self.push(Node::Object {
                        class,
                        args,
                        state: None,
                    });
                }
                b'o' => {
                    let mut items = self.pop_mark()?;
                    if items.is_empty() {
                        return Err(format!("OBJ without a class at byte {at}"));
                    }
                    let class = items.remove(0);
                    self.push(Node::Object {
                        class,
                        args: items,
                        state: None,
                    });
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.top()?;
                    match &mut self.nodes[obj] {
                        Node::Object { state: s, .. } => *s = Some(state),
                        other => return Err(format!("BUILD on {}", kind(other))),
                    }
                }
                b'p' => {
                    let l = self.text_line()?;
                    let k = l.parse().map_err(|_| format!("bad PUT at byte {at}"))?;
                    self.memo_put(k)?;
                }
                b'q' => {
                    let k = self.uint(1)?;
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.uint(4)?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?;
                }
                b'g' => {
                    let l = self.text_line()?;
                    let k = l.parse().map_err(|_| format!("bad GET at byte {at}"))?;
                    self.memo_get(k)?;
                }
                b'h' => {
                    let k = self.uint(1)?;
                    self.memo_get(k)?;
                }
                b'j' => {
                    let k = self.uint(4)?;
                    self.memo_get(k)?;
                }
                b'P' => {
                    let l = self.line()?;
                    let pid = self.string(l);
                    let pid = self.add(pid);
                    self.push(Node::PersRef(pid));
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.push(Node::PersRef(pid));
                }
                _ => return Err(format!("unsupported opcode 0x{op:02x} at byte {at}")),
            }
        }
    }
}

fn kind(n: &Node) -> &'static str {
    match n {
        Node::None => "None",
        Node::Bool(_) => "a bool",
        Node::Int(_) | Node::BigInt(_) => "an int",
        Node::Float(_) => "a float",
        Node::Str(_) => "a str",
        Node::Bytes(_) => "bytes",
        Node::Tuple(_) => "a tuple",
        Node::List(_) => "a list",
        Node::Dict(_) => "a dict",
        Node::Set(_) | Node::FrozenSet(_) => "a set",
        Node::Global(_) => "a global",
        Node::PersRef(_) => "a persistent reference",
        Node::Object { .. } => "an object",
    }
}

fn int_text(s: &str) -> Option<Node> {
    if let Ok(v) = s.parse::<i64>() {
        return Some(Node::Int(v));
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()))
        .then(|| Node::BigInt(s.to_string()))
}

/// A little-endian two's complement integer (LONG1, LONG4).
fn long_le(b: &[u8]) -> Node {
    if b.is_empty() {
        return Node::Int(0);
    }
    if b.len() <= 8 {
        let neg = b[b.len() - 1] & 0x80 != 0;
        let mut v: u64 = if neg { u64::MAX } else { 0 };
        for (i, x) in b.iter().enumerate() {
            v &= !(0xff << (8 * i));
            v |= u64::from(*x) << (8 * i);
        }
        return Node::Int(v as i64);
    }
    Node::BigInt(big_decimal(b))
}

/// The decimal digits of a little-endian two's complement integer of any length.
pub(super) fn big_decimal(b: &[u8]) -> String {
    let neg = b[b.len() - 1] & 0x80 != 0;
    // Magnitude, little-endian bytes.
    let mut mag: Vec<u8> = if neg {
        // Two's complement: invert and add one.
        let mut m: Vec<u8> = b.iter().map(|x| !x).collect();
        for x in m.iter_mut() {
            let (v, carry) = x.overflowing_add(1);
            *x = v;
            if !carry {
                break;
            }
        }
        m
    } else {
        b.to_vec()
    };
    let mut digits = Vec::new();
    while mag.iter().any(|&x| x != 0) {
        let mut rem = 0u32;
        for x in mag.iter_mut().rev() {
            let cur = (rem << 8) | u32::from(*x);
            *x = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    if neg {
        digits.push(b'-');
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

/// A protocol 0 STRING argument: quoted, with Python's escapes.
pub(super) fn unquote(l: &[u8]) -> Option<Vec<u8>> {
    let q = *l.first()?;
    if (q != b'\'' && q != b'"') || l.len() < 2 || l[l.len() - 1] != q {
        return None;
    }
    let mut out = Vec::new();
    let mut it = l[1..l.len() - 1].iter().copied().peekable();
    while let Some(c) = it.next() {
        if c != b'\\' {
            out.push(c);
            continue;
        }
        match it.next()? {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'x' => {
                let h = [it.next()?, it.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&h).ok()?, 16).ok()?);
            }
            d @ b'0'..=b'7' => {
                let mut v = u32::from(d - b'0');
                for _ in 0..2 {
                    match it.peek() {
                        Some(&o @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(o - b'0');
                            it.next();
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// A protocol 0 UNICODE argument: `raw-unicode-escape` (only `\uXXXX` and `\UXXXXXXXX`).
pub(super) fn raw_unicode_escape(l: &[u8]) -> Option<String> {
    let mut out = String::new();
    let mut i = 0;
    while i < l.len() {
        if l[i] == b'\\' && i + 1 < l.len() && (l[i + 1] == b'u' || l[i + 1] == b'U') {
            let n = if l[i + 1] == b'u' { 4 } else { 8 };
            let hex = std::str::from_utf8(l.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            i += 2 + n;
        } else {
            // Latin-1.
            out.push(char::from(l[i]));
            i += 1;
        }
    }
    Some(out)
}

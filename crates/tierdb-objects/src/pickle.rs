//! The object references in a ZODB data record, without Python: what
//! `ZODB.serialize.referencesf` returns, for pack's garbage collection from the CLI.
//!
//! A ZODB record is two pickles (the class, then the state). References are persistent ids
//! (`BINPERSID`/`PERSID`): an oid, an `(oid, class)` tuple, or a list for weak and
//! cross-database references (which, as in ZODB, are not followed). This walks the opcodes
//! with a stack that models only what persistent ids are made of (bytes, strings, tuples,
//! lists); everything else is an opaque value. Any malformed input is an error, never a
//! panic: an object whose references cannot be read stops the pack.

use tierdb_store::Damage;

use crate::ids::Oid;

#[derive(Debug, Clone)]
enum Value {
    Bytes(Vec<u8>),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Other,
    Mark,
}

struct Walker<'a> {
    buf: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    memo: std::collections::HashMap<u64, Value>,
    refs: Vec<Oid>,
}

type R<T> = Result<T, Damage>;

impl<'a> Walker<'a> {
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("pickle truncated at byte {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> R<u64> {
        let b = self.take(n)?;
        let mut v = 0u64;
        for (i, x) in b.iter().enumerate() {
            v |= (*x as u64) << (8 * i);
        }
        Ok(v)
    }

    fn line(&mut self) -> R<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or_else(|| format!("pickle line without end at byte {}", self.pos))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn pop(&mut self) -> R<Value> {
        self.stack
            .pop()
            .ok_or_else(|| Damage(format!("pickle stack empty at byte {}", self.pos)))
    }

    fn top(&mut self) -> R<&mut Value> {
        let pos = self.pos;
        self.stack
            .last_mut()
            .ok_or_else(|| Damage(format!("pickle stack empty at byte {pos}")))
    }

    /// The values above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> R<Vec<Value>> {
        let i = self
            .stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or_else(|| format!("pickle mark missing at byte {}", self.pos))?;
        let items = self.stack.split_off(i + 1);
        self.stack.pop();
        Ok(items)
    }

    fn persistent_id(&mut self, pid: Value) -> R<()> {
        let oid = match pid {
            Value::Tuple(mut items) if !items.is_empty() => items.swap_remove(0),
            Value::List(_) => return Ok(()), // weak or cross-database: not followed
            other => other,
        };
        let bytes = match oid {
            Value::Bytes(b) => b,
            Value::Str(s) => s.into_bytes(),
            other => return Err(format!("persistent id is not an oid: {other:?}").into()),
        };
        let oid = Oid::from_bytes(&bytes)
            .ok_or_else(|| format!("persistent id of {} bytes is not an oid", bytes.len()))?;
        self.refs.push(oid);
        Ok(())
    }

    /// Walks one pickle, up to and including its STOP. The memo carries over: ZODB writes
    /// both pickles of a record with one pickler, so the state may refer to the class's.
    fn pickle(&mut self) -> R<()> {
        self.stack.clear();
        loop {
            let op = self.take(1)?[0];
            match op {
                b'.' => return Ok(()), // STOP
                0x80 => {
                    self.take(1)?; // PROTO
                }
                0x95 => {
                    self.take(8)?; // FRAME
                }
                b'(' => self.stack.push(Value::Mark),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.stack.push(v);
                }
                b'N' | 0x88 | 0x89 => self.stack.push(Value::Other),
                b'I' | b'L' | b'F' => {
                    self.line()?;
                    self.stack.push(Value::Other);
                }
                b'J' => self.skip_push(4)?,
                b'K' => self.skip_push(1)?,
                b'M' => self.skip_push(2)?,
                b'G' => self.skip_push(8)?,
                0x8a => {
                    let n = self.uint(1)? as usize;
                    self.skip_push(n)?;
                }
                0x8b => {
                    let n = self.uint(4)? as usize;
                    self.skip_push(n)?;
                }
                b'S' => {
                    // STRING: a quoted Python 2 str repr; oids in it are escaped bytes.
                    let l = self.line()?;
                    let v = unquote(l).map(Value::Bytes).unwrap_or(Value::Other);
                    self.stack.push(v);
                }
                b'T' => {
                    let n = self.uint(4)? as usize;
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b));
                }
                b'U' => {
                    let n = self.uint(1)? as usize;
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b));
                }
                b'B' => {
                    let n = self.uint(4)? as usize;
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b));
                }
                b'C' => {
                    let n = self.uint(1)? as usize;
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b));
                }
                0x8e => {
                    let n = self.uint(8)? as usize;
                    let b = self.take(n)?.to_vec();
                    self.stack.push(Value::Bytes(b));
                }
                0x96 => {
                    let n = self.uint(8)? as usize;
                    self.skip_push(n)?; // BYTEARRAY8
                }
                b'V' => {
                    let l = self.line()?;
                    self.stack
                        .push(Value::Str(String::from_utf8_lossy(l).into_owned()));
                }
                b'X' => {
                    let n = self.uint(4)? as usize;
                    self.push_str(n)?;
                }
                0x8c => {
                    let n = self.uint(1)? as usize;
                    self.push_str(n)?;
                }
                0x8d => {
                    let n = self.uint(8)? as usize;
                    self.push_str(n)?;
                }
                b')' => self.stack.push(Value::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err(format!("pickle stack empty at byte {}", self.pos).into());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    if items.iter().any(|v| matches!(v, Value::Mark)) {
                        return Err(
                            format!("pickle mark inside a tuple at byte {}", self.pos).into()
                        );
                    }
                    self.stack.push(Value::Tuple(items));
                }
                b']' => self.stack.push(Value::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    if let Value::List(items) = self.top()? {
                        items.push(v);
                    }
                }
                b'e' => {
                    let vs = self.pop_mark()?;
                    if let Value::List(items) = self.top()? {
                        items.extend(vs);
                    }
                }
                b'}' | 0x8f => self.stack.push(Value::Other),
                b'd' | 0x91 | b'o' => {
                    self.pop_mark()?; // DICT, FROZENSET, OBJ
                    self.stack.push(Value::Other);
                }
                b's' => {
                    self.pop()?;
                    self.pop()?;
                }
                b'u' | 0x90 => {
                    self.pop_mark()?;
                }
                b'c' => {
                    self.line()?;
                    self.line()?;
                    self.stack.push(Value::Other); // GLOBAL
                }
                b'i' => {
                    self.line()?;
                    self.line()?;
                    self.pop_mark()?;
                    self.stack.push(Value::Other); // INST
                }
                0x93 | b'R' | 0x81 => {
                    self.pop()?; // STACK_GLOBAL, REDUCE, NEWOBJ
                    self.pop()?;
                    self.stack.push(Value::Other);
                }
                0x92 => {
                    self.pop()?; // NEWOBJ_EX
                    self.pop()?;
                    self.pop()?;
                    self.stack.push(Value::Other);
                }
                b'b' => {
                    self.pop()?; // BUILD
                }
                0x82 => self.skip_push(1)?,
                0x83 => self.skip_push(2)?,
                0x84 => self.skip_push(4)?,
                b'p' => {
                    let l = self.line()?;
                    let k = parse_int(l)?;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'q' => {
                    let k = self.uint(1)?;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'r' => {
                    let k = self.uint(4)?;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'g' => {
                    let l = self.line()?;
                    let k = parse_int(l)?;
                    self.push_memo(k)?;
                }
                b'h' => {
                    let k = self.uint(1)?;
                    self.push_memo(k)?;
                }
                b'j' => {
                    let k = self.uint(4)?;
                    self.push_memo(k)?;
                }
                b'P' => {
                    let l = self.line()?;
                    self.persistent_id(Value::Bytes(l.to_vec()))?;
                    self.stack.push(Value::Other);
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.persistent_id(pid)?;
                    self.stack.push(Value::Other);
                }
                0x97 => self.stack.push(Value::Other), // NEXT_BUFFER
                0x98 => {}                             // READONLY_BUFFER
                other => {
                    return Err(format!(
                        "unknown pickle opcode 0x{other:02x} at byte {}",
                        self.pos - 1
                    )
                    .into());
                }
            }
        }
    }

    fn skip_push(&mut self, n: usize) -> R<()> {
        self.take(n)?;
        self.stack.push(Value::Other);
        Ok(())
    }

    fn push_str(&mut self, n: usize) -> R<()> {
        let b = self.take(n)?;
        self.stack
            .push(Value::Str(String::from_utf8_lossy(b).into_owned()));
        Ok(())
    }

    fn push_memo(&mut self, k: u64) -> R<()> {
        let v = self
            .memo
            .get(&k)
            .cloned()
            .ok_or_else(|| format!("pickle memo {k} missing at byte {}", self.pos))?;
        self.stack.push(v);
        Ok(())
    }
}

fn parse_int(l: &[u8]) -> R<u64> {
    std::str::from_utf8(l)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Damage::from("bad pickle memo key"))
}

/// Decodes a Python 2 `repr` of a str (`'...'` with escapes) to its bytes.
fn unquote(l: &[u8]) -> Option<Vec<u8>> {
    let q = *l.first()?;
    if (q != b'\'' && q != b'"') || l.len() < 2 || l[l.len() - 1] != q {
        return None;
    }
    let body = &l[1..l.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *body.get(i + 1)?;
        i += 2;
        match e {
            b'x' => {
                let h = std::str::from_utf8(body.get(i..i + 2)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match body.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
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

/// The oids a ZODB data record (class pickle, then state pickle) refers to, in order, as
/// `ZODB.serialize.referencesf` finds them.
pub fn references(data: &[u8]) -> Result<Vec<Oid>, Damage> {
    let mut w = Walker {
        buf: data,
        pos: 0,
        stack: Vec::new(),
        memo: Default::default(),
        refs: Vec::new(),
    };
    w.pickle().map_err(|e| format!("class pickle: {e}"))?;
    w.pickle().map_err(|e| format!("state pickle: {e}"))?;
    Ok(w.refs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(references(b"").is_err());
        assert!(references(b"\x80\x03").is_err());
        assert!(references(b"\xff.").is_err());
        assert!(references(b"Q.").is_err());
        // Every prefix of a valid record, and every byte flipped, is handled.
        let rec: &[u8] = b"\x80\x03cpersistent.mapping\nPersistentMapping\nq\x00.\x80\x03}q\x01X\x04\x00\x00\x00dataq\x02}q\x03X\x01\x00\x00\x00aq\x04C\x08\x00\x00\x00\x00\x00\x00\x00\x01q\x05cfoo\nBar\nq\x06\x86q\x07Qss.";
        assert_eq!(references(rec).unwrap(), vec![Oid(1)]);
        for cut in 0..rec.len() {
            let _ = references(&rec[..cut]);
        }
        for i in 0..rec.len() {
            let mut bad = rec.to_vec();
            bad[i] ^= 0x5a;
            let _ = references(&bad);
        }
    }

    #[test]
    fn python2_string_oids_are_unquoted() {
        assert_eq!(
            unquote(br"'\x00\x00\x00\x00\x00\x00\x00\x07'").unwrap(),
            vec![0, 0, 0, 0, 0, 0, 0, 7]
        );
    }
}

//! ZODB records as JSON, without Python: what `tierdb sql` shows in `zodb.objects.state`.
//!
//! A ZODB data record is two pickles: the class (a global, or a `(class, args)` tuple), then
//! the state (usually the instance `__dict__`). [`decode_record`] runs both through a small
//! pickle machine ([`machine`]) whose values live in an arena, so memo references share one
//! node as Python's objects do (a list memoized empty and appended to later is the same
//! list), then prints the state as JSON ([`json`]).
//!
//! Why not `serde-pickle`: it refuses a global it does not know (every class reference in a
//! ZODB record: `persistent.mapping.PersistentMapping`, `datetime.datetime`, `BTrees…`) or
//! turns it into `None`, and replaces an instance by its state, losing the class: the two
//! things a person looking inside a ZODB database asks first.
//!
//! Invariants:
//! 1. Any input is a value or an error, never a panic, and never unbounded work: nodes are
//!    at most one per input byte, and printing stops with an error past an output budget
//!    (shared nodes reached many times, cycles are printed once and then as a marker).
//! 2. Nothing in a pickle is executed or looked up: a global is its name.
//! 3. The JSON forms are documented in `docs/design/objects.md` ("SQL over a ZODB
//!    database") and fixed by the tests here.

mod json;
mod machine;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub use json::Budget;

/// A decoded ZODB record.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedRecord {
    /// `module.Name` of the object's class (`None` if the class pickle names none).
    pub class_name: Option<String>,
    /// The state as JSON; `Err` says why it could not be shown (the class is still known).
    pub state: Result<serde_json::Value, String>,
}

/// Decodes a ZODB data record (class pickle, then state pickle). `Err` only when not even
/// the class pickle could be read.
pub fn decode_record(data: &[u8]) -> Result<DecodedRecord, String> {
    let mut m = machine::Machine::new(data);
    let class = m.run().map_err(|e| format!("class pickle: {e}"))?;
    let class_name = machine::class_name(&m, class);
    let state = m
        .run()
        .map_err(|e| format!("state pickle: {e}"))
        .and_then(|root| {
            let mut budget = Budget::for_input(data.len());
            json::state_json(&m, root, class_name.as_deref(), &mut budget)
        });
    Ok(DecodedRecord { class_name, state })
}

/// The class of a ZODB data record (its first pickle only), `None` if it names none or
/// cannot be read.
pub fn record_class(data: &[u8]) -> Option<String> {
    let mut m = machine::Machine::new(data);
    let class = m.run().ok()?;
    machine::class_name(&m, class)
}

/// Decodes one pickle (a transaction's extension mapping, say) as JSON.
pub fn decode_pickle(data: &[u8]) -> Result<serde_json::Value, String> {
    let mut m = machine::Machine::new(data);
    let root = m.run()?;
    let mut budget = Budget::for_input(data.len());
    json::to_json(&m, root, &mut budget)
}

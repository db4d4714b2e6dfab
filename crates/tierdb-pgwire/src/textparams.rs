//! Parameters of the types tierdb stores as text (UUID, JSON, JSONB; `tierdb_tables::pgtext`)
//! bound as text. arrow-pg decodes a parameter by the type the client declared and knows
//! none of these (psycopg sends a `uuid.UUID` as type 2950, `Json` as 114), so such a
//! parameter is given to it as TEXT in text format: a binary UUID's 16 bytes become its
//! canonical text, a binary JSONB value loses its version byte, JSON's binary form is its
//! text. The statement then checks the text as the column's type (22P02 if it is not one).

use std::sync::Arc;

use bytes::Bytes;
use pgwire::api::Type;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::stmt::StoredStatement;
use pgwire::error::PgWireResult;

use crate::errors::user_error;

/// Whether a parameter declared as `ty` is bound as text here.
fn text_stored(ty: &Type) -> bool {
    matches!(*ty, Type::UUID | Type::JSON | Type::JSONB)
}

/// A value's text from its binary form as type `ty`.
fn binary_as_text(ty: &Type, value: &[u8]) -> Result<Vec<u8>, String> {
    match *ty {
        Type::UUID => uuid::Uuid::from_slice(value)
            .map(|u| u.hyphenated().to_string().into_bytes())
            .map_err(|_| format!("a binary uuid is 16 bytes, not {}", value.len())),
        Type::JSONB => match value.split_first() {
            Some((1, text)) => Ok(text.to_vec()),
            Some((v, _)) => Err(format!("unsupported jsonb version number {v}")),
            None => Err("an empty binary jsonb value".into()),
        },
        _ => Ok(value.to_vec()),
    }
}

/// The statement's parameters that are UUID, JSON or JSONB by the column they meet
/// (`tierdb_tables::paramdecl`), by position.
pub(crate) fn declared_types(plan: &datafusion::logical_expr::LogicalPlan) -> Vec<Option<Type>> {
    let found = tierdb_tables::paramdecl::declared_parameters(plan);
    let n = found.keys().copied().max().unwrap_or(0);
    (1..=n)
        .map(|i| {
            found.get(&i).and_then(|d| match d.as_str() {
                "UUID" => Some(Type::UUID),
                "JSON" => Some(Type::JSON),
                "JSONB" => Some(Type::JSONB),
                _ => None,
            })
        })
        .collect()
}

/// `portal` with its UUID, JSON and JSONB parameters as text (module doc); `None` when it
/// has none. A parameter's type is the client's, or where the client left it unspecified,
/// the server's (`server`: what ParameterDescription told it, `declared_types`).
pub(crate) fn text_parameters<S: Clone>(
    portal: &Portal<S>,
    server: &[Option<Type>],
) -> PgWireResult<Option<Portal<S>>> {
    let n = portal.parameters.len();
    let types: Vec<Option<Type>> = (0..n.max(portal.statement.parameter_types.len()))
        .map(
            |i| match portal.statement.parameter_types.get(i).cloned().flatten() {
                Some(t) if t != Type::UNKNOWN => Some(t),
                _ => server.get(i).cloned().flatten(),
            },
        )
        .collect();
    let types = &types;
    if !types.iter().flatten().any(text_stored) {
        return Ok(None);
    }
    let mut formats = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let mut new_types = types.clone();
    for (i, value) in portal.parameters.iter().enumerate() {
        let binary = portal.parameter_format.is_binary(i);
        match types.get(i).and_then(Option::as_ref) {
            Some(ty) if text_stored(ty) => {
                let text = match value {
                    Some(v) if binary => {
                        Some(Bytes::from(binary_as_text(ty, v).map_err(|e| {
                            user_error("22P02", format!("parameter ${}: {e}", i + 1))
                        })?))
                    }
                    other => other.clone(),
                };
                values.push(text);
                formats.push(0);
                new_types[i] = Some(Type::TEXT);
            }
            _ => {
                values.push(value.clone());
                formats.push(i16::from(binary));
            }
        }
    }
    let statement = StoredStatement::new(
        portal.statement.id.clone(),
        portal.statement.statement.clone(),
        new_types,
    );
    let mut out = Portal::new_cursor(portal.name.clone(), Arc::new(statement));
    out.parameter_format = Format::Individual(formats);
    out.parameters = values;
    out.result_column_format = portal.result_column_format.clone();
    out.state = portal.state.clone();
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn portal(types: Vec<Option<Type>>, format: Format, values: Vec<Option<Bytes>>) -> Portal<()> {
        let statement = StoredStatement::new(String::new(), (), types);
        let mut p = Portal::new_cursor(String::new(), Arc::new(statement));
        p.parameter_format = format;
        p.parameters = values;
        p
    }

    #[test]
    fn binary_uuid_and_jsonb_become_text() {
        let u = uuid::Uuid::parse_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        let p = portal(
            vec![Some(Type::UUID), Some(Type::INT4), Some(Type::JSONB)],
            Format::UnifiedBinary,
            vec![
                Some(Bytes::copy_from_slice(u.as_bytes())),
                Some(Bytes::from_static(&[0, 0, 0, 7])),
                Some(Bytes::from_static(b"\x01{\"a\": 1}")),
            ],
        );
        let q = text_parameters(&p, &[]).unwrap().expect("rewritten");
        assert_eq!(
            q.parameters[0].as_deref(),
            Some(&b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"[..])
        );
        assert_eq!(q.parameters[1].as_deref(), Some(&[0u8, 0, 0, 7][..]));
        assert_eq!(q.parameters[2].as_deref(), Some(&b"{\"a\": 1}"[..]));
        assert!(!q.parameter_format.is_binary(0) && q.parameter_format.is_binary(1));
        assert_eq!(q.statement.parameter_types[0], Some(Type::TEXT));
        assert_eq!(q.statement.parameter_types[1], Some(Type::INT4));
    }

    #[test]
    fn an_unspecified_parameter_takes_the_type_the_server_described() {
        // pgx leaves the types to the server and sends a binary uuid when it is told one.
        let u = uuid::Uuid::parse_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        let p = portal(
            vec![None, Some(Type::UNKNOWN), Some(Type::INT4)],
            Format::UnifiedBinary,
            vec![
                Some(Bytes::copy_from_slice(u.as_bytes())),
                Some(Bytes::from_static(b"\x01[1]")),
                Some(Bytes::from_static(&[0, 0, 0, 7])),
            ],
        );
        let server = [Some(Type::UUID), Some(Type::JSONB), Some(Type::UUID)];
        let q = text_parameters(&p, &server).unwrap().expect("rewritten");
        assert_eq!(
            q.parameters[0].as_deref(),
            Some(&b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"[..])
        );
        assert_eq!(q.parameters[1].as_deref(), Some(&b"[1]"[..]));
        // The client's own type wins over the server's.
        assert_eq!(q.parameters[2].as_deref(), Some(&[0u8, 0, 0, 7][..]));
        assert!(text_parameters(&p, &[]).unwrap().is_none());
    }

    #[test]
    fn a_short_binary_uuid_is_refused_and_others_are_left_alone() {
        let p = portal(
            vec![Some(Type::UUID)],
            Format::UnifiedBinary,
            vec![Some(Bytes::from_static(b"short"))],
        );
        assert!(text_parameters(&p, &[]).is_err());
        let p = portal(vec![Some(Type::INT4)], Format::UnifiedText, vec![None]);
        assert!(text_parameters(&p, &[]).unwrap().is_none());
        let p = portal(vec![Some(Type::JSON)], Format::UnifiedText, vec![None]);
        let q = text_parameters(&p, &[]).unwrap().expect("rewritten");
        assert_eq!(q.parameters[0], None);
    }
}

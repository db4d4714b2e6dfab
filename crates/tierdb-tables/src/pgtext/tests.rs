use super::*;

#[test]
fn uuid_input_forms_print_one_way() {
    let want = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    for s in [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
    ] {
        assert_eq!(uuid(s).unwrap(), want, "{s}");
    }
    for s in [
        "",
        "a0eebc99",
        "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ] {
        let e = uuid(s).unwrap_err().to_string();
        assert!(e.contains("invalid input syntax for type uuid"), "{s}: {e}");
    }
}

#[test]
fn json_is_kept_as_written_and_checked() {
    assert_eq!(json(r#"{"b": 1,  "a":2}"#).unwrap(), r#"{"b": 1,  "a":2}"#);
    for s in ["", "{", "{'a': 1}", "[1,]", "01"] {
        assert!(json(s).is_err(), "{s}");
    }
}

#[test]
fn jsonb_prints_as_postgresql_does() {
    // Each expected text is what PostgreSQL 15 prints for `SELECT '<input>'::jsonb`.
    let cases = [
        (r#"{"b":1,"a":2}"#, r#"{"a": 2, "b": 1}"#),
        (r#"{"bb":1,"a":2,"c":3}"#, r#"{"a": 2, "c": 3, "bb": 1}"#),
        (r#"{"a":1,"a":2}"#, r#"{"a": 2}"#),
        (r#"[1,2,[3,{}],[]]"#, r#"[1, 2, [3, {}], []]"#),
        (r#"  "x\u0041\n\/"  "#, r#""xA\n/""#),
        ("1.50", "1.50"),
        ("1e2", "100"),
        ("1.0E+2", "100"),
        ("1.5e-3", "0.0015"),
        ("-0", "0"),
        ("-12.5", "-12.5"),
        ("0.5", "0.5"),
        ("true", "true"),
        ("null", "null"),
        (
            r#"{"k": [true, false, null]}"#,
            r#"{"k": [true, false, null]}"#,
        ),
    ];
    for (input, want) in cases {
        let got = jsonb(input).unwrap();
        assert_eq!(got, want, "{input}");
        // Invariant 2.
        assert_eq!(jsonb(&got).unwrap(), got, "{input}");
    }
}

#[test]
fn jsonb_refuses_what_json_refuses_and_huge_exponents() {
    for s in ["{", "{\"a\" 1}", "nul", "1e99999999"] {
        let e = jsonb(s).unwrap_err().to_string();
        assert!(
            e.contains("invalid input syntax for type jsonb"),
            "{s}: {e}"
        );
    }
}

#[test]
fn conform_canonicalizes_and_names_the_bad_value() {
    use datafusion::arrow::array::StringArray;
    let a: ArrayRef = Arc::new(StringArray::from(vec![
        Some("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
        None,
    ]));
    let out = conform(a, ColumnType::Uuid).unwrap();
    let out = out.as_string::<i32>();
    assert_eq!(out.value(0), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    assert!(out.is_null(1));
    let bad: ArrayRef = Arc::new(StringArray::from(vec!["{}", "{x}"]));
    let e = conform(bad, ColumnType::Json).unwrap_err().to_string();
    assert!(e.contains("\"{x}\""), "{e}");
}

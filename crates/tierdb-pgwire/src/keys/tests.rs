//! `keys.rs`: what a row table's primary key, indexes and defaults look like in
//! `pg_catalog`, checked on catalog rows built here (no server, no store).

use super::*;
use datafusion::arrow::array::{Int32Array, StringArray};
use datafusion::prelude::SessionContext;
use tierdb_tables::catalog::{ColumnDef, ColumnType};
use tierdb_tables::rows::index::IndexDef;

fn table(id: u64, name: &str) -> TableDef {
    let column = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        nullable: true,
    };
    TableDef {
        id,
        name: name.into(),
        columns: vec![
            column("id", ColumnType::Int32),
            column("k", ColumnType::Int32),
            column("Note", ColumnType::Utf8),
        ],
        sort_key: vec![],
        partition_key: None,
        created_ms: 0,
        dropped: vec![],
        primary_key: vec!["id".into()],
        defaults: vec![("k".into(), "nextval('t_k_seq')".into())],
        indexes: vec![
            IndexDef {
                id: id + 1,
                name: "t_k".into(),
                columns: vec!["k".into(), "Note".into()],
                unique: false,
                constraint: false,
            },
            IndexDef {
                id: id + 2,
                name: "t_note".into(),
                columns: vec!["Note".into()],
                unique: true,
                constraint: true,
            },
        ],
        comments: Default::default(),
        missing: Vec::new(),
    }
}

#[test]
fn a_primary_key_is_an_index_and_a_constraint_with_postgresqls_definitions() {
    let keys = Keys::of(&[table(7, "t")]);
    assert_eq!(keys.indexes.len(), 3);
    let pkey = &keys.indexes[0];
    assert_eq!(
        (pkey.oid, pkey.name.as_str(), pkey.primary, pkey.unique),
        (1_000_000_007, "t_pkey", true, true)
    );
    assert_eq!(keys.constraints.len(), 2);
    assert_eq!(
        (
            keys.constraints[1].kind,
            keys.constraints[1].oid,
            keys.constraints[1].index_oid
        ),
        ("u", 1_400_000_009, 1_000_000_009)
    );
    assert_eq!(keys.constraints[0].index_oid, pkey.oid);
    assert_eq!(keys.constraints[0].oid, 1_400_000_007);
    assert_eq!(keys.defaults.len(), 1);
    assert_eq!(keys.defaults[0].column, 2);
    assert_eq!(keys.defaults[0].sql, "nextval('t_k_seq'::regclass)");
    assert_eq!(as_postgresql_writes("7"), "7");
    assert_eq!(as_postgresql_writes("nextval('a''b')"), "nextval('a''b')");
    assert_eq!(keys.defaults[0].oid, 1_800_000_000 + 7 * 1_600 + 2);
    let defs = keys.definitions();
    let def = |oid: i32, n: i32| {
        defs.iter()
            .find(|d| d.0 == oid && d.1 == n)
            .map(|d| d.2.clone())
    };
    assert_eq!(
        def(1_000_000_007, 0).as_deref(),
        Some("CREATE UNIQUE INDEX t_pkey ON public.t USING btree (id)")
    );
    assert_eq!(
        def(1_000_000_008, 0).as_deref(),
        Some("CREATE INDEX t_k ON public.t USING btree (k, \"Note\")")
    );
    assert_eq!(def(1_000_000_008, 2).as_deref(), Some("\"Note\""));
    assert_eq!(def(1_000_000_008, 3), None);
    assert_eq!(
        def(1_000_000_009, 0).as_deref(),
        Some("CREATE UNIQUE INDEX t_note ON public.t USING btree (\"Note\")")
    );
    assert_eq!(def(1_400_000_007, 0).as_deref(), Some("PRIMARY KEY (id)"));
    assert_eq!(def(1_400_000_009, 0).as_deref(), Some("UNIQUE (\"Note\")"));
    assert_eq!(keys.indexed_tables(), vec!["t".to_string()]);
}

#[test]
fn a_table_without_keys_has_no_rows_and_oids_that_do_not_fit_are_left_out() {
    let mut plain = table(3, "plain");
    plain.primary_key.clear();
    plain.indexes.clear();
    plain.defaults.clear();
    assert_eq!(Keys::of(&[plain]), Keys::default());
    let huge = table(u64::MAX - 5, "huge");
    let keys = Keys::of(&[huge]);
    assert!(keys.indexes.is_empty() && keys.constraints.is_empty() && keys.defaults.is_empty());
}

#[test]
fn identifiers_are_quoted_as_quote_ident_quotes_them() {
    assert_eq!(quote_ident("id"), "id");
    assert_eq!(quote_ident("a_1$"), "a_1$");
    assert_eq!(quote_ident("Note"), "\"Note\"");
    assert_eq!(quote_ident("order"), "\"order\"");
    assert_eq!(quote_ident("1x"), "\"1x\"");
    assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
}

/// `pg_class` listing `t` (oid 16400) in `public` (oid 2200), a relation of the same name
/// in schema `elsewhere` (99), which public's keys must not attach to, and `other`; and
/// `pg_namespace`.
fn class_and_namespace() -> (Arc<dyn TableProvider>, Arc<dyn TableProvider>) {
    let class_schema = Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("relname", DataType::Utf8, false),
        Field::new("relnamespace", DataType::Int32, false),
        Field::new("relkind", DataType::Utf8, false),
        Field::new("relhasindex", DataType::Boolean, false),
        Field::new("relam", DataType::Int32, false),
    ]));
    let class_rows = RecordBatch::try_new(
        class_schema.clone(),
        vec![
            Arc::new(Int32Array::from(vec![16400, 16401, 16402])),
            Arc::new(StringArray::from(vec!["t", "t", "other"])),
            Arc::new(Int32Array::from(vec![2200, 99, 2200])),
            Arc::new(StringArray::from(vec!["r", "r", "r"])),
            Arc::new(datafusion::arrow::array::BooleanArray::from(vec![false; 3])),
            Arc::new(Int32Array::from(vec![0, 0, 0])),
        ],
    )
    .expect("batch");
    let class: Arc<dyn TableProvider> =
        Arc::new(MemTable::try_new(class_schema, vec![vec![class_rows]]).expect("table"));
    let ns_schema = Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("nspname", DataType::Utf8, false),
    ]));
    let ns_rows = RecordBatch::try_new(
        ns_schema.clone(),
        vec![
            Arc::new(Int32Array::from(vec![2200, 99])),
            Arc::new(StringArray::from(vec!["public", "elsewhere"])),
        ],
    )
    .expect("batch");
    let namespace: Arc<dyn TableProvider> =
        Arc::new(MemTable::try_new(ns_schema, vec![vec![ns_rows]]).expect("table"));
    (class, namespace)
}

#[tokio::test]
async fn relations_are_the_tables_of_every_schema_by_catalog_name() {
    let (class, namespace) = class_and_namespace();
    let relations = stored_relations(class, namespace).await.expect("read");
    assert_eq!(relations.len(), 3);
    assert_eq!(relations.get("t"), Some(&(16400, 2200)));
    assert_eq!(relations.get("elsewhere.t"), Some(&(16401, 99)));
    assert_eq!(relations.get("other"), Some(&(16402, 2200)));
}

/// A context with the catalog tables built from `keys` over [`class_and_namespace`].
async fn context(keys: &Keys) -> SessionContext {
    let (class, namespace) = class_and_namespace();
    let relations = stored_relations(class.clone(), namespace)
        .await
        .expect("read");
    let index_schema = Arc::new(Schema::new(vec![
        Field::new("indexrelid", DataType::Int32, false),
        Field::new("indrelid", DataType::Int32, false),
        Field::new("indnatts", DataType::Int16, false),
        Field::new("indisunique", DataType::Boolean, false),
        Field::new("indisprimary", DataType::Boolean, false),
        Field::new("indkey", DataType::Utf8, false),
        Field::new("indpred", DataType::Utf8, true),
    ]));
    let constraint_schema = Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("conname", DataType::Utf8, false),
        Field::new("connamespace", DataType::Int32, false),
        Field::new("contype", DataType::Utf8, false),
        Field::new("conrelid", DataType::Int32, false),
        Field::new("conindid", DataType::Int32, false),
        Field::new("conkey", DataType::Utf8, true),
    ]));
    let attrdef_schema = Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("adrelid", DataType::Int32, false),
        Field::new("adnum", DataType::Int16, false),
        Field::new("adbin", DataType::Utf8, false),
    ]));
    let ctx = SessionContext::new();
    let register = |name: &str, t: Arc<dyn TableProvider>| {
        ctx.register_table(name, t).expect("registered");
    };
    register(
        "pg_index",
        pg_index(&index_schema, keys, &relations).expect("pg_index"),
    );
    register(
        "pg_constraint",
        pg_constraint(&constraint_schema, keys, &relations).expect("pg_constraint"),
    );
    register(
        "pg_attrdef",
        pg_attrdef(&attrdef_schema, keys, &relations).expect("pg_attrdef"),
    );
    register(
        "pg_class",
        with_indexes(class, keys, &relations).expect("pg_class"),
    );
    ctx
}

async fn text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.expect(sql).collect().await.expect(sql);
    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .expect("printable")
        .to_string()
}

#[tokio::test]
async fn the_catalog_tables_join_their_table_in_public_by_name() {
    let ctx = context(&Keys::of(&[table(7, "t")])).await;
    let index = text(
        &ctx,
        "SELECT indexrelid, indrelid, indnatts, indisunique, indisprimary, indkey, indpred \
         FROM pg_index ORDER BY indexrelid",
    )
    .await;
    assert!(
        index.contains(
            "| 1000000007 | 16400    | 1        | true        | true         | 1      |         |"
        ),
        "{index}"
    );
    assert!(
        index
            .contains("| 1000000008 | 16400    | 2        | false       | false        | 2 3    |"),
        "{index}"
    );
    assert_eq!(index.matches("16400").count(), 3, "{index}");
    let constraint = text(
        &ctx,
        "SELECT oid, conname, connamespace, contype, conrelid, conindid, conkey FROM pg_constraint",
    )
    .await;
    assert!(
        constraint.contains(
            "| 1400000007 | t_pkey  | 2200         | p       | 16400    | 1000000007 | [1]    |"
        ),
        "{constraint}"
    );
    let attrdef = text(&ctx, "SELECT adrelid, adnum, adbin FROM pg_attrdef").await;
    assert!(
        attrdef.contains("| 16400   | 2     | nextval('t_k_seq'::regclass) |"),
        "{attrdef}"
    );
    let class = text(
        &ctx,
        "SELECT oid, relname, relnamespace, relkind, relhasindex, relam FROM pg_class ORDER BY oid",
    )
    .await;
    assert!(
        class.contains("| 16400      | t       | 2200         | r       | true        | 0     |"),
        "{class}"
    );
    assert!(
        class.contains("| 16402      | other   | 2200         | r       | false       | 0     |"),
        "{class}"
    );
    assert!(
        class.contains("| 1000000008 | t_k     | 2200         | i       | false       | 403   |"),
        "{class}"
    );
    assert_eq!(class.matches("| i ").count(), 3, "{class}");
}

#[tokio::test]
async fn no_keys_leave_empty_tables_and_pg_class_as_it_was() {
    let ctx = context(&Keys::default()).await;
    assert!(
        text(&ctx, "SELECT count(*) AS n FROM pg_index")
            .await
            .contains("| 0 |")
    );
    assert!(
        text(&ctx, "SELECT count(*) AS n FROM pg_constraint")
            .await
            .contains("| 0 |")
    );
    assert!(
        text(&ctx, "SELECT count(*) AS n FROM pg_class")
            .await
            .contains("| 3 |")
    );
}

#[tokio::test]
async fn a_unique_constraint_depends_on_its_tables_primary_key() {
    let keys = Keys::of(&[table(7, "t")]);
    let depend_schema = Arc::new(Schema::new(
        [
            "classid",
            "objid",
            "objsubid",
            "refclassid",
            "refobjid",
            "refobjsubid",
        ]
        .iter()
        .map(|c| Field::new(*c, DataType::Int32, false))
        .chain([Field::new("deptype", DataType::Utf8, false)])
        .collect::<Vec<_>>(),
    ));
    let depend: Arc<dyn TableProvider> =
        Arc::new(MemTable::try_new(depend_schema, vec![vec![]]).expect("table"));
    let ctx = SessionContext::new();
    ctx.register_table(
        "pg_depend",
        with_dependencies(depend, &keys, vec![]).expect("pg_depend"),
    )
    .expect("registered");
    let rows = text(
        &ctx,
        "SELECT classid, objid, refclassid, refobjid, deptype FROM pg_depend",
    )
    .await;
    assert!(
        rows.contains("| 2606    | 1400000009 | 2606       | 1400000007 | n       |"),
        "{rows}"
    );
    assert_eq!(rows.matches("2606").count(), 2, "{rows}");
}

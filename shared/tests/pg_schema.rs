//! The PostgreSQL schema `db init` builds — the migrations for the tables, then
//! `pg/functions/` for every function, one live definition each — is the schema the
//! released migrations built, which defined and redefined the functions inside them
//! (`tests/fixtures/old_state/pg/v1.sql` … `v6.sql`, the files as they shipped).
//!
//! Read from the catalog: every table column, index, constraint, trigger and function (as
//! `pg_get_functiondef` prints it), and every function's grants. The same for a new
//! database, for one the released chain made, and for one stopped at each released version
//! and brought up to date by this build's `db init`.

#![cfg(feature = "postgres")]

use hr_shared::store::postgres;
use hr_shared::testing::pg::Cluster;
use std::path::Path;

/// The released migrations, as they shipped.
fn released(version: usize) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/old_state/pg/v{version}.sql"));
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// A database at released version `version`, made as the released `db init` made it: the
/// schema, its version table, and the released migrations up to it (each in full).
fn at_released(cluster: &Cluster, version: usize) -> String {
    let db = cluster.database();
    let mut sql = "CREATE SCHEMA hr;
         CREATE TABLE hr.schema_version (version bigint NOT NULL);"
        .to_owned();
    for v in 1..=version {
        sql.push_str(&released(v));
        sql.push_str(&format!(
            ";\nDELETE FROM hr.schema_version; INSERT INTO hr.schema_version VALUES ({v});"
        ));
    }
    cluster.admin_sql(&db, &sql);
    db
}

/// What the catalog says of schema `hr`, one line per thing; with the functions' grants
/// when `grants`.
fn catalog(cluster: &Cluster, db: &str, grants: bool) -> Vec<String> {
    let mut c = ::postgres::Client::connect(&cluster.admin_url(db), ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect to {db}: {e}"));
    let mut out = Vec::new();
    let mut each = |label: &str, sql: &str| {
        for row in c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")) {
            let cols: Vec<String> = (0..row.len())
                .map(|i| row.get::<_, Option<String>>(i).unwrap_or_default())
                .collect();
            out.push(format!("{label}: {}", cols.join(" | ")));
        }
    };
    each(
        "column",
        "SELECT table_name::text, column_name::text, data_type::text, column_default::text,
                is_nullable::text, ordinal_position::text
         FROM information_schema.columns WHERE table_schema = 'hr'
         ORDER BY table_name, ordinal_position",
    );
    each(
        "index",
        "SELECT indexname::text, indexdef FROM pg_indexes WHERE schemaname = 'hr' ORDER BY 1",
    );
    each(
        "constraint",
        "SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
         FROM pg_constraint WHERE connamespace = 'hr'::regnamespace ORDER BY 1, 2",
    );
    each(
        "trigger",
        "SELECT tgrelid::regclass::text, tgname::text, pg_get_triggerdef(oid)
         FROM pg_trigger WHERE NOT tgisinternal
           AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'hr'::regnamespace)
         ORDER BY 1, 2",
    );
    each(
        "function",
        "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
         FROM pg_proc p WHERE p.pronamespace = 'hr'::regnamespace ORDER BY 1",
    );
    if grants {
        each(
            "grant",
            "SELECT p.oid::regprocedure::text, coalesce(p.proacl::text, '')
             FROM pg_proc p WHERE p.pronamespace = 'hr'::regnamespace ORDER BY 1",
        );
    }
    out
}

/// The first difference between two catalogs, said plainly.
fn same(what: &str, want: &[String], got: &[String]) {
    if want == got {
        return;
    }
    let only_want: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    let only_got: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    panic!(
        "{what}: the catalogs differ\n--- only in the first ({}):\n{}\n--- only in the second ({}):\n{}",
        only_want.len(),
        only_want
            .iter()
            .take(3)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        only_got.len(),
        only_got
            .iter()
            .take(3)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn db_init_builds_the_schema_the_released_migrations_built_from_any_version() {
    let cluster = Cluster::start("schema", 20);
    let fresh = cluster.database();
    let report = postgres::init(&cluster.admin_url(&fresh)).expect("db init");
    assert_eq!(
        (report.from_version, report.to_version),
        (0, postgres::SCHEMA_VERSION)
    );
    let want = catalog(&cluster, &fresh, true);
    assert!(
        want.iter().any(|l| l.starts_with("function: hr.decide(")),
        "the catalog lists the functions"
    );

    // The released chain in full, before this build touches it: the same schema.
    let latest = postgres::SCHEMA_VERSION as usize;
    let chain = at_released(&cluster, latest);
    same(
        "released v1..v7 against db init",
        &catalog(&cluster, &fresh, false),
        &catalog(&cluster, &chain, false),
    );

    // Stopped at each released version, then brought up to date by this build.
    for version in 1..=latest {
        let db = at_released(&cluster, version);
        let report = postgres::init(&cluster.admin_url(&db)).expect("db init upgrades");
        assert_eq!(
            (report.from_version, report.to_version),
            (version as i64, postgres::SCHEMA_VERSION)
        );
        same(
            &format!("released v{version} upgraded by db init"),
            &want,
            &catalog(&cluster, &db, true),
        );
    }

    // db init twice changes nothing.
    postgres::init(&cluster.admin_url(&fresh)).expect("db init again");
    same("db init run twice", &want, &catalog(&cluster, &fresh, true));
}

//! Tiering into real catalog servers: rustberg's Iceberg REST catalog (commits as
//! `CommitTableRequest`s with requirements) and Postgres behind the SQL catalog.

use std::sync::Arc;
use std::thread::ThreadId;

use hotgate_testkit::{PostgresServer, RestCatalogServer};
use hotgate_tiering::commit::{CommitRequest, commit};
use hotgate_tiering::{Catalog, CatalogConfig, TieredOffsets, Tierer};
use parking_lot::Mutex;

use crate::common::{T0, cold_ids, events, events_spec, fixture, fixture_in};

fn rest_config(server: &RestCatalogServer) -> CatalogConfig {
    serde_json::from_value(server.catalog_json()).unwrap()
}

fn postgres_config(server: &PostgresServer, dir: &std::path::Path) -> CatalogConfig {
    serde_json::from_value(serde_json::json!({
        "type": "sql",
        "uri": server.uri(),
        "warehouse": format!("file://{}", std::path::absolute(dir).unwrap().join("warehouse").display()),
    }))
    .unwrap()
}

#[tokio::test]
async fn a_rest_catalog_table_is_created_like_the_sql_one_and_tiers_exactly_once() {
    let rest = RestCatalogServer::start();
    let f = fixture_in(events_spec(2), |_| rest_config(&rest)).await;
    f.cycles(3).await;
    let table = f.table().await;
    assert_eq!(cold_ids(&table).await, (0..30).collect::<Vec<_>>());
    assert_eq!(
        TieredOffsets::current(table.metadata()).unwrap().to_map(),
        f.hot.end_offsets()
    );

    // The same field ids, identifier fields, partition spec and properties as the
    // embedded SQL catalog makes.
    let sql = fixture(2).await;
    let sql_table = sql.table().await;
    let (m, s) = (table.metadata(), sql_table.metadata());
    assert_eq!(
        m.current_schema().as_struct(),
        s.current_schema().as_struct()
    );
    assert_eq!(
        m.current_schema()
            .identifier_field_ids()
            .collect::<Vec<_>>(),
        s.current_schema()
            .identifier_field_ids()
            .collect::<Vec<_>>()
    );
    assert_eq!(
        m.default_partition_spec().fields(),
        s.default_partition_spec().fields()
    );
    for key in [
        "hotgate.table",
        "write.target-file-size-bytes",
        "write.metadata.metrics.column.email",
    ] {
        assert_eq!(m.properties().get(key), s.properties().get(key), "{key}");
    }

    // A restart knows nothing but what the catalog holds, and goes on from there.
    let restarted = Tierer::new(Catalog::open(rest_config(&rest)).await.unwrap());
    restarted.ensure_table(&f.hot).await.unwrap();
    f.hot.append(&events(30..45, T0)).await.unwrap();
    let report = restarted.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(report.records, 15);
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..45).collect::<Vec<_>>()
    );

    let status = f.tierer.status(&f.def()).await;
    assert_eq!(status.catalog, "rest");
    assert!(status.ready);
    assert_eq!(status.last_error, None);
    assert_eq!(status.commits.commits, 3);
    assert_eq!(status.commits.last_outcome, Some("committed"));
    assert_eq!(status.records, 45);
}

/// Which test thread's cycles get a foreign commit at `tier-before-commit`, and how
/// many more. Fail points are global to the test binary; the thread keeps other
/// tests' cycles out (a `#[tokio::test]` runs its future on its own thread).
type ForeignWriter = (ThreadId, Arc<dyn Fn() + Send + Sync>, usize);
static FOREIGN: Mutex<Option<ForeignWriter>> = Mutex::new(None);

#[tokio::test]
async fn a_commit_of_another_writer_between_load_and_commit_is_retried_exactly_once() {
    let rest = RestCatalogServer::start();
    let f = fixture_in(events_spec(2), |_| rest_config(&rest)).await;
    f.cycles(1).await;
    let name = f.def().name().clone();

    // The other writer: its own catalog client, committing a snapshot without
    // hotgate's offsets (as a maintenance job of the catalog's owner would) whenever
    // hotgate's cycle has loaded the table and written its files.
    let other = {
        let config = rest_config(&rest);
        let name = name.clone();
        Arc::new(move || {
            let (config, name) = (config.clone(), name.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(async {
                    let catalog = Catalog::open(config).await.unwrap();
                    let table = catalog.load(&name).await.unwrap();
                    commit(&catalog, &name, &table, CommitRequest::append(Vec::new()))
                        .await
                        .unwrap();
                })
            })
            .join()
            .unwrap();
        }) as Arc<dyn Fn() + Send + Sync>
    };
    *FOREIGN.lock() = Some((std::thread::current().id(), other, 2));
    fail::cfg_callback("tier-before-commit", || {
        let run = {
            let mut foreign = FOREIGN.lock();
            match foreign.as_mut() {
                Some((thread, writer, left))
                    if *thread == std::thread::current().id() && *left > 0 =>
                {
                    *left -= 1;
                    Some(Arc::clone(writer))
                }
                _ => None,
            }
        };
        if let Some(writer) = run {
            writer();
        }
    })
    .unwrap();

    f.hot.append(&events(10..25, T0)).await.unwrap();
    let report = f.tierer.cycle(&f.hot, T0, true).await;
    *FOREIGN.lock() = None;
    let report = report.unwrap();
    assert_eq!(report.records, 15);

    // Two conflicts, each retried from the other writer's snapshot; every row once.
    let status = f.tierer.status(&f.def()).await;
    assert_eq!(status.commits.conflicts, 2, "{status:?}");
    assert_eq!(status.commits.last_retries, 2);
    assert_eq!(status.commits.last_outcome, Some("committed"));
    let table = f.table().await;
    assert_eq!(cold_ids(&table).await, (0..25).collect::<Vec<_>>());
    // hotgate's snapshot follows the other writer's two.
    let current = table.metadata().current_snapshot().unwrap();
    let parent = table
        .metadata()
        .snapshot_by_id(current.parent_snapshot_id().unwrap())
        .unwrap();
    assert!(
        !parent
            .summary()
            .additional_properties
            .contains_key(hotgate_tiering::offsets::OFFSETS_PROP)
    );
    // The conflicted attempts' data files were deleted: only live files remain.
    let files = crate::common::live_files(&table).await;
    let on_disk = hotgate_testkit::count_files(&rest.warehouse_dir(), ".parquet");
    assert_eq!(on_disk, files.len());

    // A later cycle runs from the new offsets.
    f.hot.append(&events(25..30, T0)).await.unwrap();
    assert_eq!(f.tierer.cycle(&f.hot, T0, true).await.unwrap().records, 5);
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..30).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_rest_table_of_another_engine_with_another_schema_is_never_overwritten() {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    let rest = RestCatalogServer::start();
    let catalog = Catalog::open(rest_config(&rest)).await.unwrap();
    let f = fixture(2).await;
    let name = f.def().name().clone();
    // Another engine's table under the hot table's name, with another schema.
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "note", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    let creation = iceberg::TableCreation::builder()
        .name(name.name().to_owned())
        .schema(schema)
        .build();
    catalog.create(&name, creation).await.unwrap();
    let before = catalog.load(&name).await.unwrap();

    let tierer = Tierer::new(catalog.clone());
    let err = tierer.ensure_table(&f.hot).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("was not created by hotgate"), "{message}");
    assert!(message.contains("note"), "{message}");
    assert!(message.contains("nothing is overwritten"), "{message}");
    let status = tierer.status(&f.def()).await;
    assert!(!status.ready);
    assert!(status.last_error.unwrap().contains("differs"));
    let err = tierer.cycle(&f.hot, T0, true).await.unwrap_err();
    assert!(err.to_string().contains("differs"), "{err}");
    // Nothing changed in the catalog.
    let after = catalog.load(&name).await.unwrap();
    assert_eq!(after.metadata_location(), before.metadata_location());
    assert!(after.metadata().current_snapshot().is_none());
}

#[tokio::test]
async fn an_unreachable_rest_catalog_keeps_tiering_waiting_and_says_why() {
    let addr = hotgate_testkit::free_addr();
    let config: CatalogConfig = serde_json::from_value(serde_json::json!({
        "type": "rest",
        "uri": format!("http://{addr}"),
        "token": "rb_secret-token-never-shown-0123456789",
    }))
    .unwrap();
    // Opening needs no catalog: the hot tier serves regardless.
    let catalog = Catalog::open(config).await.unwrap();
    let f = fixture(2).await;
    let tierer = Tierer::new(catalog);
    assert!(tierer.ensure_table(&f.hot).await.is_err());
    f.hot.append(&events(0..10, T0)).await.unwrap();
    let err = tierer.cycle(&f.hot, T0, true).await.unwrap_err();
    assert_eq!(err.kind(), hotgate_tiering::ErrorKind::Unavailable, "{err}");
    let status = tierer.status(&f.def()).await;
    assert_eq!(status.catalog, "rest");
    assert!(!status.ready);
    let error = status.last_error.unwrap();
    assert!(!error.contains("secret-token"), "{error}");
    // Nothing tiered: the watermarks stay empty, so hot retention keeps every row.
    assert!(tierer.watermarks(f.def().name()).is_empty());
}

#[tokio::test]
async fn a_wrong_rest_token_is_an_error_naming_the_setting_without_the_secret() {
    let rest = RestCatalogServer::start();
    let mut config = rest.catalog_json();
    config["token"] = "rb_wrong-key-that-must-not-show-0123456789".into();
    let catalog = Catalog::open(serde_json::from_value(config).unwrap())
        .await
        .unwrap();
    let f = fixture(2).await;
    let err = Tierer::new(catalog).ensure_table(&f.hot).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("[catalog] token"), "{message}");
    assert!(!message.contains("must-not-show"), "{message}");
}

#[tokio::test]
async fn the_postgres_sql_catalog_tiers_exactly_once_across_a_restart() {
    let pg = PostgresServer::start();
    let f = fixture_in(events_spec(3), |dir| postgres_config(&pg, dir)).await;
    assert_eq!(f.tierer.catalog().kind(), "postgres");
    f.hot.append(&events(0..40, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    f.hot.append(&events(40..70, T0)).await.unwrap();

    let config = f.tierer.catalog().config().clone();
    let restarted = Tierer::new(Catalog::open(config).await.unwrap());
    restarted.ensure_table(&f.hot).await.unwrap();
    assert_eq!(
        restarted.watermarks(f.def().name()),
        f.tierer.watermarks(f.def().name())
    );
    let report = restarted.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(report.records, 30);
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..70).collect::<Vec<_>>()
    );

    // A stale base loses the pointer swap: nothing is committed twice.
    let stale = f.table().await;
    f.hot.append(&events(70..75, T0)).await.unwrap();
    restarted.cycle(&f.hot, T0, true).await.unwrap();
    let name = f.def().name().clone();
    let err = commit(
        f.tierer.catalog(),
        &name,
        &stale,
        CommitRequest::append(Vec::new()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), hotgate_tiering::ErrorKind::Conflict, "{err}");
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..75).collect::<Vec<_>>()
    );
}

/// A **test double** of an OAuth2 token endpoint (the identity provider is a boundary
/// hotgate does not own, and none installs here): the client-credentials grant for
/// client `hotgate` with secret `right-secret`, handing out rustberg's API key as the
/// access token, valid `expires_in` seconds. Counts the grants it gave.
async fn token_endpoint_double(
    access_token: String,
    expires_in: u64,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::http::StatusCode;
    let granted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&granted);
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move |body: String| {
            let (count, access_token) = (Arc::clone(&count), access_token.clone());
            async move {
                let form: std::collections::HashMap<String, String> =
                    url::form_urlencoded::parse(body.as_bytes())
                        .into_owned()
                        .collect();
                let good = form.get("grant_type").map(String::as_str) == Some("client_credentials")
                    && form.get("client_id").map(String::as_str) == Some("hotgate")
                    && form.get("client_secret").map(String::as_str) == Some("right-secret");
                if !good {
                    return (
                        StatusCode::UNAUTHORIZED,
                        axum::Json(serde_json::json!({"error": "invalid_client", "error_description": "bad client credentials"})),
                    );
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                (
                    StatusCode::OK,
                    axum::Json(serde_json::json!({"access_token": access_token, "token_type": "bearer", "expires_in": expires_in})),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/token"), granted)
}

fn oauth_config(rest: &RestCatalogServer, endpoint: &str, secret: &str) -> CatalogConfig {
    let mut config = rest.catalog_json();
    let object = config.as_object_mut().unwrap();
    object.remove("token");
    object.insert("credential".into(), format!("hotgate:{secret}").into());
    object.insert("oauth2_server_uri".into(), endpoint.into());
    serde_json::from_value(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_are_exchanged_and_the_token_renewed_before_it_expires() {
    let rest = RestCatalogServer::start();
    // 11 s of lifetime: renewed 10 s early, so after 1 s.
    let (endpoint, granted) = token_endpoint_double(rest.token.clone(), 11).await;
    let f = fixture_in(events_spec(2), |_| {
        oauth_config(&rest, &endpoint, "right-secret")
    })
    .await;
    assert_eq!(granted.load(std::sync::atomic::Ordering::SeqCst), 1);
    f.hot.append(&events(0..10, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(
        granted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a token still good was fetched again"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    f.hot.append(&events(10..20, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(
        granted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the token was not renewed"
    );
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..20).collect::<Vec<_>>()
    );

    // A wrong secret: an error naming the setting and the client, never the secret.
    let catalog = Catalog::open(oauth_config(&rest, &endpoint, "wrong-secret-xyz"))
        .await
        .unwrap();
    let err = Tierer::new(catalog).ensure_table(&f.hot).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("[catalog] credential"), "{message}");
    assert!(message.contains("invalid_client"), "{message}");
    assert!(message.contains("hotgate"), "{message}");
    assert!(!message.contains("wrong-secret-xyz"), "{message}");
    assert_eq!(err.kind(), hotgate_tiering::ErrorKind::InvalidArgument);
}

#[tokio::test]
async fn a_token_file_is_read_again_when_it_changes() {
    let rest = RestCatalogServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = std::path::absolute(dir.path())
        .unwrap()
        .join("catalog-token");
    std::fs::write(&file, format!("{}\n", rest.token)).unwrap();
    let mut config = rest.catalog_json();
    let object = config.as_object_mut().unwrap();
    object.remove("token");
    object.insert("token_file".into(), file.display().to_string().into());
    let config: CatalogConfig = serde_json::from_value(config).unwrap();
    let f = fixture_in(events_spec(2), |_| config).await;
    f.hot.append(&events(0..10, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();

    // A rotated token that the catalog refuses: the setting is named.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&file, "rb_revoked-token-0123456789abcdefghijkl").unwrap();
    f.hot.append(&events(10..20, T0)).await.unwrap();
    let err = f.tierer.cycle(&f.hot, T0, true).await.unwrap_err();
    assert!(err.to_string().contains("[catalog] token_file"), "{err}");
    assert!(!err.to_string().contains("revoked-token"), "{err}");

    // The right one again: tiering goes on, with nothing lost or doubled.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&file, &rest.token).unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..20).collect::<Vec<_>>()
    );
}

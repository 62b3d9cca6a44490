//! Wiring: open the store and the catalog, build the authenticator, bind Flight and HTTP, and shut down
//! cleanly (stop accepting, let in-flight calls and appends finish, sync, return).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use hotgate_policy::{EmbeddedIssuer, JwtValidator};
use hotgate_store::Store;
use hotgate_tiering::{Catalog, Tierer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditLog, CallAudit, CheckpointKey};
use crate::auth::Authenticator;
use crate::background::Background;
use crate::config::Config;
use crate::error::{GatewayError, Result};
use crate::flight::HotgateFlight;
use crate::governance::Governance;
use crate::metrics::GatewayMetrics;
use crate::state::GatewayState;

/// How long shutdown waits for in-flight calls before closing the store anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest Flight message accepted (a DoPut batch).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The validator the configuration asks for: an external JWKS (file or URL), or the
/// embedded issuer.
pub async fn validator(config: &Config) -> Result<JwtValidator> {
    let auth = &config.auth;
    match (&auth.jwks_file, &auth.jwks_url) {
        (Some(_), Some(_)) => Err(GatewayError::InvalidArgument(
            "auth: set jwks_file or jwks_url, not both".into(),
        )),
        (Some(path), None) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                GatewayError::Internal(format!("cannot read JWKS {}: {e}", path.display()))
            })?;
            Ok(JwtValidator::from_jwks(
                &text,
                &auth.issuer,
                &auth.audience,
            )?)
        }
        (None, Some(url)) => fetch_jwks(config, url).await,
        (None, None) => Ok(embedded_issuer(config)?.validator()?),
    }
}

/// Fetches an external issuer's JWKS.
async fn fetch_jwks(config: &Config, url: &str) -> Result<JwtValidator> {
    let failed =
        |e: String| GatewayError::Unavailable(format!("cannot fetch the JWKS from {url}: {e}"));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("HTTP {}", response.status())));
    }
    let text = response.text().await.map_err(|e| failed(e.to_string()))?;
    Ok(JwtValidator::from_jwks(
        &text,
        &config.auth.issuer,
        &config.auth.audience,
    )?)
}

/// Fetches the JWKS again every `jwks_refresh`, keeping the old keys when a fetch fails.
async fn refresh_jwks(
    config: Config,
    url: String,
    authn: Arc<Authenticator>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.auth.jwks_refresh) => {}
            () = cancel.cancelled() => return,
        }
        match fetch_jwks(&config, &url).await {
            Ok(v) => authn.replace(v),
            Err(e) => tracing::warn!("keeping the previous keys: {e}"),
        }
    }
}

/// The embedded HS256 issuer, creating its key in the data dir on first use.
pub fn embedded_issuer(config: &Config) -> Result<EmbeddedIssuer> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        GatewayError::Internal(format!("cannot create {}: {e}", config.data_dir.display()))
    })?;
    let key = crate::secret_file::load_or_create(
        &config.issuer_key_path(),
        EmbeddedIssuer::generate_hex_key,
    )
    .map_err(GatewayError::Internal)?;
    Ok(EmbeddedIssuer::from_hex_key(
        &key,
        &config.auth.issuer,
        &config.auth.audience,
    )?)
}

async fn bind(what: &str, addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| GatewayError::Unavailable(format!("cannot listen for {what} on {addr}: {e}")))
}

/// Runs hotgate until `shutdown` completes, then drains and closes the store.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let store = Arc::new(Store::open(&config.data_dir, config.store.options())?);
    let catalog = Catalog::open(config.catalog_config()).await?;
    let tierer = Arc::new(Tierer::new(catalog));
    for hot in store.tables() {
        let def = hot.def();
        if def.tiering().enabled {
            // Not fatal: the scheduler retries tables whose Iceberg table is not open.
            if let Err(e) = tierer.ensure_table(&hot).await {
                tracing::warn!(table = %def.name(), "cannot open the Iceberg table: {e}");
            }
        }
    }
    let authn = Arc::new(Authenticator::new(validator(&config).await?));
    let governance = Arc::new(Governance::open(&config).await?);
    let audit_key =
        CheckpointKey::load_or_create(&config.audit_key_path()).map_err(GatewayError::Internal)?;
    let audit = Arc::new(AuditLog::open(&store, &config.audit, audit_key).await?);
    tracing::info!(
        source = %governance.status().source,
        catalog = %config.grants.catalog,
        policies = governance.policies().policies.len(),
        "grant mirror loaded"
    );
    // Before anything reads or tiers: pending deletion requests hide their rows from
    // the first read on.
    let defs: Vec<_> = store.tables().iter().map(|t| t.def()).collect();
    let deletions = Arc::new(crate::deletion::Deletions::open(
        &config.data_dir,
        &defs,
        config.deletion.time_bound,
    )?);
    tierer.set_suppression(Arc::clone(&deletions) as Arc<dyn hotgate_tiering::RowSuppression>);
    let sources = Arc::new(crate::sources::Sources::open(
        &config.data_dir,
        &config.sources,
    )?);
    tierer.set_source_progress(Arc::clone(&sources) as Arc<dyn hotgate_tiering::SourceProgress>);
    let flight_listener = bind("Flight", config.flight_addr).await?;
    let http_listener = bind("HTTP", config.http_addr).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let background = Background::new();
    if let Some(url) = &config.auth.jwks_url {
        let (config, url, authn) = (config.clone(), url.clone(), Arc::clone(&authn));
        background.spawn("jwks refresh", |cancel| {
            refresh_jwks(config, url, authn, cancel)
        });
    }
    let refresh = config.grants.refresh;
    background.spawn("grants refresh", |cancel| {
        Arc::clone(&governance).run_refresh(refresh, cancel)
    });
    let checkpoints = config.audit.checkpoint_interval;
    background.spawn("audit flush and checkpoints", |cancel| {
        Arc::clone(&audit).run_background(checkpoints, cancel)
    });
    let state = Arc::new(GatewayState {
        store: Arc::clone(&store),
        tierer: Arc::clone(&tierer),
        maintenance: config.tiering.maintenance_options(),
        schema_changes: tokio::sync::Mutex::new(()),
        boundary: Default::default(),
        deletions,
        authn: Arc::clone(&authn),
        governance: Arc::clone(&governance),
        metrics: Arc::new(GatewayMetrics::new()),
        audit: Arc::clone(&audit),
        sql: config.sql.clone(),
        sources: Arc::clone(&sources),
        shutdown: stop_rx.clone(),
    });
    sources.start(&state, &background).await?;

    let steps = crate::deletion::StepContext {
        deletions: Arc::clone(&state.deletions),
        store: Arc::clone(&store),
        tierer: Arc::clone(&tierer),
        audit: Arc::clone(&audit),
        hash_key: governance.hash_key().clone(),
        sources: Arc::clone(&sources) as Arc<dyn crate::deletion::SourcePositions>,
    };
    background.spawn("deletion driver", |cancel| {
        crate::deletion::drive(steps, cancel)
    });
    if config.tiering.scheduler {
        let (state, tick, every) = (
            Arc::clone(&state),
            config.tiering.tick,
            config.tiering.maintenance_interval,
        );
        background.spawn("tiering scheduler", |cancel| {
            crate::scheduler::run_tiering(state, tick, every, cancel)
        });
    } else {
        tracing::warn!("the tiering scheduler is off: tables are tiered only on request");
    }

    let interceptor_authn = Arc::clone(&authn);
    let interceptor_audit = Arc::clone(&audit);
    let flight_server = FlightServiceServer::new(HotgateFlight::new(Arc::clone(&state)))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Authentication runs once per call, before any method sees the request.
    let flight = tonic::service::interceptor::InterceptedService::new(
        flight_server,
        move |mut request: tonic::Request<()>| {
            let header = request
                .metadata()
                .get("authorization")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            let principal = match interceptor_authn.authenticate(header.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    let action = "authenticate";
                    CallAudit::anonymous(&interceptor_audit, request.remote_addr(), action)
                        .deny_detached(&e);
                    return Err(e.into());
                }
            };
            request.extensions_mut().insert(principal);
            Ok(request)
        },
    );
    let mut flight_stop = stop_rx.clone();
    let flight_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(flight)
            .serve_with_incoming_shutdown(no_delay(flight_listener), async move {
                let _ = flight_stop.wait_for(|s| *s).await;
            }),
    );
    let mut http_stop = stop_rx.clone();
    let http_task = tokio::spawn(
        axum::serve(
            http_listener,
            crate::http::router(Arc::clone(&state))
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = http_stop.wait_for(|s| *s).await;
        })
        .into_future(),
    );
    tracing::info!(
        flight = %config.flight_addr,
        http = %config.http_addr,
        data_dir = %config.data_dir.display(),
        tables = store.tables().len(),
        "hotgate is serving"
    );

    shutdown.await;
    tracing::info!("shutting down: no new calls; finishing in-flight ones and background work");
    let _ = stop_tx.send(true);
    // The loops stop starting new work now; they are waited for once the calls drain.
    let loops = {
        let background = background.clone();
        tokio::spawn(async move { background.stop(DRAIN_TIMEOUT).await })
    };
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let flight = flight_task.await;
        let http = http_task.await;
        (flight, http)
    })
    .await;
    match drained {
        Ok((Ok(Ok(())), Ok(Ok(())))) => {}
        Ok((flight, http)) => tracing::error!(?flight, ?http, "a server ended with an error"),
        Err(_) => tracing::warn!("in-flight calls did not finish within {DRAIN_TIMEOUT:?}"),
    }
    if !matches!(loops.await, Ok(true)) {
        tracing::warn!("background work did not end within {DRAIN_TIMEOUT:?}; closing anyway");
    }
    // Completion records of the streams that just ended, then a checkpoint that signs
    // everything, before the logs close.
    audit.flush().await;
    if let Err(e) = audit.checkpoint().await {
        tracing::error!("final audit checkpoint not written: {e}");
    }
    store.close().await;
    tracing::info!("store closed; every acknowledged append is durable");
    Ok(())
}

/// Accepted connections with Nagle's algorithm off: a streamed row must not wait for the
/// peer's delayed ACK (about 40 ms on Linux) before it leaves.
fn no_delay(
    listener: TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|c| {
            if let Err(e) = c.set_nodelay(true) {
                tracing::warn!("cannot set TCP_NODELAY: {e}");
            }
        })
    })
}

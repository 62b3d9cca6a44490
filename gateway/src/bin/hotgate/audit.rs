//! `hotgate audit ...`: the public key, offline verification of a data dir, and reading
//! records from a running server (`query`, `tail`) through `GET /v1/audit`.

use std::path::Path;
use std::time::Duration;

use hotgate_gateway::audit::{CheckpointKey, verify_audit_log};

/// Prints the checkpoint public key, creating the key pair on first use.
pub(crate) fn pubkey(config: &hotgate_gateway::Config) -> Result<(), String> {
    let key = CheckpointKey::load_or_create(&config.audit_key_path())?;
    println!("{}", key.public_hex());
    Ok(())
}

/// Verifies the audit log under the data dir without changing anything. Prints the
/// report as JSON; `Ok(false)` when the chain is damaged.
pub(crate) fn verify(
    config: &hotgate_gateway::Config,
    public_key: Option<&str>,
) -> Result<bool, String> {
    let key = match public_key {
        Some(k) => k.to_owned(),
        None => read_public_key(&config.audit_key_path())?,
    };
    let report = verify_audit_log(&config.data_dir, &key, None).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
    );
    Ok(report.intact)
}

fn read_public_key(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the checkpoint key {} ({e}); pass --public-key HEX to verify \
             with a published key",
            path.display()
        )
    })?;
    Ok(CheckpointKey::from_hex(&text)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .public_hex())
}

/// Where and as whom `query` and `tail` call the server.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// The server's HTTP address; default: `http_addr` of the configuration.
    #[arg(long)]
    pub server: Option<String>,
    /// A bearer token of a principal that may read `_system.audit`.
    #[arg(long, env = "HOTGATE_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// The filters of `GET /v1/audit`.
#[derive(Debug, clap::Args)]
pub(crate) struct Filters {
    #[arg(long)]
    pub principal: Option<String>,
    #[arg(long)]
    pub table: Option<String>,
    #[arg(long)]
    pub action: Option<String>,
    /// allow or deny.
    #[arg(long)]
    pub decision: Option<String>,
    /// RFC 3339: records at or after.
    #[arg(long)]
    pub since: Option<String>,
    /// RFC 3339: records before.
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long)]
    pub query_id: Option<String>,
}

impl Filters {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("principal", &self.principal),
            ("table", &self.table),
            ("action", &self.action),
            ("decision", &self.decision),
            ("since", &self.since),
            ("until", &self.until),
            ("query_id", &self.query_id),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
    }
}

fn base_url(config: &hotgate_gateway::Config, server: &ServerArgs) -> String {
    let url = server
        .server
        .clone()
        .unwrap_or_else(|| config.http_addr.to_string());
    let url = if url.contains("://") {
        url
    } else {
        format!("http://{url}")
    };
    url.trim_end_matches('/').to_owned()
}

async fn page(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    params: &[(&str, String)],
) -> Result<serde_json::Value, String> {
    let response = client
        .get(format!("{url}/v1/audit"))
        .bearer_auth(token)
        .query(params)
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|e| format!("{url}/v1/audit answered {status} without JSON: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "{url}/v1/audit answered {status}: {}",
            body.get("error").and_then(|e| e.as_str()).unwrap_or("")
        ));
    }
    Ok(body)
}

fn records(body: &serde_json::Value) -> Vec<serde_json::Value> {
    body.get("records")
        .and_then(|r| r.as_array())
        .cloned()
        .unwrap_or_default()
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Prints matching records, newest first, one JSON object per line, following pages
/// until `limit` records were printed.
pub(crate) fn query(
    config: &hotgate_gateway::Config,
    server: &ServerArgs,
    filters: &Filters,
    limit: usize,
) -> Result<(), String> {
    let url = base_url(config, server);
    runtime()?.block_on(async {
        let client = reqwest::Client::new();
        let mut printed = 0usize;
        let mut before: Option<u64> = None;
        while printed < limit {
            let mut params = filters.pairs();
            params.push(("limit", (limit - printed).min(1000).to_string()));
            if let Some(b) = before {
                params.push(("before_seq", b.to_string()));
            }
            let body = page(&client, &url, &server.token, &params).await?;
            for r in records(&body) {
                println!("{r}");
                printed += 1;
            }
            match body.get("next_before_seq").and_then(|s| s.as_u64()) {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        Ok(())
    })
}

/// Prints the last `last` matching records oldest first, then, with `follow`, each new
/// one as it arrives (polling every `every`).
pub(crate) fn tail(
    config: &hotgate_gateway::Config,
    server: &ServerArgs,
    filters: &Filters,
    last: usize,
    follow: bool,
    every: Duration,
) -> Result<(), String> {
    let url = base_url(config, server);
    runtime()?.block_on(async {
        let client = reqwest::Client::new();
        let mut params = filters.pairs();
        params.push(("limit", last.clamp(1, 1000).to_string()));
        let body = page(&client, &url, &server.token, &params).await?;
        let mut seen: u64 = 0;
        // Each poll is itself audited; its own records are not news.
        let mut own: std::collections::HashSet<String> = Default::default();
        own.extend(body["query_id"].as_str().map(str::to_owned));
        for r in records(&body).into_iter().rev() {
            seen = seen.max(r.get("seq").and_then(|s| s.as_u64()).unwrap_or(0));
            println!("{r}");
        }
        if !follow {
            return Ok(());
        }
        loop {
            tokio::time::sleep(every).await;
            let mut params = filters.pairs();
            params.push(("after_seq", seen.to_string()));
            params.push(("limit", "1000".into()));
            let body = page(&client, &url, &server.token, &params).await?;
            own.extend(body["query_id"].as_str().map(str::to_owned));
            for r in records(&body).into_iter().rev() {
                seen = seen.max(r.get("seq").and_then(|s| s.as_u64()).unwrap_or(0));
                if r["query_id"].as_str().is_some_and(|q| own.contains(q)) {
                    continue;
                }
                println!("{r}");
            }
        }
    })
}

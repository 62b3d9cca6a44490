//! The audit of one call: a record built up as the call is decoded and authorized, then
//! written as an allow (synced before any data leaves) or a deny; and, for streams, a
//! completion record with rows, bytes and duration when the stream ends or breaks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Instant;

use arrow_schema::Schema;
use hotgate_policy::{Principal, SecureView};
use hotgate_store::TableName;

use super::chain::{AuditRecord, Decision};
use super::writer::{AuditLog, PendingRecord};
use crate::error::{GatewayError, Result};
use crate::governance::Governance;

/// The action of a completion record.
pub const END: &str = "end";
/// The principal of records of hotgate's own scheduled actions.
pub const SYSTEM_PRINCIPAL: &str = "hotgate:system";

/// A call being audited.
#[derive(Debug)]
pub struct CallAudit {
    log: Arc<AuditLog>,
    record: AuditRecord,
    started: Instant,
    /// A request whose digest is still to be taken; see [`CallAudit::set_request_later`].
    request: Option<bytes::Bytes>,
}

impl CallAudit {
    /// The audit of a call by an authenticated `principal`.
    pub fn new(
        log: &Arc<AuditLog>,
        governance: &Governance,
        principal: &Principal,
        client_addr: Option<SocketAddr>,
        action: &str,
    ) -> Self {
        let mirror = governance.mirror();
        Self {
            log: Arc::clone(log),
            record: AuditRecord {
                query_id: new_query_id(),
                principal: principal.name.clone(),
                principal_id: principal.id,
                activated_roles: mirror.activated_roles(principal).into_iter().collect(),
                client_addr: client_addr.map(|a| a.to_string()),
                action: action.to_owned(),
                mirror_version: mirror.version(),
                token_id: principal.token_id.clone(),
                ..Default::default()
            },
            started: Instant::now(),
            request: None,
        }
    }

    /// The audit of a call that did not authenticate.
    pub fn anonymous(log: &Arc<AuditLog>, client_addr: Option<SocketAddr>, action: &str) -> Self {
        Self {
            log: Arc::clone(log),
            record: AuditRecord {
                query_id: new_query_id(),
                client_addr: client_addr.map(|a| a.to_string()),
                action: action.to_owned(),
                ..Default::default()
            },
            started: Instant::now(),
            request: None,
        }
    }

    /// The audit of something hotgate does on its own schedule (retention), recorded
    /// with the principal [`SYSTEM_PRINCIPAL`].
    pub fn system(log: &Arc<AuditLog>, action: &str) -> Self {
        Self {
            log: Arc::clone(log),
            record: AuditRecord {
                query_id: new_query_id(),
                principal: SYSTEM_PRINCIPAL.to_owned(),
                action: action.to_owned(),
                ..Default::default()
            },
            started: Instant::now(),
            request: None,
        }
    }

    /// The audit of a write by the source `name` (a Kafka topic consumed into a
    /// table), recorded with the principal `source:<name>`.
    pub fn source(log: &Arc<AuditLog>, name: &str, action: &str) -> Self {
        let mut audit = Self::system(log, action);
        audit.record.principal = format!("source:{name}");
        audit
    }

    /// Durably records an action hotgate took on its own on `table` (retention, a
    /// deletion step): allowed, with the tiers it touched, the rows it affected and what
    /// it did in words (no data values).
    pub async fn record_system(
        log: &Arc<AuditLog>,
        action: &str,
        table: &TableName,
        tiers: Option<crate::tiers::Tiers>,
        rows: Option<u64>,
        reason: String,
    ) -> Result<()> {
        let mut audit = Self::system(log, action);
        audit.set_table(table);
        if let Some(tiers) = tiers {
            audit.set_tiers(tiers);
        }
        if let Some(rows) = rows {
            audit.set_rows(rows);
        }
        audit.set_reason(reason);
        audit.allow_once().await
    }

    /// What a system action did, in words (no data values).
    pub fn set_reason(&mut self, reason: String) {
        self.record.reason = Some(reason);
    }

    /// Rows the action affected.
    pub fn set_rows(&mut self, rows: u64) {
        self.record.rows = Some(rows);
    }

    pub fn set_action(&mut self, action: &str) {
        self.record.action = action.to_owned();
    }

    pub fn set_table(&mut self, table: &TableName) {
        self.record.table = Some(table.to_string());
        self.record.tiers = vec!["hot".to_owned()];
    }

    /// The tiers the read touches (`hot` unless told otherwise).
    pub fn set_tiers(&mut self, tiers: crate::tiers::Tiers) {
        self.record.tiers = tiers.names();
    }

    /// Keeps only a digest of the request (a ticket, a descriptor, a body): literal
    /// values in filters must not be copied into the audit log.
    pub fn set_request(&mut self, bytes: &[u8]) {
        self.record.query_digest = Some(self.log.digest_key().digest(bytes));
        self.request = None;
    }

    /// Like [`CallAudit::set_request`], with the digest taken when the record is sealed:
    /// a read then plans and starts while the digest of a large ticket is computed.
    pub fn set_request_later(&mut self, bytes: bytes::Bytes) {
        self.request = Some(bytes);
    }

    /// Takes the digest of a request set with [`CallAudit::set_request_later`].
    fn digest_request(&mut self) {
        if let Some(bytes) = self.request.take() {
            self.record.query_digest = Some(self.log.digest_key().digest(&bytes));
        }
    }

    pub fn set_columns_requested(&mut self, columns: &[String]) {
        self.record.columns_requested = columns.to_vec();
    }

    /// The policies the caller's view applies and the columns the response carries.
    pub fn set_view(&mut self, view: &SecureView, returned: &Schema) {
        self.record.policies = view.applied().iter().map(|p| p.to_string()).collect();
        self.record.columns_returned = returned.fields().iter().map(|f| f.name().clone()).collect();
    }

    /// The tables a refused statement named (comma-separated, in name order).
    pub fn set_table_names<'a>(&mut self, names: impl IntoIterator<Item = &'a String>) {
        let mut names: Vec<&str> = names.into_iter().map(String::as_str).collect();
        names.sort_unstable();
        self.record.table = (!names.is_empty()).then(|| names.join(","));
    }

    /// A statement over several tables: `table` lists them all (comma-separated, in
    /// name order), each policy is prefixed with its table (`ns.t:policy@v`), and the
    /// tiers are those any of them touched.
    pub fn set_tables<'a>(
        &mut self,
        tables: impl IntoIterator<Item = (&'a TableName, &'a SecureView, crate::tiers::Tiers)>,
        returned: &Schema,
    ) {
        let (mut names, mut policies, mut tiers) = (Vec::new(), Vec::new(), Vec::new());
        for (name, view, touched) in tables {
            names.push(name.to_string());
            policies.extend(view.applied().iter().map(|p| format!("{name}:{p}")));
            for tier in touched.names() {
                if !tiers.contains(&tier) {
                    tiers.push(tier);
                }
            }
        }
        names.sort();
        self.record.table = (!names.is_empty()).then(|| names.join(","));
        self.record.policies = policies;
        self.record.tiers = tiers;
        self.record.columns_returned = returned.fields().iter().map(|f| f.name().clone()).collect();
    }

    pub fn query_id(&self) -> &str {
        &self.record.query_id
    }

    /// Writes the allow record and waits until it is durable: nothing may be returned
    /// before. Fails closed with `Unavailable`.
    pub async fn allow(self) -> Result<Completion> {
        let (completion, pending) = self.allow_queued().await?;
        pending.durable().await?;
        Ok(completion)
    }

    /// Queues the allow record and returns without waiting for its sync, so the read
    /// can be computed meanwhile; the caller must await the [`PendingRecord`] before
    /// anything leaves. Fails closed with `Unavailable` if it cannot be queued.
    pub async fn allow_queued(mut self) -> Result<(Completion, PendingRecord)> {
        self.digest_request();
        let mut record = self.record.clone();
        record.decision = Some(Decision::Allow);
        let pending = self.log.append(record).await?;
        Ok((self.completion(), pending))
    }

    fn completion(self) -> Completion {
        Completion {
            log: self.log,
            base: self.record,
            started: self.started,
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            failure: Mutex::new(None),
            finished: AtomicBool::new(false),
        }
    }

    /// Writes the allow record of a call that returns nothing but the answer it has
    /// already computed (FlightInfo, admin changes), synced before the answer leaves.
    pub async fn allow_once(mut self) -> Result<()> {
        self.digest_request();
        let mut record = self.record;
        record.decision = Some(Decision::Allow);
        record.duration_ms = Some(self.started.elapsed().as_millis() as u64);
        self.log.append(record).await?.durable().await?;
        Ok(())
    }

    /// Writes a deny record with the reason and waits until it is durable, so a denial
    /// is on record before the caller hears of it. If it cannot be written, that is
    /// logged; the call is refused either way.
    pub async fn deny(self, error: &GatewayError) {
        let (log, record) = self.deny_record(error);
        let written = match log.append(record).await {
            Ok(pending) => pending.durable().await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::error!("denial not audited: {e}");
        }
    }

    /// [`CallAudit::deny`] without waiting, where the caller cannot (an interceptor).
    pub fn deny_detached(self, error: &GatewayError) {
        let (log, record) = self.deny_record(error);
        log.append_detached(record);
    }

    fn deny_record(mut self, error: &GatewayError) -> (Arc<AuditLog>, AuditRecord) {
        self.digest_request();
        let mut record = self.record;
        record.decision = Some(Decision::Deny);
        record.reason = Some(error.audit_reason());
        record.duration_ms = Some(self.started.elapsed().as_millis() as u64);
        (self.log, record)
    }
}

/// An allowed stream's completion record, written when the last handle is dropped (it
/// rides along with the next audit write, within [`super::writer::DEFERRED_FLUSH`]).
#[derive(Debug)]
pub struct Completion {
    log: Arc<AuditLog>,
    base: AuditRecord,
    started: Instant,
    rows: AtomicU64,
    bytes: AtomicU64,
    /// The audit reason of the error that broke the stream (never its message).
    failure: Mutex<Option<String>>,
    finished: AtomicBool,
}

impl Completion {
    /// Marks the stream as having reached its end; a stream dropped before that was
    /// cancelled by the caller.
    pub fn finished(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    pub fn query_id(&self) -> &str {
        &self.base.query_id
    }

    pub fn add_rows(&self, rows: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn add_bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Marks the stream as broken by `error` (the first error is kept), recorded by its
    /// [`GatewayError::audit_reason`]: an error raised on a row can quote its value.
    pub fn failed(&self, error: &GatewayError) {
        let mut failure = self.failure.lock();
        failure.get_or_insert_with(|| error.audit_reason());
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        let mut record = std::mem::take(&mut self.base);
        record.action = END.to_owned();
        record.decision = Some(Decision::Allow);
        record.rows = Some(self.rows.load(Ordering::Relaxed));
        record.bytes = Some(self.bytes.load(Ordering::Relaxed));
        record.duration_ms = Some(self.started.elapsed().as_millis() as u64);
        record.reason = Some(match self.failure.lock().take() {
            Some(e) => format!("broken: {e}"),
            None if self.finished.load(Ordering::Relaxed) => "completed".to_owned(),
            None => "cancelled by the caller".to_owned(),
        });
        self.log.defer(record);
    }
}

fn new_query_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn digests_ignore_key_order_and_spacing_but_not_values_or_keys() {
        use crate::audit::chain::{CheckpointKey, DIGEST_PREFIX};
        let key = CheckpointKey::generate().digest_key();
        let ticket = br#"{"table":"s.t","filter":"ssn = '123'","lookup":[{"b":1,"a":2}]}"#;
        let a = key.digest(ticket);
        let b = key.digest(
            br#"{ "lookup": [ {"a":2, "b":1} ], "filter": "ssn = '123'", "table": "s.t" }"#,
        );
        let c = key.digest(br#"{"table":"s.t","filter":"ssn = '124'","lookup":[{"b":1,"a":2}]}"#);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), DIGEST_PREFIX.len() + 64);
        assert!(a.starts_with(DIGEST_PREFIX));
        // Without the key, a guess of the literal cannot be tested: the unkeyed hash of
        // the normal form, and the same request under another key, differ.
        let normal =
            serde_json::to_vec(&serde_json::from_slice::<serde_json::Value>(ticket).unwrap())
                .unwrap();
        let unkeyed = hex::encode(Sha256::digest(&normal));
        assert!(!a.ends_with(&unkeyed));
        assert_ne!(CheckpointKey::generate().digest_key().digest(ticket), a);
        // Not JSON: the raw bytes.
        assert_ne!(key.digest(b"not json"), key.digest(b"not  json"));
    }

    #[test]
    fn errors_are_audited_by_kind_without_their_text() {
        for e in [
            GatewayError::InvalidArgument("filter: cannot parse ssn = '123-45'".into()),
            GatewayError::Internal("Cast error: cannot cast '123-45' to Int64".into()),
            GatewayError::NotFound("no policy \"123-45\"".into()),
            GatewayError::Unavailable("cannot read /srv/123-45/x".into()),
        ] {
            let reason = e.audit_reason();
            assert!(reason.starts_with(e.code()), "{reason}");
            assert!(!reason.contains("123"), "{reason}");
        }
        let e = GatewayError::PermissionDenied("TABLE_READ_DATA on sales.orders".into());
        assert_eq!(
            e.audit_reason(),
            "permission_denied: TABLE_READ_DATA on sales.orders"
        );
    }
}

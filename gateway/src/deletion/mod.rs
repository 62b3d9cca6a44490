//! Compliance deletion requests (`POST /v1/deletions`): validation, the durable request
//! record, the suppression filter, and the steps that remove the rows and prove it.
//! Owns the request state machine; must not touch table files itself (the store
//! rewrites and searches segments and RocksDB, tiering rewrites, purges and searches
//! the Iceberg table).
//!
//! The modules depend one way, each only on those before it:
//!
//! ```text
//! request ── suppression ── ingest ── registry ── steps ── verify ── driver
//! (body,      (the filter    (what      (records,    (hot,     (the      (backoff,
//!  targets)    reads use)     sources    receipt)     cold,     proof)    retryable
//!                             drop)                   purge)              kinds)
//! ```
//!
//! A request moves `accepted → hot_applied → cold_applied → purged → verified`, each
//! step run by a background driver ([`drive`]), durable before the next starts,
//! idempotent (a crash resumes it) and audited:
//! - `accepted`: validated, written under `<data-dir>/deletions/<id>.json`; from then on
//!   its predicate suppresses matching rows in scans (both tiers), changelogs, lookups
//!   and tiering cycles, also after a restart.
//! - `hot_applied`: log segments holding a match are rewritten without it (other rows
//!   keep their offsets); primary-key keys are erased (`-D`, changelog history, RocksDB
//!   compaction). A predicate that fixes the bucket key reads only that bucket's logs.
//! - `cold_applied`: the cold files that may hold a match (pruned by partition and
//!   statistics) are rewritten without it in one overwrite commit per table.
//! - `purged`: older snapshots and refs are removed and every unreferenced file under
//!   the table location deleted, once no read still uses an expired snapshot.
//! - `verified`: scans of both tiers find no match (rows written while the request was
//!   pending are deleted then), and no file of the table holds a string literal of the
//!   predicate. The suppression is lifted and the predicate erased. The receipt names
//!   the Kafka partitions and offsets of the sources into the tables, which may still
//!   hold the subject.
//!
//! Kafka sources write nothing a pending request matches, nor, for ever, a row holding
//! a subject value a request erased ([`IngestFilter`]): a replay cannot bring it back.
//!
//! What is stored: the request's `subject` only as an HMAC (the hash key of write rules);
//! the predicate in clear until `verified` (resuming after a crash needs it), outside
//! every table's directory and Iceberg location, then only as an HMAC.

mod driver;
mod ingest;
mod registry;
mod request;
mod steps;
mod suppression;
mod verify;

pub use driver::drive;
pub use ingest::{IngestBlock, IngestFilter, ingest_blocks};
pub use registry::{
    DeletionReceipt, DeletionRecord, DeletionState, Deletions, KafkaRecords, StateChange,
};
pub use request::{DeletionBody, DeletionTarget, SUBJECT_TAG, TablesField, plan_targets};
pub use steps::{SourcePositions, StepContext, audit_step};
pub use suppression::{MIN_SEARCHED_LITERAL, Suppression};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::RecordBatch;
    use hotgate_store::TableDef;

    use super::request::parse_predicate;
    use super::*;

    fn def() -> Arc<TableDef> {
        Arc::new(
            TableDef::new(
                serde_json::from_value(serde_json::json!({
                    "namespace": "app", "name": "events",
                    "columns": [
                        {"name": "id", "type": "int64", "nullable": false},
                        {"name": "user_id", "type": "string", "nullable": false, "tags": ["subject"]},
                        {"name": "ts", "type": "timestamp_us", "nullable": false}
                    ],
                    "time_column": "ts", "bucket_key": "user_id", "buckets": 4
                }))
                .unwrap(),
            )
            .unwrap(),
        )
    }

    fn body(v: serde_json::Value) -> DeletionBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let defs = [def()];
        let cases = [
            (
                serde_json::json!({"tables": [], "predicate": "id = 1", "subject": "s"}),
                "at least one table",
            ),
            (
                serde_json::json!({"tables": ["app.nope"], "predicate": "id = 1", "subject": "s"}),
                "does not exist",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id = = 1", "subject": "s"}),
                "predicate on app.events",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "nope = 1", "subject": "s"}),
                "nope",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id + 1", "subject": "s"}),
                "not boolean",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "1 = 1", "subject": "s"}),
                "matches every row",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "true OR id = 3", "subject": "s"}),
                "matches every row",
            ),
            (
                serde_json::json!({"tables": "all", "subject": "s"}),
                "needs subject_value",
            ),
            (
                serde_json::json!({"tables": "some", "subject": "s", "subject_value": "u"}),
                "neither a list",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id = 1", "subject": " "}),
                "subject",
            ),
        ];
        for (v, expected) in cases {
            let err = plan_targets(&body(v.clone()), &defs)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{v}: {err} should say {expected}");
        }
        let all = body(
            serde_json::json!({"tables": ["app.events"], "predicate": "1 = 1",
            "subject": "s", "confirm_all": true}),
        );
        assert_eq!(plan_targets(&all, &defs).unwrap().len(), 1);
    }

    #[test]
    fn all_tables_target_the_subject_columns_and_suppress_matching_rows() {
        let defs = [def()];
        let targets = plan_targets(
            &body(serde_json::json!({"tables": "all", "subject_value": "u-'7", "subject": "s"})),
            &defs,
        )
        .unwrap();
        assert_eq!(targets[0].predicate, "\"user_id\" = 'u-''7'");
        let expr = parse_predicate(&targets[0].predicate, defs[0].stored_schema()).unwrap();
        let suppression = Suppression::new(vec![expr]);
        let schema = Arc::clone(defs[0].stored_schema());
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3])),
                Arc::new(arrow_array::StringArray::from(vec!["u-'7", "u-8", "u-'7"])),
                Arc::new(
                    arrow_array::TimestampMicrosecondArray::from(vec![0, 0, 0])
                        .with_timezone(hotgate_store::UTC),
                ),
            ],
        )
        .unwrap();
        let kept = suppression.apply(&batch).unwrap();
        assert_eq!(kept.num_rows(), 1);
        // Compiled once per schema: the same batch again, then another schema (the
        // user_id column alone), then the first again.
        assert_eq!(suppression.apply(&batch).unwrap().num_rows(), 1);
        let narrow = batch.project(&[1]).unwrap();
        assert_eq!(suppression.apply(&narrow).unwrap().num_rows(), 1);
        assert_eq!(suppression.apply(&batch).unwrap().num_rows(), 1);
    }

    #[test]
    fn a_fixed_bucket_key_names_the_only_buckets_to_rewrite() {
        let def = def();
        let of = |predicate: &str| {
            Suppression::of_target(
                &DeletionTarget {
                    table: "app.events".into(),
                    predicate: predicate.into(),
                    predicate_hmac: None,
                },
                &def,
            )
            .unwrap()
            .buckets(&def)
        };
        // The same buckets the store routes the values to.
        let routed = |values: &[&str]| {
            let array: arrow_array::ArrayRef =
                Arc::new(arrow_array::StringArray::from(values.to_vec()));
            let mut b = hotgate_store::bucket::buckets_of(&array, 4).unwrap();
            b.sort_unstable();
            b.dedup();
            b
        };
        assert_eq!(of("user_id = 'u-1'"), Some(routed(&["u-1"])));
        assert_eq!(of("'u-1' = user_id AND id > 3"), Some(routed(&["u-1"])));
        assert_eq!(
            of("user_id IN ('u-1', 'u-2', 'u-9')"),
            Some(routed(&["u-1", "u-2", "u-9"]))
        );
        assert_eq!(of("user_id = 'u-1' OR id = 3"), None);
        assert_eq!(of("id = 3"), None);
        assert_eq!(of("user_id <> 'u-1'"), None);
        assert_eq!(of("user_id NOT IN ('u-1')"), None);
    }

    /// Ingest keeps out exactly the values a subject-only predicate names, and nothing
    /// for a predicate that says more (blocking a part of it would drop rows it did not
    /// name).
    #[test]
    fn ingest_blocks_only_subject_values_and_drops_their_rows() {
        let defs = [def()];
        let hash = |v: &[u8]| format!("h({})", String::from_utf8_lossy(v));
        let target = |p: &str| DeletionTarget {
            table: "app.events".into(),
            predicate: p.into(),
            predicate_hmac: None,
        };
        let blocked = |p: &str| -> Vec<String> {
            ingest_blocks(&[target(p)], &defs, hash)
                .into_iter()
                .map(|b| format!("{}:{}", b.column, b.value_hmac))
                .collect()
        };
        assert_eq!(blocked("user_id = 'u1'"), ["user_id:h(u1)"]);
        assert_eq!(
            blocked("'u2' = user_id OR user_id IN ('u3', 'u1')"),
            ["user_id:h(u1)", "user_id:h(u2)", "user_id:h(u3)"]
        );
        for partial in [
            "user_id = 'u1' AND id > 3",
            "user_id = 'u1' OR id = 4",
            "id = 4",
            "user_id <> 'u1'",
            "user_id NOT IN ('u1')",
            "user_id LIKE 'u%'",
        ] {
            assert!(blocked(partial).is_empty(), "{partial}");
        }

        let filter = IngestFilter {
            pending: None,
            blocked: [(
                "user_id".to_owned(),
                ["h(u1)".to_owned()].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
        };
        let batch = RecordBatch::try_new(
            def().stored_schema().clone(),
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3])),
                Arc::new(arrow_array::StringArray::from(vec!["u1", "u2", "u1"])),
                Arc::new(
                    arrow_array::TimestampMicrosecondArray::from(vec![0, 0, 0])
                        .with_timezone("+00:00"),
                ),
            ],
        )
        .unwrap();
        let keep = filter.keep(&batch, hash).unwrap().unwrap();
        assert_eq!(
            keep.iter().collect::<Vec<_>>(),
            [Some(false), Some(true), Some(false)]
        );
    }
}

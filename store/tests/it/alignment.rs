//! The hot bucket and partition of a row equal iceberg-rust's `bucket[N]` and `day`
//! transforms, for every supported key type.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Int32Type};
use arrow_array::{
    ArrayRef, BinaryArray, Date32Array, Decimal128Array, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use hotgate_store::ScanRequest;
use hotgate_store::bucket::{buckets_of, day_of_micros};
use iceberg::spec::Transform;
use iceberg::transform::create_transform_function;
use rand::{Rng, SeedableRng};

use crate::common::*;

fn iceberg_buckets(keys: &ArrayRef, n: u32) -> Vec<u32> {
    let f = create_transform_function(&Transform::Bucket(n)).unwrap();
    let out = f.transform(Arc::clone(keys)).unwrap();
    out.as_primitive::<Int32Type>()
        .values()
        .iter()
        .map(|v| *v as u32)
        .collect()
}

fn random_keys(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<(&'static str, ArrayRef)> {
    let strings: Vec<String> = (0..n)
        .map(|_| {
            let len = rng.random_range(0..40);
            (0..len)
                .map(|_| rng.random_range(' '..='~'))
                .collect::<String>()
                + "é"
        })
        .collect();
    let binaries: Vec<Vec<u8>> = (0..n)
        .map(|_| (0..rng.random_range(0..40)).map(|_| rng.random()).collect())
        .collect();
    vec![
        (
            "int",
            Arc::new(Int32Array::from(
                (0..n).map(|_| rng.random()).collect::<Vec<i32>>(),
            )) as ArrayRef,
        ),
        (
            "long",
            Arc::new(Int64Array::from(
                (0..n).map(|_| rng.random()).collect::<Vec<i64>>(),
            )),
        ),
        ("string", Arc::new(StringArray::from(strings))),
        (
            "date",
            Arc::new(Date32Array::from(
                (0..n)
                    .map(|_| rng.random_range(-40_000..40_000))
                    .collect::<Vec<i32>>(),
            )),
        ),
        (
            "timestamp",
            Arc::new(
                TimestampMicrosecondArray::from(
                    (0..n)
                        .map(|_| rng.random_range(-(1i64 << 52)..(1i64 << 52)))
                        .collect::<Vec<i64>>(),
                )
                .with_timezone("+00:00"),
            ),
        ),
        (
            "binary",
            Arc::new(BinaryArray::from_iter_values(binaries.iter())),
        ),
        (
            "decimal",
            Arc::new(
                Decimal128Array::from(
                    (0..n)
                        .map(|i| {
                            // Cover small, negative and wide values, and sign boundaries.
                            let v: i128 = rng.random::<i64>() as i128 >> rng.random_range(0..63);
                            if i % 10 == 0 {
                                -(128i128 << (i % 100))
                            } else {
                                v
                            }
                        })
                        .collect::<Vec<i128>>(),
                )
                .with_precision_and_scale(38, 4)
                .unwrap(),
            ),
        ),
    ]
}

#[test]
fn buckets_match_iceberg_for_every_key_type() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1ceb);
    for n in [1, 2, 7, 16, 1000] {
        for (name, keys) in random_keys(&mut rng, 2000) {
            let ours = buckets_of(&keys, n).unwrap();
            let theirs = iceberg_buckets(&keys, n);
            assert_eq!(
                ours, theirs,
                "bucket[{n}] of {name} keys differs from iceberg-rust"
            );
        }
    }
}

#[test]
fn day_partition_matches_iceberg() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let ts: Vec<i64> = (0..5000)
        .map(|_| rng.random_range(-(1i64 << 50)..(1i64 << 50)))
        .collect();
    let array: ArrayRef =
        Arc::new(TimestampMicrosecondArray::from(ts.clone()).with_timezone("+00:00"));
    let f = create_transform_function(&Transform::Day).unwrap();
    let days = f.transform(array).unwrap();
    let theirs = days.as_primitive::<Date32Type>().values();
    for (t, d) in ts.iter().zip(theirs.iter()) {
        assert_eq!(day_of_micros(*t), *d, "day of {t}");
    }
}

/// End to end: every row lands in the log iceberg-rust would put it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_rows_sit_in_their_iceberg_partition() {
    let (_dir, store, _) = store_with(events_spec(5)).await;
    let batch = events(0..500, |i| T0 + (i % 3) * DAY_US + i);
    store.append(&events_name(), &batch).await.unwrap();
    let table = store.table(&events_name()).unwrap();
    let mut seen = 0;
    for scanned in table.scan(&ScanRequest::default()).unwrap() {
        let scanned = scanned.unwrap();
        let keys = Arc::clone(scanned.batch.column_by_name("customer").unwrap());
        let ts = scanned.batch.column_by_name("ts").unwrap().clone();
        let days = create_transform_function(&Transform::Day)
            .unwrap()
            .transform(ts)
            .unwrap();
        for (b, d) in iceberg_buckets(&keys, 5)
            .iter()
            .zip(days.as_primitive::<Date32Type>().values())
        {
            assert_eq!(*b, scanned.log.bucket);
            assert_eq!(Some(*d), scanned.log.day);
            seen += 1;
        }
    }
    assert_eq!(seen, 500);
    store.close().await;
}
